using System.Collections.Concurrent;
using System.Diagnostics;
using Allocator.Client;
using Allocator.Telemetry;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;
using Microsoft.Extensions.Logging;
using OpenTelemetry.Logs;
using OpenTelemetry.Metrics;
using OpenTelemetry.Trace;

namespace Allocator.Host.Tests;

/// <summary>
/// The host's OpenTelemetry wiring as an operator sees it: spans and metrics collected by the SDK
/// the host configures (read back with the SDK's in-memory exporter), and OTLP export to a real
/// receiver. ActivitySources and Meters are process-wide, so each check filters by its own pool.
/// </summary>
public sealed class TracingTests
{
    [Fact]
    public async Task OneAllocation_YieldsHttpGrainBatchSqlSpanTree_OnPostgreSql()
    {
        var spans = new List<Activity>();
        var host = await TestHost.StartAsync(
            [$"--ConnectionStrings:Allocator={TestPostgres.ConnectionString}", "--Allocator:Telemetry:TraceGrainCalls=true"],
            builder => builder.Services.AddOpenTelemetry().WithTracing(t => t.AddInMemoryExporter(spans)));
        var pool = Unique.Name("traced");
        AllocationInfo allocation;
        await using (host)
        {
            await host.Admin.PutPoolAsync(pool, new Client.PoolSettings { Strategy = "strict" });
            await host.Admin.RegisterWorkersAsync(pool, [new WorkerBatchEntry("w1", "a:1", 4), new WorkerBatchEntry("w2", "a:2", 4)]);
            allocation = (await host.Broker.AllocateAsync(pool, new AllocateRequest { Units = 2 }, "traced")).Allocation!;
        }

        // Stopping the host flushed the tracer provider: every span of the request has been exported.
        var allocate = spans.Single(a => a.OperationName == "allocator.allocate" && (a.GetTagItem(AllocatorTelemetry.Tags.Pool) as string) == pool);
        var trace = spans.Where(a => a.TraceId == allocate.TraceId).ToList();
        Activity ParentOf(Activity a) => trace.Single(p => p.SpanId == a.ParentSpanId);

        var server = ParentOf(allocate);
        server.Kind.Should().Be(ActivityKind.Server);
        server.Source.Name.Should().Be("Microsoft.AspNetCore");
        server.DisplayName.Should().Be("POST /v1/pools/{pool}/allocations");
        server.GetTagItem("http.request.method").Should().Be("POST");
        server.GetTagItem("http.route").Should().Be("/v1/pools/{pool}/allocations");
        server.GetTagItem("http.response.status_code").Should().Be(201);
        server.GetTagItem("url.path").Should().Be($"/v1/pools/{pool}/allocations");
        server.ParentSpanId.Should().Be(default(ActivitySpanId), "the request came without a traceparent");

        allocate.GetTagItem(AllocatorTelemetry.Tags.Worker).Should().Be(allocation.WorkerId);
        allocate.GetTagItem(AllocatorTelemetry.Tags.Units).Should().Be(2);
        allocate.GetTagItem(AllocatorTelemetry.Tags.Outcome).Should().Be("allocated");
        allocate.GetTagItem(AllocatorTelemetry.Tags.Rank).Should().Be(0);
        allocate.GetTagItem(AllocatorTelemetry.Tags.ExcessScore).Should().Be(0L);
        allocate.GetTagItem(AllocatorTelemetry.Tags.RowsSkipped).Should().Be(0);
        allocate.GetTagItem(AllocatorTelemetry.Tags.BlockingFallback).Should().NotBeNull();
        allocate.GetTagItem(AllocatorTelemetry.Tags.Retries).Should().Be(0);

        // HTTP -> allocate -> grain -> batch -> store -> SQL: walk up from a SQL statement span.
        var sql = trace.Where(a => a.Source.Name == "Npgsql").ToList();
        sql.Should().NotBeEmpty("Npgsql.OpenTelemetry traces the store's statements");
        List<Activity> Ancestors(Activity span)
        {
            var ancestors = new List<Activity>();
            for (var a = span; a.ParentSpanId != default; a = ParentOf(a))
            {
                ancestors.Add(ParentOf(a));
            }

            return ancestors;
        }

        // The pool's first batch claims the pool for its activation first (issue 47): a statement of its own, in the batch.
        sql.Select(s => ParentOf(s).OperationName).Should().Contain(["allocator.store.claim", "allocator.store.allocate"]);
        // (First: on a loaded machine the claim's statement may be retried under the same span, s11-p8.)
        Ancestors(sql.First(s => ParentOf(s).OperationName == "allocator.store.claim")).Select(a => a.OperationName)
            .Should().ContainInOrder("allocator.store.claim", "allocator.batch", "allocator.grain.allocate");
        var chain = Ancestors(sql.First(s => ParentOf(s).OperationName == "allocator.store.allocate"));

        chain.Select(a => a.OperationName).Should().ContainInOrder(
            "allocator.store.allocate", "allocator.batch", "allocator.grain.allocate", "allocator.allocate", "Microsoft.AspNetCore.Hosting.HttpRequestIn");

        // Between the grain and the endpoint: Orleans' grain call, server side then client side.
        var grainCall = chain.SkipWhile(a => a.OperationName != "allocator.grain.allocate").Skip(1).TakeWhile(a => a.OperationName != "allocator.allocate").ToList();
        grainCall.Select(a => (a.Source.Name, a.Kind)).Should().Equal(
            ("Microsoft.Orleans.Application", ActivityKind.Server),
            ("Microsoft.Orleans.Application", ActivityKind.Client));
        var batch = chain.Single(a => a.OperationName == "allocator.batch");
        batch.GetTagItem(AllocatorTelemetry.Tags.Strategy).Should().Be("strict");
        batch.GetTagItem(AllocatorTelemetry.Tags.BatchSize).Should().Be(1);
        var grain = chain.Single(a => a.OperationName == "allocator.grain.allocate");
        grain.GetTagItem(AllocatorTelemetry.Tags.QueueWait).Should().BeOfType<double>().Which.Should().BeInRange(0, 10, "a duration in seconds");
        grain.GetTagItem(AllocatorTelemetry.Tags.Outcome).Should().Be("allocated");
    }

