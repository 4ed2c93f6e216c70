using System.Net;
using Allocator.Client;
using Allocator.Host;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.Extensions.DependencyInjection;
using ClientAllocateRequest = Allocator.Client.AllocateRequest;

namespace Allocator.LoadTests.Integration;

/// <summary>
/// Allocates over HTTP: the real Allocator host (Kestrel on 127.0.0.1, a dynamic port, the full
/// middleware pipeline and the pool grains) runs in this process over the run's store, and
/// every call goes through <see cref="AllocatorClient"/> on one shared <see cref="HttpClient"/>.
/// </summary>
/// <remarks>
/// The host is given the run's store (the same PostgreSQL schema the scenario provisioned and
/// the audit reads, on the connection string that goes through the latency proxy when an RTT is
/// injected), so the proxy sits between the service and the database. Auth and rate limiting
/// are switched off: they are not what the benchmark measures. The store registered here
/// replaces the host's configured one (which is then never created); the container does not
/// own or dispose it.
/// </remarks>
internal sealed class HttpDriver : IAllocationDriver
{
    private readonly WebApplication _app;
    private readonly HttpClient _http;
    private readonly AllocatorClient _client;

    private HttpDriver(WebApplication app, HttpClient http)
    {
        _app = app;
        _http = http;
        _client = new AllocatorClient(http);
    }

    public string Name => "http";

    public static async Task<IAllocationDriver> StartAsync(IWorkerStore store, CancellationToken cancellationToken)
    {
        string[] args =
        [
            "--urls", "http://127.0.0.1:0",
            "--environment", "Production",
            "--Logging:LogLevel:Default", "Error",
            "--Allocator:Auth:Disabled=true",
            "--Allocator:RateLimit:Disabled=true",
            "--Allocator:Cluster:SiloPort=0",
            "--Allocator:Shutdown:DrainDelay=00:00:00", // no load balancer to leave
        ];
        var app = AllocatorApp.Build(args, builder => builder.Services.AddSingleton(store).AddSingleton(ChangeFeed.Of(store)));
        try
        {
            await app.StartAsync(cancellationToken);
        }
        catch
        {
            await app.DisposeAsync();
            throw;
        }

        var address = app.Services.GetRequiredService<IServer>().Features.Get<IServerAddressesFeature>()!.Addresses.Single();
        var handler = new SocketsHttpHandler
        {
            // Every caller of the largest workload (wide-250: 1,000 in flight) gets its own connection.
            MaxConnectionsPerServer = 2_048,
            PooledConnectionLifetime = Timeout.InfiniteTimeSpan,
            AutomaticDecompression = DecompressionMethods.None,
            UseProxy = false,
        };
        var http = new HttpClient(handler) { BaseAddress = new Uri(address.TrimEnd('/') + "/"), Timeout = TimeSpan.FromSeconds(60) };
        return new HttpDriver(app, http);
    }

    /// <summary>Allocate through preferred pools (<c>POST /v1/allocations</c>, naming the pool and <see cref="SecondPool"/>) instead of the pool's own path.</summary>
    public bool Preferred { get; set; }

    /// <summary>The pool a preferred allocation names second (the scenario creates it, empty).</summary>
    public static string SecondPool(string poolId) => poolId + "-next";

    public Task<AllocationOutcome> AllocateAsync(string poolId, AllocationRequest request, CancellationToken cancellationToken) =>
        HttpCalls.AllocateAsync(_client, poolId, request, cancellationToken, Preferred);

    public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken) =>
        HttpCalls.ReleaseAsync(_client, poolId, allocationId, epoch, cancellationToken);

    public Task RegisterAsync(string poolId, WorkerRegistration registration, CancellationToken cancellationToken) =>
        HttpCalls.RegisterAsync(_client, poolId, registration, cancellationToken);

    public async ValueTask DisposeAsync()
    {
        _http.Dispose();
        await _app.StopAsync();
        await _app.DisposeAsync();
    }
}

/// <summary>The calls every HTTP driver makes through the typed client, mapped back to the store's terms.</summary>
internal static class HttpCalls
{
    public static async Task<AllocationOutcome> AllocateAsync(AllocatorClient client, string poolId, AllocationRequest request, CancellationToken cancellationToken, bool preferred = false)
    {
        var asked = new ClientAllocateRequest { Units = request.Units };
        var result = preferred
            ? await client.AllocateAnyAsync([poolId, HttpDriver.SecondPool(poolId)], asked, request.SessionKey, cancellationToken)
            : await client.AllocateAsync(poolId, asked, request.SessionKey, cancellationToken);
        if (result.Allocation is not { } info)
        {
            return AllocationOutcome.NoCapacity();
        }

        var allocation = new Allocation
        {
            AllocationId = info.AllocationId,
            PoolId = info.PoolId,
            WorkerId = info.WorkerId,
            Address = info.Address,
            SessionKey = info.SessionKey,
            Units = info.Units,
            Epoch = info.Epoch,
            CreatedAt = info.CreatedAt,
            ExpiresAt = info.ExpiresAt,
            EndedAt = info.EndedAt,
        };

        // The HTTP answer does not carry the decision (rank, excess): it is on the trace, not the wire.
        return new AllocationOutcome(result.Status == AllocateStatus.Existing ? AllocationStatus.Existing : AllocationStatus.Allocated, allocation, default);
    }

    public static async Task<LeaseResult> ReleaseAsync(AllocatorClient client, string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken)
    {
        try
        {
            await client.ReleaseAsync(poolId, allocationId, epoch, cancellationToken);
            return new LeaseResult(LeaseStatus.Ok, null);
        }
        catch (AllocatorApiException e) when (e.Type is ProblemTypes.NotFound or ProblemTypes.Conflict or ProblemTypes.StaleEpoch)
        {
            var status = e.Type switch
            {
                ProblemTypes.NotFound => LeaseStatus.NotFound,
                ProblemTypes.Conflict => LeaseStatus.NotActive,
                _ => LeaseStatus.StaleEpoch,
            };
            return new LeaseResult(status, null);
        }
    }

    public static Task RegisterAsync(AllocatorClient client, string poolId, WorkerRegistration registration, CancellationToken cancellationToken) =>
        client.RegisterWorkerAsync(poolId, registration.WorkerId, new Client.WorkerRegistration(registration.Address, registration.Capacity, registration.Tags), cancellationToken);
}
