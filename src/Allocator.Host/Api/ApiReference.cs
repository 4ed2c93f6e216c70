using Scalar.AspNetCore;

namespace Allocator.Host.Api;

/// <summary>The browsable API reference (Scalar) next to <c>/openapi/v1.json</c>.</summary>
internal static class ApiReference
{
    /// <summary>Where the page is served; <c>eng/run.sh</c> prints this link.</summary>
    public const string Path = "/scalar/v1";

    /// <summary>
    /// Maps <c>/scalar/{documentName}</c>. Works offline: Scalar.AspNetCore serves its JavaScript
    /// bundle from the assembly's embedded assets (<c>/scalar/scalar.js</c>); the one thing it
    /// would fetch from elsewhere by default, the Inter and JetBrains Mono fonts, is turned off
    /// (the page falls back to system fonts), and so are its usage telemetry, its AI chat
    /// ("Agent Scalar", a hosted service) and its MCP integration. The API client's
    /// requests go straight to this host: no proxy URL is configured.
    /// </summary>
    public static IEndpointConventionBuilder MapApiReference(this WebApplication app) =>
        app.MapScalarApiReference(o => o
            .WithTitle("Allocator API")
            .DisableDefaultFonts()
            .DisableTelemetry()
            .DisableAgent()
            .DisableMcp()
            .HideDeveloperTools()
            .ExpandAllTags()
            .AddPreferredSecuritySchemes("ApiKey"));
}
