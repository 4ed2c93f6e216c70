using Allocator.Host.Auth;
using Orleans.Dashboard;

namespace Allocator.Host.Cluster;

/// <summary>
/// Orleans' own dashboard (Microsoft.Orleans.Dashboard), co-hosted on the instance's Kestrel under
/// <see cref="RoutePrefix"/>: silos, grain activations, calls per second, latency and errors per
/// grain method. Off unless <see cref="EnabledSetting"/> is true; admin keys only (a browser logs
/// in with the key as the password of HTTP Basic authentication). docs/observability.md.
/// </summary>
/// <remarks>
/// Every instance of a cluster must enable it alike: each silo's dashboard grain collects its own
/// silo's figures, and the page on any instance shows the whole cluster. It profiles every grain
/// call (a filter on each call), which costs CPU per call: measured in docs/observability.md.
/// </remarks>
internal static class OrleansDashboard
{
    public const string EnabledSetting = "Allocator:OrleansDashboard:Enabled";

    public const string RoutePrefix = "/orleans";

    public static bool IsEnabled(IConfiguration configuration) =>
        bool.TryParse(configuration[EnabledSetting], out var on) && on;

    /// <summary>Adds the dashboard's services and grains to the silo when <see cref="EnabledSetting"/> is true.</summary>
    public static ISiloBuilder AddAllocatorOrleansDashboard(this ISiloBuilder silo, IConfiguration configuration) =>
        IsEnabled(configuration) ? silo.AddDashboard() : silo;

    /// <summary>Maps the dashboard's page and API under <see cref="RoutePrefix"/>, admin scope only, when enabled.</summary>
    public static void MapAllocatorOrleansDashboard(this WebApplication app)
    {
        if (IsEnabled(app.Configuration))
        {
            app.MapOrleansDashboard(RoutePrefix)
                .WithMetadata(new ScopeRequirement(ApiScopes.Admin, OwnWorker: false, BrowserLogin: true))
                .ExcludeFromDescription();
        }
    }
}
