using System.Text.Json;

namespace Allocator.Host.Api;

/// <summary>
/// Turns every exception into an RFC 9457 answer: malformed requests (bad JSON, wrong types,
/// unknown fields, oversized bodies) into 4xx, domain failures into their stable types, and
/// anything unexpected into a 500 that leaks nothing.
/// </summary>
internal sealed partial class ProblemMiddleware(RequestDelegate next, ILogger<ProblemMiddleware> logger)
{
    public async Task InvokeAsync(HttpContext context)
    {
        // Every 503 says when to retry, whichever layer produced it.
        context.Response.OnStarting(static state =>
        {
            var response = ((HttpContext)state).Response;
            if (response.StatusCode == StatusCodes.Status503ServiceUnavailable && !response.Headers.ContainsKey("Retry-After"))
            {
                response.Headers.RetryAfter = Problems.RetryAfterSeconds.ToString(System.Globalization.CultureInfo.InvariantCulture);
            }

            return Task.CompletedTask;
        }, context);
        try
        {
            await next(context);
        }
        catch (Exception exception) when (!context.Response.HasStarted)
        {
            var (status, type, title, detail) = Map(exception, context);
            if (status == 0)
            {
                return; // The caller went away; nobody reads an answer.
            }

            if (status == StatusCodes.Status500InternalServerError)
            {
                LogUnexpected(logger, exception, context.Request.Method, context.Request.Path);
            }
            else if (status >= 500)
            {
                // 503/504: the store or the cluster could not answer (an outage, a restart, a
                // timeout), which the caller is told to retry; a warning, not a bug report.
                LogUnavailable(logger, status, context.Request.Method, context.Request.Path, exception.GetBaseException().Message);
            }

            context.Response.Clear();
            await Problems.Make(status, type, title, detail).ExecuteAsync(context);
        }
    }

    private static (int Status, string Type, string Title, string? Detail) Map(Exception exception, HttpContext context)
    {
        switch (exception)
        {
            case BadHttpRequestException bad:
            {
                var (type, title) = Problems.ForStatus(bad.StatusCode);
                return (bad.StatusCode, type, title, Describe(bad));
            }

            case JsonException json:
                return (400, Problems.Validation, "The request is not valid.", JsonDetail(json));
            case AllocatorException { Kind: AllocatorErrorKind.NotFound } notFound:
                return (404, Problems.NotFound, "Not found.", notFound.Message);
            case AllocatorException { Kind: AllocatorErrorKind.Conflict } conflict:
                return (409, Problems.Conflict, "The request conflicts with the current state.", conflict.Message);
            case AllocatorException { Kind: AllocatorErrorKind.Unavailable, OutcomeUnknown: true } unknown:
                return (503, Problems.OutcomeUnknown, "Service unavailable; outcome unknown.", unknown.Message);
            case AllocatorException { Kind: AllocatorErrorKind.Unavailable } unavailable:
                // The message says what was (not) written: grains and stores word it so.
                return (503, Problems.Unavailable, "Service unavailable.", unavailable.Message);
            case System.Data.Common.DbException or IOException or System.Net.Sockets.SocketException:
                // A database or network error a store let through unclassified (stores answer
                // AllocatorException; seen when a caller's cancellation and a command timeout met
                // during a network partition): an infrastructure failure whose outcome is unknown,
                // never a 500 (issue 12 #2).
                return (503, Problems.OutcomeUnknown, "Service unavailable; outcome unknown.",
                    "The database failed during the request; it may or may not have taken effect. Retry (with the same idempotency key for an allocation).");
            case Orleans.Runtime.OrleansException or Orleans.Runtime.SiloUnavailableException:
                // The cluster could not deliver or answer the call (a silo died, membership is
                // changing): whether it ran is unknown.
                return (503, Problems.OutcomeUnknown, "Service unavailable; outcome unknown.",
                    "The request could not be completed by the cluster; it may or may not have taken effect. Retry (with the same idempotency key for an allocation).");
            case ArgumentException argument:
                // Stores validate again; an argument error that slipped past the host is still the caller's.
                return (400, Problems.Validation, "The request is not valid.", argument.Message);
            case OperationCanceledException when context.RequestAborted.IsCancellationRequested:
                return (0, "", "", null);
            case TimeoutException:
                // Orleans' response timeout: the grain call (a release or registration batch) did
                // not answer within Allocator:Timeouts:GrainCallTimeout, and may still apply. Not
                // the HTTP request timeout (504): the outcome is unknown, the call safe to repeat.
                return (503, Problems.OutcomeUnknown, "Service unavailable; outcome unknown.",
                    "The cluster did not answer within the grain call timeout; the operation may or may not have taken effect. Retry it (a release with the same epoch answers 409 if the first one was applied).");
            case OperationCanceledException:
                return (504, Problems.Timeout, "The request timed out.", "The operation did not finish within the configured timeout.");
            default:
                return (500, Problems.Internal, "An unexpected error occurred.", "The error has been logged.");
        }
    }

    private static string Describe(BadHttpRequestException bad)
    {
        if (bad.StatusCode == StatusCodes.Status413PayloadTooLarge)
        {
            return "The request body exceeds the maximum size this service accepts.";
        }

        for (Exception? inner = bad; inner is not null; inner = inner.InnerException)
        {
            if (inner is JsonException json)
            {
                return JsonDetail(json);
            }
        }

        return bad.Message;
    }

    // Says what is wrong in the caller's terms (path and reason) without naming .NET types.
    private static string JsonDetail(JsonException json)
    {
        var path = json.Path is { Length: > 0 } p ? p : "$";
        var message = json.Message;
        if (message.Contains("could not be mapped", StringComparison.Ordinal))
        {
            return $"Unknown field at '{path}'.";
        }

        if (message.Contains("Duplicate", StringComparison.OrdinalIgnoreCase))
        {
            return $"A field appears more than once (near '{path}').";
        }

        if (message.Contains("missing required properties", StringComparison.Ordinal))
        {
            var cut = message.IndexOf("including:", StringComparison.Ordinal);
            return cut > 0 ? $"Missing required field(s) at '{path}': {message[(cut + 10)..].Trim().TrimEnd('.')}." : $"Missing required field(s) at '{path}'.";
        }

        if (message.Contains("could not be converted", StringComparison.Ordinal))
        {
            return $"The value at '{path}' has the wrong type or is out of range.";
        }

        if (message.Contains("null", StringComparison.OrdinalIgnoreCase) && message.Contains("non-nullable", StringComparison.OrdinalIgnoreCase))
        {
            return $"The value at '{path}' must not be null.";
        }

        return $"The body is not valid JSON (near '{path}').";
    }

    [LoggerMessage(Level = LogLevel.Error, Message = "Unexpected error answering {Method} {Path}")]
    private static partial void LogUnexpected(ILogger logger, Exception exception, string method, PathString path);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Answered {Status} to {Method} {Path}: {Reason}")]
    private static partial void LogUnavailable(ILogger logger, int status, string method, PathString path, string reason);
}
