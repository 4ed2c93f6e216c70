namespace Allocator;

/// <summary>
/// How a store's database keeps committed work beyond one server (issue 48): what the host shows
/// in <c>/health</c> and at start, and warns about when a failover could lose answered work.
/// A store whose database says nothing about it (the in-memory store) does not implement it.
/// </summary>
public interface IStoreReplication
{
    /// <summary>Asks the database, as it reports it now (a standby may connect or leave at any time).</summary>
    Task<StoreReplication> ReadReplicationAsync(CancellationToken cancellationToken = default);
}

/// <summary>How the database replicates its commits.</summary>
public enum ReplicationMode
{
    /// <summary>No standby receives the commits (or the database does not say: storage-level replication looks the same).</summary>
    None,

    /// <summary>Standbys receive the commits after they are acknowledged: a failover may lose what the service answered.</summary>
    Asynchronous,

    /// <summary>A commit is acknowledged only once a standby has it: a failover to that standby loses nothing answered.</summary>
    Synchronous,
}

/// <summary>What the database says of its replication.</summary>
/// <param name="Mode">The weakest guarantee a commit gets now.</param>
/// <param name="Standbys">The standbys connected, by name, with how each receives commits (e.g. <c>standby (sync)</c>).</param>
/// <param name="AsynchronousStandbys">The standbys a failover to which could lose answered work.</param>
public sealed record StoreReplication(ReplicationMode Mode, IReadOnlyList<string> Standbys, IReadOnlyList<string> AsynchronousStandbys)
{
    /// <summary>The mode in the words <c>/health</c> uses: <c>synchronous</c>, <c>asynchronous</c> or <c>none</c>.</summary>
    public string Name => Mode switch
    {
        ReplicationMode.Synchronous => "synchronous",
        ReplicationMode.Asynchronous => "asynchronous",
        _ => "none",
    };
}
