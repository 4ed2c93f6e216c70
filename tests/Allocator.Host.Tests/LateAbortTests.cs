using System.Net;
using System.Net.Http.Json;
using Allocator.Client;
using Allocator.Grains;
using Microsoft.Extensions.DependencyInjection;
using Orleans;

namespace Allocator.Host.Tests;

/// <summary>
/// A broker that closes its connection after the pool grain answered "allocated" but before the
/// endpoint could write the answer: the grain never hears a cancellation (it had answered), so
/// the endpoint is the one that knows the caller gave up (DESIGN: "an allocation whose caller is
/// known to have given up is released by the service"). A retry of the key that was answered the
/// allocation before that keeps it (held means held).
/// </summary>
public sealed class LateAbortTests : IAsyncLifetime
{
    private static readonly TimeSpan Limit = TimeSpan.FromSeconds(30);
    private readonly AnswerHold _hold = new();
    private TestHost _host = null!;

    public async Task InitializeAsync() => _host = await TestHost.StartAsync(
        [$"--ConnectionStrings:Allocator={TestPostgres.ConnectionString}"],
        builder => builder.Services.AddSingleton<IOutgoingGrainCallFilter>(_hold));

    public async Task DisposeAsync() => await _host.DisposeAsync();

    [Fact]
    public async Task ClientLeavesAfterTheGrainAnswered_TheServiceReleasesTheAllocation_AndARetryFindsItEnded()
    {
        using var broker = await AnsweredButNotYetToldAsync("late-abort", "late");
        var (pool, abandon) = (broker.Pool, broker.Watch);
        (await _host.Broker.GetPoolAsync(pool)).ActiveAllocations.Should().Be(1, "the grain answered it allocated");

        await broker.LeaveAsync();

        (await TaskLimit.WithinAsync(abandon.Abandoned, Limit, "the endpoint to hand the allocation back")).Should().BeTrue("nothing else claimed the key");
        await MultiInstanceTests.UntilAsync(async () => (await _host.Broker.GetPoolAsync(pool)).ActiveAllocations == 0, Limit, "the allocation nobody holds to be released");

        // A retry of the key finds the allocation ended; nothing new is allocated for it.
        var retry = await _host.Broker.AllocateAsync(pool, new AllocateRequest(), "late");
        retry.Allocation!.AllocationId.Should().Be(abandon.AllocationId);
        retry.Allocation.Active.Should().BeFalse("its only caller left before hearing of it");
        retry.Allocation.EndedAt.Should().NotBeNull();
        (await _host.Broker.GetPoolAsync(pool)).ActiveAllocations.Should().Be(0);
    }

    [Fact]
    public async Task ClientLeavesAfterARetryWasAnsweredTheAllocation_TheAllocationStaysHeld()
    {
        using var broker = await AnsweredButNotYetToldAsync("late-abort-kept", "kept");
        var (pool, abandon) = (broker.Pool, broker.Watch);

        // The broker's retry (another connection) is answered the allocation first: it holds it now.
        var retry = await _host.Broker.AllocateAsync(pool, new AllocateRequest(), "kept");
        retry.Allocation!.AllocationId.Should().Be(abandon.AllocationId);

        await broker.LeaveAsync();

        (await TaskLimit.WithinAsync(abandon.Abandoned, Limit, "the endpoint to offer the allocation back")).Should().BeFalse("the retry was answered it");
        var held = await _host.Broker.GetAllocationAsync(pool, retry.Allocation.AllocationId);
        held.Active.Should().BeTrue();
        (await _host.Broker.GetPoolAsync(pool)).ActiveAllocations.Should().Be(1);
    }

    /// <summary>A broker's allocate call in a new pool, answered "allocated" by the grain and held before the endpoint sees it.</summary>
    private async Task<LeavingBroker> AnsweredButNotYetToldAsync(string poolName, string key)
    {
        var pool = await MultiInstanceTests.NewPoolAsync(_host, poolName, workers: 1, capacity: 5);
        var watch = _hold.Next(pool);
        var leaving = new CancellationTokenSource();
        var send = SendAllocateAsync(pool, key, leaving.Token);
        await TaskLimit.WithinAsync(watch.Answered, Limit, "the grain to answer the allocation");
        return new LeavingBroker(pool, watch, leaving, send);
    }

    private sealed class LeavingBroker(string pool, Watch watch, CancellationTokenSource leaving, Task send) : IDisposable
    {
        public string Pool => pool;

        public Watch Watch => watch;

        /// <summary>The broker closes its connection while the answer is on its way.</summary>
        public async Task LeaveAsync()
        {
            await leaving.CancelAsync();
            await FluentActions.Awaiting(() => send).Should().ThrowAsync<OperationCanceledException>();
        }

        public void Dispose() => leaving.Dispose();
    }

    private async Task<HttpResponseMessage> SendAllocateAsync(string pool, string key, CancellationToken cancellationToken)
    {
        var http = _host.NewHttp(TestHost.BrokerKey);
        using var request = new HttpRequestMessage(HttpMethod.Post, $"/v1/pools/{pool}/allocations") { Content = JsonContent.Create(new { units = 1 }) };
        request.Headers.Add("Idempotency-Key", key);
        var response = await http.SendAsync(request, cancellationToken);
        response.StatusCode.Should().NotBe(HttpStatusCode.Created, "the broker left before its answer");
        return response;
    }

    /// <summary>
    /// An outgoing grain call filter in the host: holds the endpoint's allocate call for one pool
    /// after the grain answered, until the call's token (the request's abort) fires, and reports
    /// what the endpoint's abandon call then answered.
    /// </summary>
    private sealed class AnswerHold : IOutgoingGrainCallFilter
    {
        private volatile Watch? _watch;

        public Watch Next(string pool) => _watch = new Watch(pool);

        public async Task Invoke(IOutgoingGrainCallContext context)
        {
            var watch = _watch;
            if (watch is null || context.Request.GetInterfaceType() != typeof(IPoolGrain) || context.TargetId.Key.ToString() != watch.Pool)
            {
                await context.Invoke();
                return;
            }

            switch (context.Request.GetMethodName())
            {
                case nameof(IPoolGrain.AllocateAsync) when !watch.Answered.IsCompleted:
                    var requestAborted = context.Request.GetCancellationToken(); // read before the call: Orleans clears its request after
                    await context.Invoke();
                    if (context.Result is AllocationOutcome { Allocation: { } allocation })
                    {
                        watch.AllocationId = allocation.AllocationId;
                        watch.OnAnswered();
                        await Task.Delay(Timeout.Infinite, requestAborted).ContinueWith(_ => { }, TaskScheduler.Default);
                    }

                    break;
                case nameof(IPoolGrain.AbandonAsync):
                    await context.Invoke();
                    watch.OnAbandoned((bool)context.Result!);
                    break;
                default:
                    await context.Invoke();
                    break;
            }
        }
    }

    private sealed class Watch(string pool)
    {
        private readonly TaskCompletionSource<bool> _answered = new(TaskCreationOptions.RunContinuationsAsynchronously);
        private readonly TaskCompletionSource<bool> _abandoned = new(TaskCreationOptions.RunContinuationsAsynchronously);

        public string Pool => pool;

        public Guid AllocationId { get; set; }

        public Task<bool> Answered => _answered.Task;

        public Task<bool> Abandoned => _abandoned.Task;

        public void OnAnswered() => _answered.TrySetResult(true);

        public void OnAbandoned(bool released) => _abandoned.TrySetResult(released);
    }
}
