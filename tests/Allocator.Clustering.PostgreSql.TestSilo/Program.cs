using System.Globalization;
using System.Net;
using Allocator.Clustering.PostgreSql;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Orleans.Configuration;
using Orleans.Hosting;
using Orleans.Runtime;

// A bare silo for process-level failure tests. Arguments:
//   <connection string> <schema> <cluster id> <silo port> <gateway port> <probe timeout ms> <missed probes limit>
// Prints "READY <generation>" once the silo has started, then runs until it is stopped or killed.
if (args.Length != 7)
{
    await Console.Error.WriteLineAsync("usage: TestSilo <connection string> <schema> <cluster id> <silo port> <gateway port> <probe timeout ms> <missed probes limit>");
    return 2;
}

var builder = Host.CreateApplicationBuilder(new HostApplicationBuilderSettings { DisableDefaults = true });
builder.Logging.ClearProviders();
builder.UseOrleans(silo =>
{
    silo.UseAllocatorPostgresClustering(o =>
    {
        o.ConnectionString = args[0];
        o.Schema = args[1];
    });
    silo.Configure<ClusterOptions>(o =>
    {
        o.ClusterId = args[2];
        o.ServiceId = "allocator-tests";
    });
    silo.Configure<SiloOptions>(o => o.SiloName = "test-silo-process");
    silo.Configure<ClusterMembershipOptions>(o =>
    {
        o.ProbeTimeout = TimeSpan.FromMilliseconds(int.Parse(args[5], CultureInfo.InvariantCulture));
        o.NumMissedProbesLimit = int.Parse(args[6], CultureInfo.InvariantCulture);
    });
    silo.ConfigureEndpoints(IPAddress.Loopback, int.Parse(args[3], CultureInfo.InvariantCulture), int.Parse(args[4], CultureInfo.InvariantCulture));
});

using var host = builder.Build();
await host.StartAsync();
Console.WriteLine($"READY {host.Services.GetRequiredService<ILocalSiloDetails>().SiloAddress.Generation}");
await host.WaitForShutdownAsync();
return 0;
