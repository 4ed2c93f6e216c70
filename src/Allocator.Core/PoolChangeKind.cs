namespace Allocator;

public enum PoolChangeKind
{
    /// <summary>Slots became free or eligible (release, expiry, registration, undrain, load report).</summary>
    CapacityAvailable,

    /// <summary>The pool's settings changed.</summary>
    SettingsChanged,
}
