using System.Net.Http.Headers;
using Allocator.Client;
using Allocator.Host;
using Allocator.Host.Auth;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.Extensions.DependencyInjection;

namespace Allocator.Host.Tests;

/// <summary>
/// One Allocator host on real Kestrel at 127.0.0.1 with a dynamic port, with an admin, a broker
/// and a worker key. Runs on the store the host picks from its configuration: today the
/// in-memory store; pass <c>--ConnectionStrings:Allocator=...</c> (e.g. from ALLOCATOR_POSTGRES)
/// in <paramref name="extraArgs"/> or replace the store in <paramref name="configure"/> to run
/// the same tests on PostgreSQL.
/// </summary>
public sealed class TestHost : IAsyncDisposable
{
    public const string AdminKey = "admin-secret-key";
    public const string BrokerKey = "broker-secret-key";
    public const string WorkerKey = "worker-secret-key";
    public const string WorkerKeyPool = "auth-pool";
    public const string WorkerKeyWorker = "w-own";

    private readonly WebApplication _app;
    private readonly List<HttpClient> _clients = [];

    private TestHost(WebApplication app, Uri address)
    {
        _app = app;
        BaseAddress = address;
        Admin = NewClient(AdminKey);
        Broker = NewClient(BrokerKey);
        Worker = NewClient(WorkerKey);
        Anonymous = NewClient(null);
        Http = NewHttp(AdminKey);
    }

    public Uri BaseAddress { get; }

    public AllocatorClient Admin { get; }

    public AllocatorClient Broker { get; }

    public AllocatorClient Worker { get; }

    public AllocatorClient Anonymous { get; }

    /// <summary>Raw HTTP with the admin key, for requests the typed client cannot send (malformed ones).</summary>
    public HttpClient Http { get; }

    public IServiceProvider Services => _app.Services;

    public IWorkerStore Store => _app.Services.GetRequiredService<IWorkerStore>();

    public static async Task<TestHost> StartAsync(IEnumerable<string>? extraArgs = null, Action<WebApplicationBuilder>? configure = null)
    {
        string[] args =
        [
            "--urls", "http://127.0.0.1:0",
            "--environment", "Production",
            "--Logging:LogLevel:Default", "Warning",
            "--Allocator:Cluster:SiloPort=0",
            "--Allocator:Shutdown:DrainDelay=00:00:00", // no load balancer to leave: tests stop hosts at once
            $"--Allocator:Auth:ApiKeys:0:Name=admin",
            $"--Allocator:Auth:ApiKeys:0:Hash={ApiKeyRegistry.Hash(AdminKey)}",
            "--Allocator:Auth:ApiKeys:0:Scopes=admin",
            "--Allocator:Auth:ApiKeys:1:Name=broker",
            $"--Allocator:Auth:ApiKeys:1:Hash={ApiKeyRegistry.Hash(BrokerKey)}",
            "--Allocator:Auth:ApiKeys:1:Scopes=broker",
            "--Allocator:Auth:ApiKeys:2:Name=worker",
            $"--Allocator:Auth:ApiKeys:2:Hash={ApiKeyRegistry.Hash(WorkerKey).ToUpperInvariant()}",
            "--Allocator:Auth:ApiKeys:2:Scopes=worker",
            $"--Allocator:Auth:ApiKeys:2:Pool={WorkerKeyPool}",
            $"--Allocator:Auth:ApiKeys:2:WorkerId={WorkerKeyWorker}",
            .. extraArgs ?? [],
        ];
        var app = AllocatorApp.Build(args, configure);
        try
        {
            await app.StartAsync();
        }
        catch
        {
            await app.DisposeAsync();
            throw;
        }

        var address = app.Services.GetRequiredService<IServer>().Features.Get<IServerAddressesFeature>()!.Addresses.Single();
        return new TestHost(app, new Uri(address.TrimEnd('/') + "/"));
    }

    public AllocatorClient NewClient(string? apiKey) => new(NewHttp(null), apiKey);

    public HttpClient NewHttp(string? apiKey)
    {
        var http = new HttpClient { BaseAddress = BaseAddress, Timeout = TimeSpan.FromSeconds(30) };
        if (apiKey is not null)
        {
            http.DefaultRequestHeaders.Add(AllocatorClient.ApiKeyHeader, apiKey);
        }

        http.DefaultRequestHeaders.Accept.Add(new MediaTypeWithQualityHeaderValue("application/json"));
        _clients.Add(http);
        return http;
    }

    /// <summary>Stops the host as SIGTERM does (the graceful stop), without releasing it.</summary>
    public Task StopAsync() => _app.StopAsync();

    /// <summary>Stops the host (flushing telemetry) and releases it.</summary>
    public async ValueTask DisposeAsync()
    {
        foreach (var client in _clients)
        {
            client.Dispose();
        }

        await _app.StopAsync();
        await _app.DisposeAsync();
    }
}

/// <summary>Names unique to one test run, so runs can share a persistent database.</summary>
internal static class Unique
{
    private static readonly string Run = Guid.NewGuid().ToString("N")[..8];

    public static string Name(string prefix) => $"{prefix}-{Run}";
}

/// <summary>
/// The host most tests share, on the real PostgreSQL store (ALLOCATOR_POSTGRES, started by
/// eng/test.sh); each test uses its own pools.
/// </summary>
public sealed class SharedHostFixture : IAsyncLifetime
{
    public TestHost Host { get; private set; } = null!;

    public async Task InitializeAsync() => Host = await TestHost.StartAsync([$"--ConnectionStrings:Allocator={TestPostgres.ConnectionString}"]);

    public async Task DisposeAsync() => await Host.DisposeAsync();
}

[CollectionDefinition(Name)]
public sealed class SharedHostCollection : ICollectionFixture<SharedHostFixture>
{
    public const string Name = "shared host";
}

/// <summary>The PostgreSQL the end-to-end tests run on. Missing means failing, never skipping.</summary>
public static class TestPostgres
{
    public static string ConnectionString =>
        Environment.GetEnvironmentVariable("ALLOCATOR_POSTGRES") is { Length: > 0 } value
            ? value
            : throw new InvalidOperationException("ALLOCATOR_POSTGRES is not set: start PostgreSQL with eng/postgres.sh (eng/test.sh does) and export its connection string.");
}
