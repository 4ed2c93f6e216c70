using Microsoft.AspNetCore.OpenApi;
using Microsoft.OpenApi;

namespace Allocator.Host.Api;

/// <summary>Declares the <c>X-Api-Key</c> scheme in the OpenAPI document and requires it on /v1 operations.</summary>
internal sealed class ApiKeySecurityTransformer : IOpenApiDocumentTransformer
{
    private const string SchemeName = "ApiKey";

    public Task TransformAsync(OpenApiDocument document, OpenApiDocumentTransformerContext context, CancellationToken cancellationToken)
    {
        document.Components ??= new OpenApiComponents();
        document.Components.SecuritySchemes ??= new Dictionary<string, IOpenApiSecurityScheme>();
        document.Components.SecuritySchemes[SchemeName] = new OpenApiSecurityScheme
        {
            Type = SecuritySchemeType.ApiKey,
            In = ParameterLocation.Header,
            Name = Auth.ApiKeyMiddleware.HeaderName,
            Description = "API key with scopes broker, worker or admin (see docs/api.md).",
        };
        var requirement = new OpenApiSecurityRequirement { [new OpenApiSecuritySchemeReference(SchemeName, document)] = [] };
        foreach (var (path, item) in document.Paths)
        {
            if (!path.StartsWith("/v1/", StringComparison.Ordinal) || item.Operations is null)
            {
                continue;
            }

            foreach (var operation in item.Operations.Values)
            {
                operation.Security ??= [];
                operation.Security.Add(requirement);
            }
        }

        return Task.CompletedTask;
    }
}
