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

            if (status >= 500)
            {
                LogUnexpected(logger, exception, context.Request.Method, context.Request.Path);
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
            case AllocatorException { Kind: AllocatorErrorKind.Unavailable }:
                return (503, Problems.Unavailable, "Service unavailable.", "The store could not complete the operation; nothing was written. Retry later.");
            case ArgumentException argument:
                // Stores validate again; an argument error that slipped past the host is still the caller's.
                return (400, Problems.Validation, "The request is not valid.", argument.Message);
            case OperationCanceledException when context.RequestAborted.IsCancellationRequested:
                return (0, "", "", null);
            case OperationCanceledException or TimeoutException:
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

    // The JsonException message names the path and the reason without echoing internals.
    private static string JsonDetail(JsonException json) =>
        json.Path is { Length: > 0 } path ? $"The JSON body is not valid at '{path}': {FirstSentence(json.Message)}" : $"The JSON body is not valid: {FirstSentence(json.Message)}";

    private static string FirstSentence(string message)
    {
        var cut = message.IndexOf(" Path:", StringComparison.Ordinal);
        return cut > 0 ? message[..cut] : message;
    }

    [LoggerMessage(Level = LogLevel.Error, Message = "Unexpected error answering {Method} {Path}")]
    private static partial void LogUnexpected(ILogger logger, Exception exception, string method, PathString path);
}
