using System.Diagnostics;
using Microsoft.AspNetCore.Http.Features;

namespace Allocator.Host.Telemetry;

/// <summary>
/// Adds the OpenTelemetry HTTP server semantic-convention attributes to the span ASP.NET Core
/// starts for each request (<c>Microsoft.AspNetCore.Hosting.HttpRequestIn</c>); the
/// instrumentation package that would do it is not served here. Runs outermost so the final
/// status code (after problem mapping) is the one recorded.
/// </summary>
internal sealed class HttpSemanticConventionsMiddleware(RequestDelegate next)
{
    public async Task InvokeAsync(HttpContext context)
    {
        var activity = context.Features.Get<IHttpActivityFeature>()?.Activity;
        if (activity is null || !activity.IsAllDataRequested)
        {
            await next(context);
            return;
        }

        try
        {
            await next(context);
        }
        finally
        {
            var request = context.Request;
            var status = context.Response.StatusCode;
            var route = (context.GetEndpoint() as RouteEndpoint)?.RoutePattern.RawText;
            activity.SetTag("http.request.method", request.Method);
            activity.SetTag("url.path", request.Path.Value);
            activity.SetTag("url.scheme", request.Scheme);
            activity.SetTag("server.address", request.Host.Host);
            if (request.Host.Port is { } port)
            {
                activity.SetTag("server.port", port);
            }

            activity.SetTag("network.protocol.version", request.Protocol.StartsWith("HTTP/", StringComparison.Ordinal) ? request.Protocol[5..] : request.Protocol);
            activity.SetTag("http.response.status_code", status);
            if (route is not null)
            {
                activity.SetTag("http.route", route);
                activity.DisplayName = $"{request.Method} {route}";
            }
            else
            {
                activity.DisplayName = request.Method;
            }

            if (status >= 500)
            {
                activity.SetTag("error.type", status.ToString(System.Globalization.CultureInfo.InvariantCulture));
                activity.SetStatus(ActivityStatusCode.Error);
            }
        }
    }
}
