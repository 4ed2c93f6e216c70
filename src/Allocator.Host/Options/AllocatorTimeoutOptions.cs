namespace Allocator.Host.Options;

/// <summary>
/// Timeouts, which must nest (DESIGN.md invariant 10): a store lock wait ends before the store
/// command, the command before the grain call, the grain call before the HTTP request. Bound
/// from <c>Allocator:Timeouts</c>; checked at start-up.
/// </summary>
public sealed class AllocatorTimeoutOptions
{
    public const string Section = "Allocator:Timeouts";

    /// <summary>Longest wait for a row lock (blocking fallback, strict strategy). Default: 2 s.</summary>
    public TimeSpan LockTimeout { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>Longest one store command may run. Default: 5 s.</summary>
    public TimeSpan CommandTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Longest one grain call may take, not counting the time a caller asked to wait for
    /// capacity (<c>maxWaitMs</c>), which is added on top; then the caller gets 503. Default: 10 s.
    /// </summary>
    public TimeSpan GrainCallTimeout { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>
    /// Longest an HTTP request may take (again plus the allocation's <c>maxWaitMs</c>); the
    /// caller then gets 504. Default: 15 s.
    /// </summary>
    public TimeSpan RequestTimeout { get; set; } = TimeSpan.FromSeconds(15);
}
