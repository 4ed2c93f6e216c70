using Allocator.Telemetry;
using OpenTelemetry;
using OpenTelemetry.Exporter;
using OpenTelemetry.Metrics;
using OpenTelemetry.Resources;
using OpenTelemetry.Trace;

namespace Allocator.Host.Telemetry;

/// <summary>
/// Owns the OpenTelemetry SDK providers for the life of the host (the hosting extensions package
/// is not served here). The providers exist only when an OTLP endpoint is configured
/// (<c>OTEL_EXPORTER_OTLP_ENDPOINT</c>); otherwise nothing is collected or exported. They are
/// built when the host starts and flushed and disposed when it stops.
/// </summary>
internal sealed partial class OpenTelemetryProviders(IConfiguration configuration, ILogger<OpenTelemetryProviders> logger) : IHostedService, IDisposable
{
    // Orleans' application source carries the trace across grain calls; its runtime source (not
    // listed) traces the runtime's own messages as unrelated root traces.
    public static readonly string[] Sources = [AllocatorTelemetry.Name, "Npgsql", "Microsoft.AspNetCore", "Microsoft.Orleans.Application"];
    public static readonly string[] Meters = [AllocatorTelemetry.Name, "Npgsql", "Microsoft.AspNetCore.Hosting", "Microsoft.AspNetCore.Server.Kestrel"];

    private TracerProvider? _tracerProvider;
    private MeterProvider? _meterProvider;

    public Task StartAsync(CancellationToken cancellationToken)
    {
        var endpoint = configuration["OTEL_EXPORTER_OTLP_ENDPOINT"];
        if (string.IsNullOrWhiteSpace(endpoint))
        {
            LogDisabled(logger);
            return Task.CompletedTask;
        }

        if (!Uri.TryCreate(endpoint, UriKind.Absolute, out var baseUri))
        {
            throw new InvalidOperationException($"OTEL_EXPORTER_OTLP_ENDPOINT '{endpoint}' is not an absolute URI.");
        }

        var protocol = configuration["OTEL_EXPORTER_OTLP_PROTOCOL"] switch
        {
            null or "" or "grpc" => OtlpExportProtocol.Grpc,
            "http/protobuf" => OtlpExportProtocol.HttpProtobuf,
            var other => throw new InvalidOperationException($"OTEL_EXPORTER_OTLP_PROTOCOL '{other}' is not supported; use grpc or http/protobuf."),
        };
        var serviceName = configuration["OTEL_SERVICE_NAME"] is { Length: > 0 } name ? name : "allocator";
        var resource = ResourceBuilder.CreateDefault().AddService(serviceName);

        // Options are set explicitly (from IConfiguration, which includes the environment) so
        // that command-line and test configuration work too. With http/protobuf an endpoint set
        // in code is used as is, so the signal path is appended here as the exporter would.
        _tracerProvider = Sdk.CreateTracerProviderBuilder()
            .SetResourceBuilder(resource)
            .AddSource(Sources)
            .AddOtlpExporter(o => Configure(o, baseUri, protocol, "v1/traces"))
            .Build();
        _meterProvider = Sdk.CreateMeterProviderBuilder()
            .SetResourceBuilder(resource)
            .AddMeter(Meters)
            .AddOtlpExporter(o => Configure(o, baseUri, protocol, "v1/metrics"))
            .Build();
        LogEnabled(logger, baseUri, protocol, serviceName);
        return Task.CompletedTask;
    }

    public Task StopAsync(CancellationToken cancellationToken)
    {
        _tracerProvider?.ForceFlush(5000);
        _meterProvider?.ForceFlush(5000);
        Dispose();
        return Task.CompletedTask;
    }

    public void Dispose()
    {
        _tracerProvider?.Dispose();
        _meterProvider?.Dispose();
        _tracerProvider = null;
        _meterProvider = null;
    }

    private static void Configure(OtlpExporterOptions options, Uri baseUri, OtlpExportProtocol protocol, string signalPath)
    {
        options.Protocol = protocol;
        options.Endpoint = protocol == OtlpExportProtocol.HttpProtobuf
            ? new Uri(baseUri.AbsoluteUri.TrimEnd('/') + "/" + signalPath)
            : baseUri;
    }

    [LoggerMessage(Level = LogLevel.Information, Message = "OpenTelemetry export is off: set OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://localhost:4317) to send traces and metrics over OTLP.")]
    private static partial void LogDisabled(ILogger logger);

    [LoggerMessage(Level = LogLevel.Information, Message = "OpenTelemetry: exporting traces and metrics to {Endpoint} over {Protocol} as service {ServiceName}.")]
    private static partial void LogEnabled(ILogger logger, Uri endpoint, OtlpExportProtocol protocol, string serviceName);
}
