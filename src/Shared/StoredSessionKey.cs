namespace Allocator.Storage.Internal;

/// <summary>
/// How a database store keeps an allocation's owner: in front of its session key, in the one column
/// whose unique index enforces "one allocation per key" (invariant 4), so that the key is the
/// owner's (issue 22: another owner's request with the same key is another key) without a second
/// column in that index. A unit separator (U+001F) parts them: session keys hold no control
/// characters (<see cref="AllocatorValidation.CheckSessionKey"/>) and owners are ids, so the first
/// separator is the only one that can part them. A key without one has no owner (allocations made
/// before owners existed, and operators' requests).
/// </summary>
/// <remarks>
/// One source file compiled into both database stores (linked from <c>src/Shared</c>), so the two
/// cannot read each other's rows differently.
/// </remarks>
internal static class StoredSessionKey
{
    public const char Separator = '\u001F';

    /// <summary>The longest stored key: an owner id, the separator, a session key.</summary>
    public const int MaxLength = AllocatorLimits.MaxIdLength + 1 + AllocatorLimits.MaxSessionKeyLength;

    public static string Of(AllocationRequest request) => Of(request.Owner, request.SessionKey);

    public static string Of(string? owner, string sessionKey) => owner is null ? sessionKey : string.Concat(owner, "\u001F", sessionKey);

    /// <summary>The owner and the caller's session key of a stored key.</summary>
    public static (string? Owner, string SessionKey) Split(string stored)
    {
        var separator = stored.IndexOf(Separator, StringComparison.Ordinal);
        return separator < 0 ? (null, stored) : (stored[..separator], stored[(separator + 1)..]);
    }

    /// <summary>Whether a caller acting as <paramref name="owner"/> (null: anyone) may see the allocation stored under <paramref name="stored"/>.</summary>
    public static bool Visible(string stored, string? owner) =>
        owner is null || Split(stored).Owner is not { } actual || string.Equals(actual, owner, StringComparison.Ordinal);
}
