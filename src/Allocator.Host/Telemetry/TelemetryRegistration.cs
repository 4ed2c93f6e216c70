using Allocator.Telemetry;
using Npgsql;
using OpenTelemetry;
using OpenTelemetry.Logs;
using OpenTelemetry.Metrics;
using OpenTelemetry.Resources;
using OpenTelemetry.Trace;

namespace Allocator.Host.Telemetry;

/// <summary>
/// The one place that wires the OpenTelemetry SDK (in the manner of eShop's service defaults):
/// traces, metrics and logs of the host, its libraries and its database drivers, exported over
/// OTLP when <c>OTEL_EXPORTER_OTLP_ENDPOINT</c> is configured.
/// </summary>
internal static partial class TelemetryRegistration
{
    /// <summary>The <c>service.name</c> when <c>OTEL_SERVICE_NAME</c> is not set.</summary>
    public const string DefaultServiceName = "allocator";

    /// <summary>
    /// Activity sources: Allocator's own (host, grains, stores) and Orleans' application source,
    /// which carries the trace across grain calls (not its runtime source: one span per message
    /// of the runtime's own traffic is noise). ASP.NET Core, SqlClient and Npgsql come with their
    /// instrumentation below.
    /// </summary>
    public static readonly string[] Sources = [AllocatorTelemetry.Name, "Microsoft.Orleans.Application"];

    /// <summary>Allocator's meter; ASP.NET Core, Kestrel, the runtime, SqlClient and Npgsql come with their instrumentation below.</summary>
    public static readonly string[] Meters = [AllocatorTelemetry.Name];

    /// <summary>
    /// Adds the OpenTelemetry SDK to the host. Configures every signal: the ASP.NET Core,
    /// runtime, SqlClient and Npgsql instrumentation, Allocator's and Orleans' sources,
    /// Allocator's meter, logs with scopes and the formatted message (correlated with the active
    /// span), and the resource (<c>service.name</c> from <c>OTEL_SERVICE_NAME</c>, default
    /// <c>allocator</c>). Enables them, with the OTLP exporter for all three, when
    /// <c>OTEL_EXPORTER_OTLP_ENDPOINT</c> is set in any configuration source (environment, command
    /// line, appsettings); the exporter reads the standard <c>OTEL_EXPORTER_OTLP_*</c> keys itself.
    /// </summary>
    /// <remarks>
    /// Without an endpoint nothing is collected, as nothing would be exported: no span is sampled
    /// and no measurement aggregated, so the service pays nothing for telemetry it does not ship.
    /// Anything that enables a signal itself (<c>services.AddOpenTelemetry().WithTracing(…)</c>
    /// with another exporter, as the tests do with the in-memory one) gets the same configuration.
    /// </remarks>
    public static TBuilder AddAllocatorTelemetry<TBuilder>(this TBuilder builder)
        where TBuilder : IHostApplicationBuilder
    {
        var configuration = builder.Configuration;
        var services = builder.Services;
        var serviceName = configuration["OTEL_SERVICE_NAME"] is { Length: > 0 } name ? name : DefaultServiceName;

        var telemetry = services.AddOpenTelemetry()
            .ConfigureResource(resource => resource.AddService(serviceName, serviceVersion: ServiceVersion.Version));
        if (string.IsNullOrWhiteSpace(configuration["OTEL_TRACES_SAMPLER"]))
        {
            // A sampler set in code wins over the standard variable, so only without one.
            services.ConfigureOpenTelemetryTracerProvider(tracing => tracing.SetSampler(new ParentBasedSampler(new NoHousekeepingRoots())));
        }

        services.ConfigureOpenTelemetryTracerProvider(tracing => tracing
            .AddSource(Sources)
            .AddAspNetCoreInstrumentation(o => o.Filter = context => !context.Request.Path.StartsWithSegments("/health", StringComparison.Ordinal))
            .AddSqlClientInstrumentation()
            .AddNpgsql());
        services.ConfigureOpenTelemetryMeterProvider(metrics => metrics
            .AddMeter(Meters)
            .AddAspNetCoreInstrumentation()
            .AddRuntimeInstrumentation()
            .AddSqlClientInstrumentation()
            .AddNpgsqlInstrumentation());
        services.Configure<OpenTelemetryLoggerOptions>(logging =>
        {
            logging.IncludeFormattedMessage = true;
            logging.IncludeScopes = true;
        });

        if (IsExporting(configuration))
        {
            // With http/protobuf the exporter appends /v1/traces, /v1/metrics and /v1/logs to the
            // base endpoint; per-signal variables (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, …) win.
            telemetry.WithTracing().WithMetrics().WithLogging().UseOtlpExporter();
        }

        return builder;
    }

    /// <summary>
    /// The root sampler: every trace that a request (or a caller's <c>traceparent</c>) starts is
    /// recorded; a client span with nothing above it is not. Those are the statements of the
    /// service's own housekeeping (the lease reaper's two statements a second per instance, the
    /// pool gauges' statistics, the readiness probe's <c>SELECT 1</c>), which would otherwise
    /// bury the allocations in a trace viewer and use up its trace limit.
    /// </summary>
    private sealed class NoHousekeepingRoots : Sampler
    {
        private static readonly SamplingResult Drop = new(SamplingDecision.Drop);
        private static readonly SamplingResult Sample = new(SamplingDecision.RecordAndSample);

        public override SamplingResult ShouldSample(in SamplingParameters samplingParameters) =>
            samplingParameters.Kind == System.Diagnostics.ActivityKind.Client ? Drop : Sample;
    }

    /// <summary>The setting that turns trace propagation across grain calls on without an OTLP endpoint (tests, other exporters).</summary>
    public const string TraceGrainCallsSetting = "Allocator:Telemetry:TraceGrainCalls";

    /// <summary>
    /// Whether the silo carries traces across grain calls: when traces are exported, or when
    /// <see cref="TraceGrainCallsSetting"/> says so (code that adds its own tracing exporter).
    /// </summary>
    public static bool TracesGrainCalls(IConfiguration configuration) =>
        IsExporting(configuration) || (bool.TryParse(configuration[TraceGrainCallsSetting], out var on) && on);

    /// <summary>Whether an OTLP endpoint is configured (<c>OTEL_EXPORTER_OTLP_ENDPOINT</c>).</summary>
    public static bool IsExporting(IConfiguration configuration) =>
        !string.IsNullOrWhiteSpace(configuration["OTEL_EXPORTER_OTLP_ENDPOINT"]);
}