    [Fact]
    public async Task Allocations_AreMeasuredInSeconds_WithSnakeCaseOutcomes()
    {
        using var duration = new MetricCollector<double>(null, AllocatorTelemetry.Name, "allocator.api.allocation.duration");
        using var outcomes = new MetricCollector<long>(null, AllocatorTelemetry.Name, "allocator.api.allocations");
        using var grainDuration = new MetricCollector<double>(null, AllocatorTelemetry.Name, "allocator.allocation.duration");
        await using var host = await TestHost.StartAsync();
        var pool = Unique.Name("metered");
        await host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
        await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 1));

        (await host.Broker.AllocateAsync(pool, new AllocateRequest(), "m-1")).Status.Should().Be(AllocateStatus.Allocated);
        (await host.Broker.AllocateAsync(pool, new AllocateRequest(), "m-2")).Status.Should().Be(AllocateStatus.NoCapacity);

        bool Ours(IReadOnlyDictionary<string, object?> tags) => Equals(tags[AllocatorTelemetry.Tags.Pool], pool);
        outcomes.GetMeasurementSnapshot().Where(m => Ours(m.Tags)).Select(m => m.Tags[AllocatorTelemetry.Tags.Outcome])
            .Should().BeEquivalentTo(["allocated", "no_capacity"]);
        var seconds = duration.GetMeasurementSnapshot().Where(m => Ours(m.Tags)).ToList();
        seconds.Should().HaveCount(2);
        seconds.Should().OnlyContain(m => m.Value > 0 && m.Value < 10, "an in-memory allocation takes well under a second, so a value in milliseconds would show");
        duration.Instrument!.Unit.Should().Be("s");
        grainDuration.Instrument!.Unit.Should().Be("s");
        grainDuration.GetMeasurementSnapshot().Count(m => Ours(m.Tags)).Should().Be(2);
    }

    [Fact]
    public async Task DurationHistograms_ExportBucketsThatResolveMilliseconds()
    {
        var metrics = new List<Metric>();
        var host = await TestHost.StartAsync(configure: builder => builder.Services.AddOpenTelemetry().WithMetrics(m => m.AddInMemoryExporter(metrics)));
        await using (host)
        {
            var pool = Unique.Name("buckets");
            await host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
            await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 2));
            (await host.Broker.AllocateAsync(pool, new AllocateRequest(), "b-1")).Status.Should().Be(AllocateStatus.Allocated);
        }

        var histogram = metrics.Last(m => m.Name == "allocator.api.allocation.duration");
        histogram.Unit.Should().Be("s");
        histogram.MetricType.Should().Be(MetricType.Histogram);
        var bounds = new List<double>();
        foreach (ref readonly var point in histogram.GetMetricPoints())
        {
            foreach (var bucket in point.GetHistogramBuckets())
            {
                bounds.Add(bucket.ExplicitBound);
            }

            break;
        }

        bounds.Should().Contain([0.001, 0.002, 0.005, 0.01, 0.1], "the SDK takes the instrument's advice (AllocatorTelemetry.DurationBuckets)");
        metrics.Select(m => m.Name).Should().Contain(["http.server.request.duration", "dotnet.gc.collections"], "ASP.NET Core and runtime metrics are collected too");
    }

    [Fact]
    public async Task Logs_WrittenInASpan_CarryItsTraceId()
    {
        var logs = new List<LogRecord>();
        var host = await TestHost.StartAsync(configure: builder => builder.Services.AddOpenTelemetry().WithLogging(l => l.AddInMemoryExporter(logs)));
        await using (host)
        {
            var logger = host.Services.GetRequiredService<ILoggerFactory>().CreateLogger("Allocator.Host.Tests");
            using var span = AllocatorTelemetry.ActivitySource.StartActivity("test.span") ?? new Activity("test.span").Start();
            logger.LogWarning("inside the span {Marker}", "log-correlation");
            span.Stop();
            logs.Should().Contain(l => l.FormattedMessage == "inside the span log-correlation" && l.TraceId == span.TraceId && l.SpanId == span.SpanId);
        }
    }

    [Fact]
    public async Task WithoutAnOtlpEndpoint_NoProviderIsBuilt()
    {
        await using var host = await TestHost.StartAsync();
        host.Services.GetService<TracerProvider>().Should().BeNull("nothing would export what a tracer provider samples");
        host.Services.GetService<MeterProvider>().Should().BeNull();
    }

    [Fact]
    public async Task WithAnOtlpEndpoint_EverySignalIsEnabled()
    {
        await using var host = await TestHost.StartAsync(["--OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9"]);
        host.Services.GetService<TracerProvider>().Should().NotBeNull();
        host.Services.GetService<MeterProvider>().Should().NotBeNull();
        host.Services.GetService<LoggerProvider>().Should().NotBeNull();
    }

    [Fact]
    public async Task OtlpExport_ReachesAnOtlpHttpEndpoint_WithTracesMetricsAndLogs()
    {
        await using var receiver = await OtlpReceiver.StartAsync();
        var host = await TestHost.StartAsync(
        [
            $"--OTEL_EXPORTER_OTLP_ENDPOINT={receiver.Endpoint}",
            "--OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
            "--OTEL_SERVICE_NAME=allocator-test",
        ]);
        await using (host)
        {
            var pool = Unique.Name("otlp");
            await host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
            await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 2));
            (await host.Broker.AllocateAsync(pool, new AllocateRequest(), "otlp-1")).Status.Should().Be(AllocateStatus.Allocated);
        }

        // Stopping the host flushed the providers.
        receiver.Received.Should().Contain(r => r.Path == "/v1/traces" && r.ContentType == "application/x-protobuf" && r.Length > 0);
        receiver.Received.Should().Contain(r => r.Path == "/v1/metrics" && r.Length > 0);
        receiver.Received.Should().Contain(r => r.Path == "/v1/logs" && r.Length > 0, "the start-up report logs at Warning and above reach OTLP too");
    }

    /// <summary>A minimal OTLP/HTTP receiver: records each POST's path, content type and size.</summary>
    private sealed class OtlpReceiver : IAsyncDisposable
    {
        private readonly WebApplication _app;

        private OtlpReceiver(WebApplication app, string endpoint)
        {
            _app = app;
            Endpoint = endpoint;
        }

        public string Endpoint { get; }

        public ConcurrentQueue<(string Path, string? ContentType, long Length)> Received { get; } = new();

        public static async Task<OtlpReceiver> StartAsync()
        {
            var builder = WebApplication.CreateSlimBuilder(["--urls", "http://127.0.0.1:0", "--Logging:LogLevel:Default=Warning"]);
            var app = builder.Build();
            OtlpReceiver? self = null;
            app.MapPost("/v1/{signal}", async (HttpContext context) =>
            {
                using var buffer = new MemoryStream();
                await context.Request.Body.CopyToAsync(buffer);
                self!.Received.Enqueue((context.Request.Path.Value!, context.Request.ContentType, buffer.Length));
                return Results.Bytes([], "application/x-protobuf");
            });
            await app.StartAsync();
            var address = app.Services.GetRequiredService<IServer>().Features.Get<IServerAddressesFeature>()!.Addresses.Single();
            self = new OtlpReceiver(app, address.TrimEnd('/'));
            return self;
        }

        public async ValueTask DisposeAsync()
        {
            await _app.StopAsync();
            await _app.DisposeAsync();
        }
    }
}
