using System.Collections.Concurrent;

namespace Allocator.Host.Storage;

/// <summary>
/// How each database replicates its commits (issue 48), read at start and every
/// <see cref="Interval"/>: <c>/health</c> shows it, the first reading is logged as part of the
/// start-up summary, and an asynchronous standby is warned about by name, at start and whenever
/// the mode changes. Synchronous replication is what keeps invariant 3 (a success means
/// committed) through a failover; with an asynchronous standby a failover may lose answered work.
/// </summary>
internal sealed partial class ReplicationWatch(IServiceProvider services, TimeProvider time, ILogger<ReplicationWatch> logger) : BackgroundService
{
    /// <summary>How often the databases are asked again: a standby may connect or leave at any time.</summary>
    internal static TimeSpan Interval { get; } = TimeSpan.FromSeconds(30);

    private readonly ConcurrentDictionary<string, StoreReplication> _latest = new(StringComparer.Ordinal);

    /// <summary>The last reading of each database whose store reports replication, by database name.</summary>
    public IReadOnlyDictionary<string, StoreReplication> Latest => _latest;

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        // Resolved here, not in the constructor: the stores are created when the host starts.
        var databases = services.GetRequiredService<Databases>().All.Where(d => d.Store is IStoreReplication).ToList();
        if (databases.Count == 0)
        {
            return;
        }

        using var timer = new PeriodicTimer(Interval, time);
        do
        {
            foreach (var database in databases)
            {
                await ReadAsync(database, (IStoreReplication)database.Store, stoppingToken);
            }
        }
        while (await WaitAsync(timer, stoppingToken));
    }

    internal async Task ReadAsync(Database database, IStoreReplication store, CancellationToken cancellationToken)
    {
        StoreReplication now;
        try
        {
            now = await store.ReadReplicationAsync(cancellationToken);
        }
        catch (Exception exception) when (exception is not OperationCanceledException)
        {
            // A database that is down says nothing: the last reading stands, readiness tells the rest.
            return;
        }

        var before = _latest.TryGetValue(database.Name, out var seen) ? seen : null;
        _latest[database.Name] = now;
        if (before is not null && before.Mode == now.Mode)
        {
            return;
        }

        var standbys = now.Standbys.Count == 0 ? "no standby connected" : string.Join(", ", now.Standbys);
        if (now.Mode == ReplicationMode.Asynchronous)
        {
            LogAsynchronous(logger, database.Name, string.Join(", ", now.AsynchronousStandbys), standbys);
        }
        else
        {
            LogReplication(logger, database.Name, now.Name, standbys);
        }
    }

    private static async Task<bool> WaitAsync(PeriodicTimer timer, CancellationToken cancellationToken)
    {
        try
        {
            return await timer.WaitForNextTickAsync(cancellationToken);
        }
        catch (OperationCanceledException)
        {
            return false;
        }
    }

    [LoggerMessage(Level = LogLevel.Information, Message = "Allocator store replication: database '{Database}' is {Mode} ({Standbys}).")]
    private static partial void LogReplication(ILogger logger, string database, string mode, string standbys);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Allocator store replication: database '{Database}' replicates ASYNCHRONOUSLY to {Asynchronous} ({Standbys}). A failover to an asynchronous standby may lose allocations, releases and registrations the service already answered as done; name the standby in synchronous_standby_names with synchronous_commit = on to keep every answer (docs/operations.md, \"PostgreSQL high availability\").")]
    private static partial void LogAsynchronous(ILogger logger, string database, string asynchronous, string standbys);
}
