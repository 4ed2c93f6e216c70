using System.Collections.Concurrent;
using System.Diagnostics;
using Allocator.Client;
using Allocator.Telemetry;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;

namespace Allocator.Host.Tests;

[Collection(SharedHostCollection.Name)]
public sealed class TracingTests(SharedHostFixture fixture)
{
    private readonly TestHost _host = fixture.Host;

    [Fact]
    public async Task OneAllocation_YieldsHttpServerSpan_WithAllocatorSpansBelow()
    {
        var stopped = new ConcurrentQueue<Activity>();
        using var listener = new ActivityListener
        {
            ShouldListenTo = source => source.Name is AllocatorTelemetry.Name or "Microsoft.AspNetCore" or "Microsoft.Orleans.Application" or "Npgsql",
            Sample = (ref ActivityCreationOptions<ActivityContext> _) => ActivitySamplingResult.AllDataAndRecorded,
            ActivityStopped = stopped.Enqueue,
        };
        ActivitySource.AddActivityListener(listener);
        var pool = $"traced-{Guid.NewGuid():N}"[..20];
        await _host.Admin.PutPoolAsync(pool, new Client.PoolSettings { Strategy = "strict" });
        await _host.Admin.RegisterWorkersAsync(pool, [new WorkerBatchEntry("w1", "a:1", 4), new WorkerBatchEntry("w2", "a:2", 4)]);

        var allocation = (await _host.Broker.AllocateAsync(pool, new AllocateRequest { Units = 2 }, "traced")).Allocation!;

        var allocate = await WaitForAsync(stopped, a => a.OperationName == "allocator.allocate" && (a.GetTagItem(AllocatorTelemetry.Tags.Pool) as string) == pool);
        var server = await WaitForAsync(stopped, a => a.SpanId == allocate.ParentSpanId);
        server.Kind.Should().Be(ActivityKind.Server);
        server.OperationName.Should().Be("Microsoft.AspNetCore.Hosting.HttpRequestIn");
        server.DisplayName.Should().Be("POST /v1/pools/{pool}/allocations");
        server.GetTagItem("http.request.method").Should().Be("POST");
        server.GetTagItem("http.route").Should().Be("/v1/pools/{pool}/allocations");
        server.GetTagItem("http.response.status_code").Should().Be(201);
        server.GetTagItem("url.path").Should().Be($"/v1/pools/{pool}/allocations");

        allocate.TraceId.Should().Be(server.TraceId);
        allocate.GetTagItem(AllocatorTelemetry.Tags.Worker).Should().Be(allocation.WorkerId);
        allocate.GetTagItem(AllocatorTelemetry.Tags.Units).Should().Be(2);
        allocate.GetTagItem(AllocatorTelemetry.Tags.Outcome).Should().Be("allocated");
        allocate.GetTagItem(AllocatorTelemetry.Tags.Rank).Should().Be(0);
        allocate.GetTagItem(AllocatorTelemetry.Tags.ExcessScore).Should().Be(0L);
        allocate.GetTagItem(AllocatorTelemetry.Tags.RowsSkipped).Should().Be(0);
        allocate.GetTagItem(AllocatorTelemetry.Tags.BlockingFallback).Should().NotBeNull();
        allocate.GetTagItem(AllocatorTelemetry.Tags.Retries).Should().Be(0);

        // HTTP → allocator.allocate → Orleans grain call (client, server) → grain → batch → store → Npgsql statement.
        var client = await WaitForAsync(stopped, a => a.ParentSpanId == allocate.SpanId && a.Source.Name == "Microsoft.Orleans.Application");
        client.Kind.Should().Be(ActivityKind.Client);
        var grainServer = await WaitForAsync(stopped, a => a.ParentSpanId == client.SpanId);
        grainServer.Kind.Should().Be(ActivityKind.Server);
        grainServer.Source.Name.Should().Be("Microsoft.Orleans.Application");
        var grain = await WaitForAsync(stopped, a => a.ParentSpanId == grainServer.SpanId && a.OperationName == "allocator.grain.allocate");
        var batch = await WaitForAsync(stopped, a => a.ParentSpanId == grain.SpanId && a.OperationName == "allocator.batch");
        var storeSpan = await WaitForAsync(stopped, a => a.ParentSpanId == batch.SpanId && a.Source.Name == AllocatorTelemetry.Name);
        var statement = await WaitForAsync(stopped, a => a.TraceId == server.TraceId && a.Source.Name == "Npgsql");
        Ancestors(stopped, statement).Should().Contain(storeSpan.SpanId, "the SQL statement nests under the store call of the batch");
        var subtree = stopped.Where(a => a.TraceId == server.TraceId && a.Source.Name == AllocatorTelemetry.Name).ToList();
        subtree.Should().Contain(a => Equals(a.GetTagItem(AllocatorTelemetry.Tags.Strategy), "strict"));
        subtree.Should().Contain(a => a.GetTagItem(AllocatorTelemetry.Tags.BatchSize) != null);
        subtree.Should().Contain(a => a.GetTagItem(AllocatorTelemetry.Tags.QueueWaitMs) != null);
    }

    [Fact]
    public async Task OtlpExport_ReachesAnOtlpHttpEndpoint()
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
    }

    private static List<ActivitySpanId> Ancestors(IEnumerable<Activity> spans, Activity span)
    {
        var byId = spans.Where(a => a.TraceId == span.TraceId).GroupBy(a => a.SpanId).ToDictionary(g => g.Key, g => g.First());
        List<ActivitySpanId> chain = [];
        for (var parent = span.ParentSpanId; byId.TryGetValue(parent, out var next); parent = next.ParentSpanId)
        {
            chain.Add(parent);
        }

        return chain;
    }

    private static async Task<Activity> WaitForAsync(ConcurrentQueue<Activity> stopped, Func<Activity, bool> match)
    {
        var deadline = Stopwatch.StartNew();
        while (deadline.Elapsed < TimeSpan.FromSeconds(10))
        {
            if (stopped.FirstOrDefault(match) is { } found)
            {
                return found;
            }

            await Task.Delay(20);
        }

        throw new TimeoutException($"Waited 10 s for a span; saw: {string.Join(", ", stopped.Select(a => a.DisplayName))}");
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
                context.Response.ContentType = "application/x-protobuf";
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
