namespace Allocator;

/// <summary>One release of a batch: the allocation to end and the epoch its holder was given.</summary>
/// <param name="AllocationId">The allocation to end.</param>
/// <param name="Epoch">The holder's fencing epoch; a stale one ends nothing.</param>
public readonly record struct LeaseRelease(Guid AllocationId, long Epoch)
{
    /// <summary>
    /// The principal releasing: an allocation of another owner is answered
    /// <see cref="LeaseStatus.NotFound"/>, exactly as one that does not exist. An allocation without
    /// an owner may be released by anyone. <see langword="null"/>: any owner (operators).
    /// </summary>
    public string? Owner { get; init; }
}
