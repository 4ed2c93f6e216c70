using System.Text.Json.Nodes;
using Microsoft.AspNetCore.OpenApi;
using Microsoft.OpenApi;

namespace Allocator.Host.Api;

/// <summary>Request and response examples of one operation, shown in the OpenAPI document (and so in the API reference page).</summary>
/// <param name="Request">The request body, as JSON text; null when the operation takes none.</param>
/// <param name="Responses">Response bodies by status code, as JSON text.</param>
internal sealed record OpenApiExamples(string? Request, IReadOnlyDictionary<int, string> Responses);

/// <summary>The problem types one operation may answer with, beyond those every /v1 operation shares (<see cref="ProblemTypesTransformer.Shared"/>).</summary>
internal sealed record OpenApiProblemTypes(int Status, IReadOnlyList<string> Types);

internal static class OpenApiDocumentationExtensions
{
    public static TBuilder WithExamples<TBuilder>(this TBuilder builder, string? request, params (int Status, string Json)[] responses)
        where TBuilder : IEndpointConventionBuilder =>
        builder.WithMetadata(new OpenApiExamples(request, responses.ToDictionary(r => r.Status, r => r.Json)));

    /// <summary>Declares a problem response (<c>application/problem+json</c>) and the <c>type</c> values it carries.</summary>
    public static TBuilder WithProblems<TBuilder>(this TBuilder builder, int status, params string[] types)
        where TBuilder : IEndpointConventionBuilder =>
        builder.WithMetadata(
            new ProducesResponseTypeMetadata(status, typeof(Microsoft.AspNetCore.Mvc.ProblemDetails), ["application/problem+json"]),
            new OpenApiProblemTypes(status, types));
}

/// <summary>Puts each operation's <see cref="OpenApiExamples"/> on its request body and responses.</summary>
internal sealed class ExamplesTransformer : IOpenApiOperationTransformer
{
    public Task TransformAsync(OpenApiOperation operation, OpenApiOperationTransformerContext context, CancellationToken cancellationToken)
    {
        var examples = context.Description.ActionDescriptor.EndpointMetadata.OfType<OpenApiExamples>().LastOrDefault();
        if (examples is null)
        {
            return Task.CompletedTask;
        }

        if (examples.Request is { } request && operation.RequestBody?.Content is { } requestContent)
        {
            foreach (var media in requestContent.Values)
            {
                media.Example = JsonNode.Parse(request);
            }
        }

        foreach (var (status, json) in examples.Responses)
        {
            if (operation.Responses is { } responses
                && responses.TryGetValue(status.ToString(System.Globalization.CultureInfo.InvariantCulture), out var response)
                && response.Content is { } content)
            {
                foreach (var media in content.Values)
                {
                    media.Example = JsonNode.Parse(json);
                }
            }
        }

        return Task.CompletedTask;
    }
}

/// <summary>
/// Says, on every error response of every operation, which RFC 9457 problem <c>type</c> values it
/// carries (the stable types of docs/api.md), with an example body; and describes the types once
/// on the document.
/// </summary>
internal sealed class ProblemTypesTransformer : IOpenApiOperationTransformer, IOpenApiDocumentTransformer
{
    /// <summary>The problem types behind each status that every /v1 operation can answer with.</summary>
    public static readonly IReadOnlyDictionary<int, string[]> Shared = new Dictionary<int, string[]>
    {
        [StatusCodes.Status400BadRequest] = [Problems.Validation],
        [StatusCodes.Status401Unauthorized] = [Problems.Unauthorized],
        [StatusCodes.Status403Forbidden] = [Problems.Forbidden],
        [StatusCodes.Status404NotFound] = [Problems.NotFound],
        [StatusCodes.Status429TooManyRequests] = [Problems.RateLimited],
        [StatusCodes.Status503ServiceUnavailable] = [Problems.Unavailable],
    };

