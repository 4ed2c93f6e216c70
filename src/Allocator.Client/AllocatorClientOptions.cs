namespace Allocator.Client;

/// <summary>Settings of the <see cref="AllocatorClient"/> that <c>services.AddAllocatorClient(…)</c> registers.</summary>
public sealed class AllocatorClientOptions
{
    /// <summary>The service root, e.g. <c>http://allocator:8080/</c>. Required.</summary>
    public Uri? BaseAddress { get; set; }

    /// <summary>Sent as <c>X-Api-Key</c> on every request; null when the service runs without authentication.</summary>
    public string? ApiKey { get; set; }

    /// <summary>
    /// Longest one client call may take, retries and their waits included (<see cref="HttpClient.Timeout"/>).
    /// Default 100 s. Must exceed the longest <c>maxWaitMs</c> the broker asks for.
    /// </summary>
    public TimeSpan Timeout { get; set; } = TimeSpan.FromSeconds(100);

    /// <summary>Retries of one idempotent call after a 429 or 503 (0–10). Default 3.</summary>
    public int MaxRetries { get; set; } = 3;

    /// <summary>
    /// The longest <c>Retry-After</c> the client waits for; a longer one is not waited for and
    /// the call fails with the answer it got. Default 30 s.
    /// </summary>
    public TimeSpan MaxRetryAfter { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>Wait before a retry when a 429 or 503 carries no <c>Retry-After</c>. Default 1 s.</summary>
    public TimeSpan DefaultRetryDelay { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>Problems with these settings, empty when they are valid.</summary>
    public IReadOnlyList<string> Validate()
    {
        var errors = new List<string>();
        if (BaseAddress is not { IsAbsoluteUri: true })
        {
            errors.Add("BaseAddress must be the service's absolute root address, e.g. http://allocator:8080/.");
        }

        if (Timeout <= TimeSpan.Zero && Timeout != System.Threading.Timeout.InfiniteTimeSpan)
        {
            errors.Add("Timeout must be positive.");
        }

        if (MaxRetries is < 0 or > 10)
        {
            errors.Add("MaxRetries must be between 0 and 10.");
        }

        if (MaxRetryAfter < TimeSpan.Zero || DefaultRetryDelay < TimeSpan.Zero)
        {
            errors.Add("MaxRetryAfter and DefaultRetryDelay must not be negative.");
        }

        if (DefaultRetryDelay > MaxRetryAfter)
        {
            errors.Add("DefaultRetryDelay must not exceed MaxRetryAfter.");
        }

        return errors;
    }
}
