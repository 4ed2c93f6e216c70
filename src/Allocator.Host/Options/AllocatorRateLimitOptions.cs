namespace Allocator.Host.Options;

/// <summary>
/// Rate limiting per caller (API key name) and, for requests without a valid key, per client
/// address, each as a token bucket. Defaults are generous so load tests are not throttled. Bound from <c>Allocator:RateLimit</c>.
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

    /// <summary>
    /// Requests per second, sustained, from one client address that carry no valid API key
    /// (missing, unknown or malformed): they share one bucket per address, apart from the
    /// callers with valid keys, so a flood of bad keys is answered 429 while those callers stay
    /// served. Default: 20.
    /// </summary>
    public int UnauthenticatedPermitsPerSecond { get; set; } = 20;

    /// <summary>Burst of requests without a valid key from one client address. Default: 100.</summary>
    public int UnauthenticatedBurst { get; set; } = 100;
}