    private static readonly Dictionary<string, (string Title, string When)> Catalogue = new()
    {
        [Problems.Validation] = ("The request is not valid.", "malformed JSON, unknown or missing members, out-of-range values, bad ids, missing idempotency key; `errors` maps each field to what is wrong"),
        [Problems.Unauthorized] = ("Authentication required.", "no or unknown `X-Api-Key`"),
        [Problems.Forbidden] = ("Forbidden.", "the key's scopes do not cover the operation, or a worker key names another worker"),
        [Problems.NotFound] = ("Not found.", "unknown pool, worker, allocation or path"),
        [Problems.NoCapacity] = ("No capacity.", "no eligible worker has room (after the requested wait); retrying elsewhere does not help"),
        [Problems.Conflict] = ("The request conflicts with the current state.", "capacity below the current load; a reused idempotency key with another request; an allocation that already ended"),
        [Problems.StaleEpoch] = ("Stale epoch.", "the epoch is not the current one; nothing changed"),
        [Problems.RateLimited] = ("Too many requests.", "over the caller's rate; `Retry-After` says when to come back"),
        [Problems.Unavailable] = ("Service unavailable.", "the store could not complete the operation or the outcome is unknown; retry with the same idempotency key (`Retry-After` when given)"),
        [Problems.Timeout] = ("The request timed out.", "the request outlived its deadline"),
    };

    public Task TransformAsync(OpenApiOperation operation, OpenApiOperationTransformerContext context, CancellationToken cancellationToken)
    {
        if (operation.Responses is null)
        {
            return Task.CompletedTask;
        }

        var declared = context.Description.ActionDescriptor.EndpointMetadata.OfType<OpenApiProblemTypes>().ToList();
        foreach (var (code, response) in operation.Responses)
        {
            if (!int.TryParse(code, out var status) || status < 400 || response is not OpenApiResponse concrete)
            {
                continue;
            }

            var types = declared.Where(d => d.Status == status).SelectMany(d => d.Types)
                .Concat(Shared.GetValueOrDefault(status) ?? [])
                .Distinct(StringComparer.Ordinal)
                .ToList();
            if (types.Count == 0)
            {
                continue;
            }

            concrete.Description = "Problem Details (RFC 9457), `type` one of: " + string.Join(", ", types.Select(t => $"`{t}`")) + ".";
            if (concrete.Content is { } content && content.TryGetValue("application/problem+json", out var media))
            {
                var (title, when) = Catalogue.TryGetValue(types[0], out var known) ? known : ("Error.", "an error");
                media.Example = new JsonObject
                {
                    ["type"] = types[0],
                    ["title"] = title,
                    ["status"] = status,
                    ["detail"] = char.ToUpperInvariant(when[0]) + when[1..].Split(';')[0] + ".",
                };
            }
        }

        return Task.CompletedTask;
    }

    public Task TransformAsync(OpenApiDocument document, OpenApiDocumentTransformerContext context, CancellationToken cancellationToken)
    {
        document.Info ??= new OpenApiInfo();
        document.Info.Title = "Allocator API";
        document.Info.Version = ServiceVersion.Version; // the release, e.g. 1.0.0; the API itself stays /v1
        document.Info.Description =
            "Least-loaded worker allocation. Session brokers allocate on a pool and get the least-loaded eligible worker, " +
            "an allocation id and a fencing epoch; workers register, report load, drain and deregister. " +
            "Authenticate with `X-Api-Key`. Allocate with an `Idempotency-Key`: a retry with the same key returns the same allocation.\n\n" +
            $"Every error is `application/problem+json` with a stable `type`, `{Problems.BaseUri}<name>`:\n\n" +
            "| name | when |\n|---|---|\n" +
            string.Join("\n", Catalogue.Select(c => $"| `{c.Key[Problems.BaseUri.Length..]}` | {c.Value.When} |"));
        return Task.CompletedTask;
    }
}
