using Allocator.Host.Auth;
using Allocator.Host.Options;
using Allocator.Host.Telemetry;
using Microsoft.Extensions.Options;

namespace Allocator.Host;

/// <summary>Says at start-up what the host runs on and warns loudly about insecure settings.</summary>
internal sealed partial class StartupReport(
    IServiceProvider services,
    ApiKeyRegistry keys,
    IOptions<AllocatorAuthOptions> auth,
    IOptions<AllocatorTimeoutOptions> timeouts,
    IConfiguration configuration,
    ILogger<StartupReport> logger) : IHostedService
{
    public Task StartAsync(CancellationToken cancellationToken)
    {
        LogVersion(logger, ServiceVersion.Version, ServiceVersion.Commit ?? "unknown");
        var store = services.GetRequiredService<IWorkerStore>().Name;
        if (store == StorageProviders.Memory)
        {
            LogInMemory(logger);
        }
        else
        {
            LogStore(logger, store);
        }

        var databases = services.GetRequiredService<Allocator.Host.Storage.Databases>();
        if (databases.Several)
        {
            LogDatabases(logger, databases.All.Count, string.Join(", ", databases.All.Select(d => d.Name)), databases.Default.Name);
        }

        if (auth.Value.Disabled)
        {
            LogAuthDisabled(logger);
        }
        else if (keys.Count == 0)
        {
            LogNoKeys(logger);
        }

        if (keys.BrokerKeysWithEveryPool.Count > 0)
        {
            LogEveryPool(logger, string.Join(", ", keys.BrokerKeysWithEveryPool));
        }

        if (keys.HasDemoKey)
        {
            LogDemoKey(logger, ApiKeyRegistry.DemoKeySetting);
        }

        var t = timeouts.Value;
        LogTimeouts(logger, t.LockTimeout, t.CommandTimeout, t.GrainCallTimeout, t.RequestTimeout);
        if (TelemetryRegistration.IsExporting(configuration))
        {
            LogExporting(logger, configuration["OTEL_EXPORTER_OTLP_ENDPOINT"]!, configuration["OTEL_EXPORTER_OTLP_PROTOCOL"] is { Length: > 0 } p ? p : "grpc");
        }
        else
        {
            LogNotExporting(logger);
        }
        return Task.CompletedTask;
    }

    public Task StopAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    [LoggerMessage(Level = LogLevel.Information, Message = "Allocator {Version} (commit {Commit}).")]
    private static partial void LogVersion(ILogger logger, string version, string commit);

    [LoggerMessage(Level = LogLevel.Information, Message = "Allocator store: {Store}.")]
    private static partial void LogStore(ILogger logger, string store);

    [LoggerMessage(Level = LogLevel.Information, Message = "Allocator databases: {Count} ({Names}); the pool directory is in '{Default}', where pools without an entry live.")]
    private static partial void LogDatabases(ILogger logger, int count, string names, string @default);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Allocator store: IN-MEMORY (no ConnectionStrings:Allocator). Nothing survives a restart and instances do not share state.")]
    private static partial void LogInMemory(ILogger logger);

    [LoggerMessage(Level = LogLevel.Critical, Message = "!!! AUTHENTICATION IS DISABLED (Allocator:Auth:Disabled=true): EVERY CALLER IS AN ADMIN. FOR LOCAL DEVELOPMENT ONLY; NEVER EXPOSE THIS INSTANCE. !!!")]
    private static partial void LogAuthDisabled(ILogger logger);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Broker keys without Allocator:Auth:ApiKeys:N:Pools are granted every pool: {Keys}. Grant each the pools it serves (docs/security.md).")]
    private static partial void LogEveryPool(ILogger logger, string keys);

    [LoggerMessage(Level = LogLevel.Warning, Message = "No API keys are configured (Allocator:Auth:ApiKeys): every /v1 request will be answered 401.")]
    private static partial void LogNoKeys(ILogger logger);

    [LoggerMessage(Level = LogLevel.Warning, Message = "A demo admin key from {Setting} is accepted. Do not use it outside local demos.")]
    private static partial void LogDemoKey(ILogger logger, string setting);

    [LoggerMessage(Level = LogLevel.Information, Message = "OpenTelemetry: exporting traces, metrics and logs over OTLP to {Endpoint} ({Protocol}).")]
    private static partial void LogExporting(ILogger logger, string endpoint, string protocol);

    [LoggerMessage(Level = LogLevel.Information, Message = "OpenTelemetry export is off: set OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://localhost:4317) to send traces, metrics and logs over OTLP.")]
    private static partial void LogNotExporting(ILogger logger);

    [LoggerMessage(Level = LogLevel.Information, Message = "Timeouts: lock {Lock} < command {Command} < grain call {Grain} < HTTP request {Request}.")]
    private static partial void LogTimeouts(ILogger logger, TimeSpan @lock, TimeSpan command, TimeSpan grain, TimeSpan request);
}
