namespace Allocator.Storage.InMemory.Internal;

/// <summary>One pool's rows: its settings, workers, allocations and the indexes by session key.</summary>
/// <remarks>Read and written only under <see cref="InMemoryStoreContext.Sync"/>.</remarks>
internal sealed class PoolData(string poolId, PoolSettings settings)
{
    public string PoolId { get; } = poolId;
    public PoolSettings Settings { get; set; } = settings;

    /// <summary>The pool's activation fence: the last one <see cref="IWorkerStore.ClaimPoolActivationAsync"/> gave.</summary>
    public long Activation { get; set; }
    public Dictionary<string, WorkerRow> Workers { get; } = new(StringComparer.Ordinal);
    public Dictionary<Guid, Allocation> Allocations { get; } = [];
    public Dictionary<string, Allocation> ActiveBySession { get; } = new(StringComparer.Ordinal);

    /// <summary>The last registration epoch of each deregistered worker id.</summary>
    public Dictionary<string, long> RetiredEpochs { get; } = new(StringComparer.Ordinal);

    /// <summary>The latest ended allocation of each key (the history's index by key).</summary>
    public Dictionary<string, Allocation> EndedBySession { get; } = new(StringComparer.Ordinal);
}

/// <summary>A worker's row; <see cref="RowLock"/> models a row lock held by another transaction.</summary>
internal sealed class WorkerRow(string poolId, string workerId)
{
    public string PoolId { get; } = poolId;
    public string WorkerId { get; } = workerId;
    public required string Address { get; set; }
    public required int Capacity { get; set; }
    public int Load { get; set; }
    public int? ReportedLoadIndex { get; set; }
    public WorkerState State { get; set; } = WorkerState.Available;
    public required string[] Tags { get; set; }
    public required long Epoch { get; set; }
    public required DateTimeOffset LastHeartbeat { get; set; }
    public SemaphoreSlim RowLock { get; } = new(1, 1);
    public long Score => WorkerScore.Compute(Load, Capacity, ReportedLoadIndex);

    public Worker Snapshot() => new()
    {
        PoolId = PoolId,
        WorkerId = WorkerId,
        Address = Address,
        Capacity = Capacity,
        Load = Load,
        ReportedLoadIndex = ReportedLoadIndex,
        State = State,
        Tags = Tags,
        Epoch = Epoch,
        LastHeartbeat = LastHeartbeat,
    };
}
