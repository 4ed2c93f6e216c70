namespace Allocator.Host.Options;

/// <summary>
/// Rate limiting per caller (API key name; the remote address for anonymous callers), as a token
/// bucket. Defaults are generous so load tests are not throttled. Bound from <c>Allocator:RateLimit</c>.
/// </summary>
public sealed class AllocatorRateLimitOptions
{
    public const string Section = "Allocator:RateLimit";

    /// <summary>Turns rate limiting off. Default: false.</summary>
    public bool Disabled { get; set; }

    /// <summary>Requests a caller may make per second, sustained. Default: 20,000.</summary>
    public int PermitsPerSecond { get; set; } = 20_000;

    /// <summary>Requests a caller may make in a burst above the sustained rate. Default: 40,000.</summary>
    public int Burst { get; set; } = 40_000;
}
