using System.Collections.Concurrent;
using System.Diagnostics;
using Allocator.Grains.Tests.Support;
using Allocator.Telemetry;

namespace Allocator.Grains.Tests;

public sealed class TelemetryTests : IDisposable
{
    private const string OrleansApplicationSource = "Microsoft.Orleans.Application";
    private static readonly ActivitySource TestSource = new("Allocator.Grains.Tests");
    private readonly ConcurrentBag<Activity> _stopped = [];
    private readonly ActivityListener _listener;

    public TelemetryTests()
    {
        _listener = new ActivityListener
        {
            ShouldListenTo = s => s.Name is AllocatorTelemetry.Name or "Allocator.Grains.Tests" or OrleansApplicationSource,
            Sample = (ref ActivityCreationOptions<ActivityContext> _) => ActivitySamplingResult.AllDataAndRecorded,
            ActivityStopped = _stopped.Add,
        };
        ActivitySource.AddActivityListener(_listener);
    }

    public void Dispose() => _listener.Dispose();

    [Fact]
    public async Task Allocate_YieldsCallerOrleansCallGrainBatchStoreTreeWithAttributes()
    {
        await using var h = await GrainHarness.CreateAsync(traced: true);
        AllocationOutcome outcome;
        ActivityTraceId traceId;
        using (var request = TestSource.StartActivity("test.request")!)
        {
            traceId = request.TraceId;
            outcome = await h.Pool.AllocateAsync(new AllocationRequest("s1"), TimeSpan.Zero);
        }

        await Wait.UntilAsync(() => InTrace(traceId).Count(a => a.OperationName is "allocator.grain.allocate" or "allocator.batch") == 2, "the grain and batch spans to end");
        var spans = InTrace(traceId);
        var root = spans.Single(a => a.OperationName == "test.request");
        var grain = spans.Single(a => a.OperationName == "allocator.grain.allocate");
        var batch = spans.Single(a => a.OperationName == "allocator.batch");

        // test.request → Orleans client span → Orleans server span → grain → batch → (store).
        var server = spans.Single(a => a.SpanId == grain.ParentSpanId);
        server.Source.Name.Should().Be(OrleansApplicationSource);
        server.Kind.Should().Be(ActivityKind.Server);
        var client = spans.Single(a => a.SpanId == server.ParentSpanId);
        client.Source.Name.Should().Be(OrleansApplicationSource);
        client.Kind.Should().Be(ActivityKind.Client);
        client.ParentSpanId.Should().Be(root.SpanId);
        batch.ParentSpanId.Should().Be(grain.SpanId);
        batch.Links.Select(l => l.Context.SpanId).Should().Equal(grain.SpanId);
        h.Store.AllocateParents.Should().Equal("allocator.batch");

        var tags = grain.TagObjects.ToDictionary(t => t.Key, t => t.Value);
        tags[AllocatorTelemetry.Tags.Pool].Should().Be(GrainHarness.PoolId);
        tags[AllocatorTelemetry.Tags.Worker].Should().Be(outcome.Allocation!.WorkerId);
        tags[AllocatorTelemetry.Tags.Outcome].Should().Be("allocated");
        tags[AllocatorTelemetry.Tags.BatchSize].Should().Be(1);
        tags.Should().ContainKeys(
            AllocatorTelemetry.Tags.Rank,
            AllocatorTelemetry.Tags.ExcessScore,
            AllocatorTelemetry.Tags.RowsSkipped,
            AllocatorTelemetry.Tags.BlockingFallback,
            AllocatorTelemetry.Tags.Retries,
            AllocatorTelemetry.Tags.QueueWait,
            AllocatorTelemetry.Tags.Strategy);
        batch.TagObjects.Should().Contain(new KeyValuePair<string, object?>(AllocatorTelemetry.Tags.BatchSize, 1));
    }

    [Fact]
    public async Task CoalescedBatch_LinksEveryCallerItServed()
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { MaxBatchesInFlight = 1 }, traced: true);
        h.Store.BlockAllocations = true;
        using var request = TestSource.StartActivity("test.request")!;
        var first = h.Pool.AllocateAsync(new AllocationRequest("s0"), TimeSpan.Zero);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the first batch");
        var rest = Enumerable.Range(1, 3).Select(i => h.Pool.AllocateAsync(new AllocationRequest($"s{i}"), TimeSpan.Zero)).ToList();
        await Wait.UntilAsync(async () => await h.QueuedAsync() == 3, "three calls to queue");
        blocked.Release();
        (await Wait.ForAsync(h.Store.BlockedAllocate(1), "the coalesced batch")).Release();
        await Wait.ForAsync(Task.WhenAll(rest.Prepend(first)), "all callers");

        await Wait.UntilAsync(() => InTrace(request.TraceId).Count(a => a.OperationName == "allocator.batch") == 2, "both batch spans to end");
        var grains = InTrace(request.TraceId).Where(a => a.OperationName == "allocator.grain.allocate").ToList();
        var coalesced = InTrace(request.TraceId).Single(a => a.OperationName == "allocator.batch" && a.Links.Count() == 3);
        coalesced.Links.Select(l => l.Context.SpanId).Should().BeSubsetOf(grains.Select(g => g.SpanId));
        grains.Should().HaveCount(4);
    }

    private List<Activity> InTrace(ActivityTraceId traceId) => [.. _stopped.Where(a => a.TraceId == traceId)];
}
