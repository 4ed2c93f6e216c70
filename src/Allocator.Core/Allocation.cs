namespace Allocator;

/// <summary>Slots granted on one worker.</summary>
public sealed record Allocation
{
    public required Guid AllocationId { get; init; }
    public required string PoolId { get; init; }
    public required string WorkerId { get; init; }
    public required string Address { get; init; }
    public required string SessionKey { get; init; }

    /// <summary>The principal it belongs to (<see cref="AllocationRequest.Owner"/>); <see langword="null"/>: none.</summary>
    public string? Owner { get; init; }
    public required int Units { get; init; }

    /// <summary>
    /// Fencing token: unique and increasing, advanced by every renew. Release and renew must
    /// present the current value; an older one belongs to a holder that has been superseded.
    /// </summary>
    public required long Epoch { get; init; }

    /// <summary>Database time.</summary>
    public required DateTimeOffset CreatedAt { get; init; }

    /// <summary>Lease expiry in database time, or <see langword="null"/> for no expiry.</summary>
    public DateTimeOffset? ExpiresAt { get; init; }

    /// <summary>When the allocation ended (release, expiry, deregistration); <see langword="null"/> while active.</summary>
    public DateTimeOffset? EndedAt { get; init; }

    /// <summary>
    /// How it ended. <see cref="IWorkerStore.GetAllocationAsync"/> always says for an ended
    /// allocation; other answers may leave it <see langword="null"/>, as it is while active.
    /// </summary>
    public AllocationEndReason? EndReason { get; init; }

    public bool IsActive => EndedAt is null;
}
