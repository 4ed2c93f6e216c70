using Allocator.Grains;
using Allocator.Networking;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

// Starts a silo with Allocator's grains and the grain below. Exit 0: it started (and stopped);
// exit 3: the start failed, with the reason on standard output.
var builder = Host.CreateApplicationBuilder(new HostApplicationBuilderSettings { EnvironmentName = "Production" });
builder.Logging.ClearProviders();
builder.Services.AddAllocatorInMemory();
builder.UseOrleans(silo => silo.UseLocalhostClustering(siloPort: FreePort.Next(), gatewayPort: 0).AddAllocatorGrains());
using var host = builder.Build();
try
{
    await host.StartAsync();
    await host.StopAsync();
    Console.WriteLine("started");
    return 0;
}
catch (Exception ex)
{
    Console.WriteLine(ex);
    return 3;
}
