namespace Allocator.Storage.Internal;

/// <summary>
/// The end_reason values both databases write (CHECK constraints in their schemas), read back as
/// <see cref="AllocationEndReason"/>. Linked into both database stores from <c>src/Shared</c>.
/// </summary>
internal static class EndReasons
{
    /// <summary>The reason stored; <see langword="null"/> for a value this build does not know (written by a later release).</summary>
    public static AllocationEndReason? Parse(string stored) => stored switch
    {
        "released" => AllocationEndReason.Released,
        "expired" => AllocationEndReason.Expired,
        "worker-deregistered" => AllocationEndReason.WorkerDeregistered,
        _ => null,
    };
}
