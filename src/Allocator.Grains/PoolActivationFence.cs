namespace Allocator.Grains;

/// <summary>
/// This activation's claim on its pool in the store (issue 47, invariant 14): taken before the
/// activation's first allocation batch, so that from then on an earlier activation of the pool (one
/// superseded while its instance hung, that wakes later) cannot undo what this one answers. The
/// store arbitrates (<see cref="IWorkerStore.ClaimPoolActivationAsync"/>); what the fence guards
/// today is the release of an allocation whose caller gave up (<see cref="IWorkerStore.ReleaseAbandonedAsync"/>).
/// </summary>
/// <remarks>Single-threaded by contract: called from the grain's turns only.</remarks>
internal sealed class PoolActivationFence(string poolId, IWorkerStore store)
{
    private Task<long>? _claim;

    /// <summary>The fence the store gave this activation; <see langword="null"/> before it answered.</summary>
    public long? Value => _claim is { IsCompletedSuccessfully: true, Result: > 0 } claim ? claim.Result : null;

    /// <summary>
    /// Claims the pool once for this activation (again after a claim that failed, or that found no
    /// pool). A failure is the store's, and allocated nothing: it is never an unknown outcome.
    /// </summary>
    public async Task<long> EnsureAsync(CancellationToken cancellationToken)
    {
        if (_claim is null || _claim.IsFaulted || _claim.IsCanceled || _claim is { IsCompletedSuccessfully: true, Result: 0 })
        {
            _claim = store.ClaimPoolActivationAsync(poolId, cancellationToken);
        }

        try
        {
            return await _claim;
        }
        catch (AllocatorException ex) when (ex.OutcomeUnknown)
        {
            // A claim lost with its connection may have been recorded; the next one supersedes it.
            throw new AllocatorException(ex.Kind, "The pool's activation could not be recorded in the store; nothing was allocated. Retry.", outcomeUnknown: false, ex);
        }
    }
}
