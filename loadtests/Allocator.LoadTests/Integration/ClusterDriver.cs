using Allocator.Client;
using Allocator.LoadTests.Scenarios;
using Allocator.Networking;

namespace Allocator.LoadTests.Integration;

/// <summary>
/// Several host processes (<c>Allocator.Host.dll</c>, as deployed) on the run's PostgreSQL schema,
/// forming one Orleans cluster with membership in the same database; callers are spread over
/// them round-robin, so every pool grain is reached from every instance. The processes reach the
/// database through the run's connection string, so through the latency proxy when an RTT is
/// injected.
/// </summary>
internal sealed class ClusterDriver : IAllocationDriver
{
    private readonly List<HostProcess> _hosts;
    private readonly List<AllocatorClient> _clients;
    private long _next;

    private ClusterDriver(List<HostProcess> hosts)
    {
        _hosts = hosts;
        _clients = [.. hosts.Select(h => new AllocatorClient(h.Http))];
    }

    public string Name => $"cluster of {_hosts.Count}";

    /// <param name="connectionString">The run's connection string (through the proxy when an RTT is injected).</param>
    /// <param name="schema">The run's schema (already migrated and provisioned).</param>
    public static async Task<IAllocationDriver> StartAsync(string connectionString, string schema, int instances, int maxConnections, CancellationToken cancellationToken)
    {
        var run = Guid.NewGuid().ToString("N")[..10];
        List<HostProcess> hosts = [];
        try
        {
            for (var i = 0; i < instances; i++)
            {
                hosts.Add(HostProcess.Start(
                [
                    "--Allocator:Auth:Disabled=true", "--Allocator:RateLimit:Disabled=true",
                    $"--ConnectionStrings:Allocator={WithPoolSize(connectionString, maxConnections)}",
                    $"--Allocator:Storage:Postgres:Schema={schema}",
                    "--Allocator:Cluster:Membership=postgres",
                    $"--Allocator:Cluster:ClusterId=load-{run}",
                    // Named after the run's schema, so the run's end removes both (PostgresStoreProvider).
                    $"--Allocator:Cluster:MembershipSchema={PostgresStoreProvider.MembershipSchemaOf(schema)}",
                    $"--Allocator:Cluster:SiloPort={FreePort.Next()}",
                ]));
            }

            foreach (var host in hosts)
            {
                await host.WaitReadyAsync(cancellationToken);
            }

            return new ClusterDriver(hosts);
        }
        catch
        {
            await HostProcess.StopAllAsync(hosts);
            throw;
        }
    }

    public Task<AllocationOutcome> AllocateAsync(string poolId, AllocationRequest request, CancellationToken cancellationToken) =>
        HttpCalls.AllocateAsync(NextClient(), poolId, request, cancellationToken);

    public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken) =>
        HttpCalls.ReleaseAsync(NextClient(), poolId, allocationId, epoch, cancellationToken);

    public Task RegisterAsync(string poolId, WorkerRegistration registration, CancellationToken cancellationToken) =>
        HttpCalls.RegisterAsync(NextClient(), poolId, registration, cancellationToken);

    public async ValueTask DisposeAsync() => await HostProcess.StopAllAsync(_hosts);

    private AllocatorClient NextClient() => _clients[(int)(Interlocked.Increment(ref _next) % _clients.Count)];

    internal static string WithPoolSize(string connectionString, int maxConnections) =>
        new Npgsql.NpgsqlConnectionStringBuilder(connectionString) { MaxPoolSize = maxConnections }.ConnectionString;
}
