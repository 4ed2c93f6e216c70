using Microsoft.AspNetCore.Http.HttpResults;

namespace Allocator.Host.Api;

/// <summary>The stable RFC 9457 problem types of the API, and helpers that build them.</summary>
internal static class Problems
{
    public const string BaseUri = "https://allocator.dev/problems/";
    public const string Validation = BaseUri + "validation";
    public const string NotFound = BaseUri + "not-found";
    public const string NoCapacity = BaseUri + "no-capacity";
    public const string Conflict = BaseUri + "conflict";
    public const string StaleEpoch = BaseUri + "stale-epoch";
    public const string Unauthorized = BaseUri + "unauthorized";
    public const string Forbidden = BaseUri + "forbidden";
    public const string RateLimited = BaseUri + "rate-limited";
    public const string PayloadTooLarge = BaseUri + "payload-too-large";
    public const string UnsupportedMediaType = BaseUri + "unsupported-media-type";
    public const string Unavailable = BaseUri + "unavailable";

    /// <summary>503: the store failed in a way that leaves the outcome unknown; retry with the same idempotency key.</summary>
    public const string OutcomeUnknown = BaseUri + "outcome-unknown";

    /// <summary>Seconds in the <c>Retry-After</c> of every 503.</summary>
    public const int RetryAfterSeconds = 1;

    public const string Timeout = BaseUri + "timeout";
    public const string Internal = BaseUri + "internal";
    public const string MethodNotAllowed = BaseUri + "method-not-allowed";

    public static ProblemHttpResult Make(int status, string type, string title, string? detail, IDictionary<string, object?>? extensions = null) =>
        TypedResults.Problem(detail: detail, statusCode: status, title: title, type: type, extensions: extensions);

    /// <summary>400 with an <c>errors</c> member mapping each bad field to what is wrong with it.</summary>
    public static ProblemHttpResult Invalid(string field, string message) =>
        Invalid(new Dictionary<string, string[]> { [field] = [message] });

    public static ProblemHttpResult Invalid(IDictionary<string, string[]> errors) =>
        Make(StatusCodes.Status400BadRequest, Validation, "The request is not valid.",
            string.Join(" ", errors.SelectMany(e => e.Value)),
            new Dictionary<string, object?> { ["errors"] = errors });

    public static ProblemHttpResult BadRequest(string detail) =>
        Make(StatusCodes.Status400BadRequest, Validation, "The request is not valid.", detail);

    public static ProblemHttpResult PoolNotFound(string pool) =>
        Make(StatusCodes.Status404NotFound, NotFound, "Not found.", $"Pool '{pool}' does not exist.");

    public static ProblemHttpResult WorkerNotFound(string pool, string worker) =>
        Make(StatusCodes.Status404NotFound, NotFound, "Not found.", $"Worker '{worker}' is not registered in pool '{pool}'.");

    public static ProblemHttpResult AllocationNotFound(string pool, Guid id) =>
        Make(StatusCodes.Status404NotFound, NotFound, "Not found.", $"Allocation '{id}' does not exist in pool '{pool}'.");

    public static ProblemHttpResult ConflictWith(string detail) =>
        Make(StatusCodes.Status409Conflict, Conflict, "The request conflicts with the current state.", detail);

    public static ProblemHttpResult StaleEpochFor(string what, long given) =>
        Make(StatusCodes.Status409Conflict, StaleEpoch, "Stale epoch.",
            $"Epoch {given} is not the current epoch of {what}; a newer holder superseded it and nothing changed.");

    public static ProblemHttpResult NoCapacityInAny(IReadOnlyList<string> pools, TimeSpan waited) =>
        Make(StatusCodes.Status409Conflict, NoCapacity, "No capacity.",
            waited > TimeSpan.Zero
                ? $"No eligible worker in pools {string.Join(", ", pools.Select(p => $"'{p}'"))} had room within {waited.TotalMilliseconds:0} ms."
                : $"No eligible worker in pools {string.Join(", ", pools.Select(p => $"'{p}'"))} has room.");

    public static ProblemHttpResult NoCapacityIn(string pool, TimeSpan waited) =>
        Make(StatusCodes.Status409Conflict, NoCapacity, "No capacity.",
            waited > TimeSpan.Zero
                ? $"No eligible worker in pool '{pool}' had room within {waited.TotalMilliseconds:0} ms."
                : $"No eligible worker in pool '{pool}' has room.");

    /// <summary>
    /// 503 (the host adds <c>Retry-After</c> to every 503). <paramref name="outcomeUnknown"/> says
    /// whether the write may have happened; either way a retry with the same idempotency key is safe.
    /// </summary>
    public static ProblemHttpResult ServiceUnavailable(string detail, bool outcomeUnknown) =>
        Make(StatusCodes.Status503ServiceUnavailable, outcomeUnknown ? OutcomeUnknown : Unavailable,
            outcomeUnknown ? "Service unavailable; the outcome is unknown." : "Service unavailable.", detail,
            new Dictionary<string, object?> { ["outcomeUnknown"] = outcomeUnknown });

    /// <summary>What to say when the framework answered without saying why.</summary>
    public static string DefaultDetail(int status, HttpRequest request) => status switch
    {
        StatusCodes.Status404NotFound => $"There is no endpoint at {request.Method} {request.Path}; see /openapi/v1.json.",
        StatusCodes.Status405MethodNotAllowed => $"{request.Method} is not allowed on {request.Path}.",
        StatusCodes.Status413PayloadTooLarge => $"The request body exceeds the maximum of {AllocatorApp.MaxRequestBodySize} bytes.",
        StatusCodes.Status415UnsupportedMediaType => "Send the request body as application/json.",
        _ => $"The request was answered with status {status}.",
    };

    /// <summary>Maps a status code chosen by the framework (bad request bodies, limits) to a problem.</summary>
    public static (string Type, string Title) ForStatus(int status) => status switch
    {
        StatusCodes.Status401Unauthorized => (Unauthorized, "Authentication required."),
        StatusCodes.Status403Forbidden => (Forbidden, "Forbidden."),
        StatusCodes.Status404NotFound => (NotFound, "Not found."),
        StatusCodes.Status405MethodNotAllowed => (MethodNotAllowed, "Method not allowed."),
        StatusCodes.Status409Conflict => (Conflict, "The request conflicts with the current state."),
        StatusCodes.Status413PayloadTooLarge => (PayloadTooLarge, "The request body is too large."),
        StatusCodes.Status415UnsupportedMediaType => (UnsupportedMediaType, "Unsupported media type."),
        StatusCodes.Status429TooManyRequests => (RateLimited, "Too many requests."),
        StatusCodes.Status503ServiceUnavailable => (Unavailable, "Service unavailable."),
        StatusCodes.Status504GatewayTimeout => (Timeout, "The request timed out."),
        >= 400 and < 500 => (Validation, "The request is not valid."),
        _ => (Internal, "An unexpected error occurred."),
    };
}
