using Allocator.LoadTests.Integration;

namespace Allocator.LoadTests.Scenarios;

/// <summary>
/// Emulates a distant database for the in-memory store: every call waits one round trip first.
/// Only an approximation of the proxy (no row lock is held across the wait, unlike a real
/// interactive transaction), labelled "emulated RTT" in reports.
/// </summary>
internal sealed class DelayedWorkerStore(IWorkerStore inner, TimeSpan rtt, TimeProvider time) : IWorkerStore, IPoolChangeFeed
{
    public string Name => inner.Name;

    public int? ConnectionLimit => inner.ConnectionLimit;

    public IWorkerStore Inner => inner;

    public async Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.UpsertPoolAsync(poolId, settings, cancellationToken);
    }

    public async Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.GetPoolAsync(poolId, cancellationToken);
    }

    public async Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.GetPoolStatisticsAsync(poolId, cancellationToken);
    }

    public async Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.RegisterWorkersAsync(poolId, workers, cancellationToken);
    }

    public async Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.DeregisterWorkerAsync(poolId, workerId, cancellationToken);
    }

    public async Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.SetWorkerStateAsync(poolId, workerId, state, cancellationToken);
    }

    public async Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.ReportLoadAsync(poolId, workerId, epoch, loadIndex, cancellationToken);
    }

    public async Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.GetWorkerAsync(poolId, workerId, cancellationToken);
    }

    public async Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.GetWorkersAsync(poolId, cancellationToken);
    }

    public async Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.AllocateAsync(poolId, requests, cancellationToken);
    }

    public async Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.ReleaseAsync(poolId, allocationId, epoch, cancellationToken);
    }

    public async Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.ReleaseAsync(poolId, releases, cancellationToken);
    }

    public async Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner = null, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.RenewAsync(poolId, allocationId, epoch, lease, owner, cancellationToken);
    }

    public async Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.GetAllocationAsync(poolId, allocationId, cancellationToken);
    }

    public async Task<Allocation?> GetAllocationByKeyAsync(string poolId, string sessionKey, string? owner, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.GetAllocationByKeyAsync(poolId, sessionKey, owner, cancellationToken);
    }

    public async Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken = default)
    {
        await Wait(cancellationToken);
        return await inner.ReapExpiredAsync(maxCount, cancellationToken);
    }

    public IDisposable Subscribe(Action<PoolChanged> handler) => ChangeFeed.Of(inner).Subscribe(handler);

    private Task Wait(CancellationToken cancellationToken) => Task.Delay(rtt, time, cancellationToken);
}
