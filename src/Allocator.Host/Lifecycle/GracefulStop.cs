using Allocator.Host.Options;
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Server.Kestrel.Transport.Sockets;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Lifecycle;

/// <summary>
/// Whether this instance is stopping, for readiness, for the connections it serves meanwhile,
/// and for the requests still running when the request drain ends.
/// </summary>
internal sealed class Draining : IDisposable
{
    private readonly CancellationTokenSource _cutOff = new();
    private volatile bool _draining;

    /// <summary>SIGTERM came: readiness is down and every response closes its connection.</summary>
    public bool IsDraining => _draining;

    /// <summary>Fires when the request drain ends: callers still waiting for capacity stop waiting.</summary>
    public CancellationToken RequestsCutOff => _cutOff.Token;

    public void Begin() => _draining = true;

    public void CutOff() => _cutOff.Cancel();

    public void Dispose() => _cutOff.Dispose();
}

/// <summary>
/// The instance's stop on SIGTERM (or Ctrl+C), before any service stops: readiness goes down
/// while the listener stays open for <see cref="AllocatorShutdownOptions.DrainDelay"/>; then the
/// listener closes and the requests in flight finish (within
/// <see cref="AllocatorShutdownOptions.RequestDrainTimeout"/>). The Orleans silo stops after
/// this, as a hosted service: its pool grains move to the other instances (LocalPoolGrains).
/// </summary>
internal sealed partial class GracefulStop(
    IServer server,
    Draining draining,
    ListenSockets listeners,
    IOptions<AllocatorShutdownOptions> options,
    TimeProvider time,
    ILogger<GracefulStop> logger) : IHostedLifecycleService
{
    public Task StartingAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StartAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StartedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public async Task StoppingAsync(CancellationToken cancellationToken)
    {
        var o = options.Value;
        var started = time.GetTimestamp();
        draining.Begin();
        LogDraining(logger, o.DrainDelay.TotalSeconds);

        // The last moment of the drain delay takes no new connections but accepts and serves
        // those already queued, so that closing the listener resets none (ListenSockets).
        var acceptGrace = o.DrainDelay >= 2 * AcceptGrace ? AcceptGrace : TimeSpan.Zero;
        await DelayAsync(o.DrainDelay - acceptGrace, cancellationToken);
        var refusing = listeners.RefuseNewConnections();
        await DelayAsync(refusing > 0 ? acceptGrace : TimeSpan.Zero, cancellationToken);

        // Kestrel stops accepting, answers the requests in flight with Connection: close, and
        // closes idle connections; the web host's own stop later finds it stopped.
        using var cutOff = new CancellationTokenSource(o.RequestDrainTimeout, time);
        using var cutOffRegistration = cutOff.Token.Register(draining.CutOff);
        using var abort = new CancellationTokenSource(o.RequestDrainTimeout + AllocatorShutdownOptions.ListenerCloseGrace, time);
        try
        {
            await server.StopAsync(abort.Token);
        }
        catch (OperationCanceledException)
        {
            // Connections still open were aborted.
        }

        LogListenerClosed(logger, time.GetElapsedTime(started).TotalSeconds, cutOff.IsCancellationRequested);
    }

    /// <summary>How long before the listener closes new connections are no longer taken.</summary>
    internal static TimeSpan AcceptGrace { get; } = TimeSpan.FromMilliseconds(250);

    public Task StopAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    private async Task DelayAsync(TimeSpan delay, CancellationToken cancellationToken)
    {
        if (delay <= TimeSpan.Zero)
        {
            return;
        }

        try
        {
            await Task.Delay(delay, time, cancellationToken);
        }
        catch (OperationCanceledException)
        {
            // The host's own shutdown timeout: go on stopping.
        }
    }

    public Task StoppedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    [LoggerMessage(Level = LogLevel.Information, Message = "Stopping: readiness is down; the listener stays open for {Seconds:0.###} s so that load balancers stop sending here.")]
    private static partial void LogDraining(ILogger logger, double seconds);

    [LoggerMessage(Level = LogLevel.Information, Message = "Stopping: the listener is closed and the requests in flight have finished ({Seconds:0.###} s after the stop began; waits cut short: {CutShort}). The silo hands its pool grains over next.")]
    private static partial void LogListenerClosed(ILogger logger, double seconds, bool cutShort);
}

/// <summary>Readiness is down while the instance stops (tag <c>ready</c>).</summary>
internal sealed class DrainingHealthCheck(Draining draining) : IHealthCheck
{
    public Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, CancellationToken cancellationToken = default) =>
        Task.FromResult(draining.IsDraining
            ? HealthCheckResult.Unhealthy("This instance is stopping: it finishes the requests in flight and takes no new ones.")
            : HealthCheckResult.Healthy("Not stopping."));

    /// <summary>The check's name in the health report.</summary>
    public const string Name = "stopping";
}

internal static class GracefulStopRegistration
{
    public static IServiceCollection AddGracefulStop(this IServiceCollection services, IConfiguration configuration)
    {
        services.AddOptions<AllocatorShutdownOptions>().Bind(configuration.GetSection(AllocatorShutdownOptions.Section)).ValidateOnStart();
        services.AddSingleton<IValidateOptions<AllocatorShutdownOptions>, ShutdownOptionsValidator>();
        services.AddSingleton<Draining>();
        services.AddSingleton<ListenSockets>();
        services.AddOptions<SocketTransportOptions>().Configure<ListenSockets>((sockets, listeners) => sockets.CreateBoundListenSocket = listeners.Create);
        services.AddHostedService<GracefulStop>();
        services.AddOptions<HostOptions>().Configure<IOptions<AllocatorShutdownOptions>>((host, shutdown) => host.ShutdownTimeout = shutdown.Value.StopBound);
        return services;
    }

    /// <summary>
    /// While the instance stops, every HTTP/1.x response says <c>Connection: close</c>, so that
    /// no client keeps an idle connection that the closing listener would then cut under it.
    /// </summary>
    public static IApplicationBuilder UseDraining(this IApplicationBuilder app)
    {
        var draining = app.ApplicationServices.GetRequiredService<Draining>();
        return app.Use((context, next) =>
        {
            if (draining.IsDraining && (HttpProtocol.IsHttp11(context.Request.Protocol) || HttpProtocol.IsHttp10(context.Request.Protocol)))
            {
                context.Response.OnStarting(static state =>
                {
                    ((HttpResponse)state).Headers.Connection = "close";
                    return Task.CompletedTask;
                }, context.Response);
            }

            return next(context);
        });
    }
}
