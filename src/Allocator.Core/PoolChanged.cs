namespace Allocator;

public enum PoolChangeKind
{
    /// <summary>Slots became free or eligible (release, expiry, registration, undrain, load report).</summary>
    CapacityAvailable,

    /// <summary>The pool's settings changed.</summary>
    SettingsChanged,
}

/// <summary>A change to a pool that waiting callers or caches care about. May come from another instance.</summary>
public readonly record struct PoolChanged(string PoolId, PoolChangeKind Kind);
