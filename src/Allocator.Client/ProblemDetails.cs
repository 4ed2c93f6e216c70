using System.Net;
using System.Text.Json;

namespace Allocator.Client;

/// <summary>The stable problem <c>type</c> values the service answers with.</summary>
public static class ProblemTypes
{
    public const string Validation = "https://allocator.dev/problems/validation";
    public const string NotFound = "https://allocator.dev/problems/not-found";
    public const string NoCapacity = "https://allocator.dev/problems/no-capacity";
    public const string Conflict = "https://allocator.dev/problems/conflict";
    public const string StaleEpoch = "https://allocator.dev/problems/stale-epoch";
    public const string Unauthorized = "https://allocator.dev/problems/unauthorized";
    public const string Forbidden = "https://allocator.dev/problems/forbidden";
    public const string RateLimited = "https://allocator.dev/problems/rate-limited";
    public const string PayloadTooLarge = "https://allocator.dev/problems/payload-too-large";
    public const string UnsupportedMediaType = "https://allocator.dev/problems/unsupported-media-type";
    public const string Unavailable = "https://allocator.dev/problems/unavailable";
    public const string Timeout = "https://allocator.dev/problems/timeout";
}

/// <summary>An RFC 9457 problem as the service sent it.</summary>
public sealed record Problem
{
    public string? Type { get; init; }
    public string? Title { get; init; }
    public int? Status { get; init; }
    public string? Detail { get; init; }
    public string? Instance { get; init; }

    /// <summary>For validation problems: each bad field and what is wrong with it.</summary>
    public Dictionary<string, string[]>? Errors { get; init; }
}

/// <summary>A non-success answer from the service, with its problem details.</summary>
public sealed class AllocatorApiException : Exception
{
    public AllocatorApiException(HttpStatusCode status, Problem? problem, TimeSpan? retryAfter = null)
        : base(problem?.Detail ?? problem?.Title ?? $"The Allocator service answered {(int)status} {status}.")
    {
        StatusCode = status;
        Problem = problem;
        RetryAfter = retryAfter;
    }

    public HttpStatusCode StatusCode { get; }

    /// <summary>The problem <c>type</c> (see <see cref="ProblemTypes"/>), or null when the answer had no problem body.</summary>
    public string? Type => Problem?.Type;

    public string? Detail => Problem?.Detail;

    public Problem? Problem { get; }

    /// <summary>From the <c>Retry-After</c> header (429).</summary>
    public TimeSpan? RetryAfter { get; }

    public IReadOnlyDictionary<string, string[]>? Errors => Problem?.Errors;

    internal static async Task<AllocatorApiException> FromResponseAsync(HttpResponseMessage response, CancellationToken cancellationToken)
    {
        Problem? problem = null;
        try
        {
            if (response.Content.Headers.ContentLength is not 0)
            {
                var stream = await response.Content.ReadAsStreamAsync(cancellationToken).ConfigureAwait(false);
                problem = await JsonSerializer.DeserializeAsync(stream, ClientJsonContext.Default.Problem, cancellationToken).ConfigureAwait(false);
            }
        }
        catch (JsonException)
        {
            // Not a problem body (a proxy's error page, say): keep the status alone.
        }

        var retryAfter = response.Headers.RetryAfter?.Delta;
        return new AllocatorApiException(response.StatusCode, problem, retryAfter);
    }
}
