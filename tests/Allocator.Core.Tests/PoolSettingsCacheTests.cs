using Microsoft.Extensions.Time.Testing;

namespace Allocator.Core.Tests;

public sealed class PoolSettingsCacheTests
{
    private readonly FakeTimeProvider _clock = new(new DateTimeOffset(2026, 1, 1, 0, 0, 0, TimeSpan.Zero));
    private readonly Feed _feed = new();
    private int _reads;
    private PoolSettings? _stored = new() { Strategy = AllocationStrategy.SkipLocked };
    private TaskCompletionSource? _gate;

    [Fact]
    public async Task GetAsync_WithinThePeriod_ReadsOnce()
    {
        using var cache = Create();

        (await cache.GetAsync("p"))!.Strategy.Should().Be(AllocationStrategy.SkipLocked);
        _stored = new PoolSettings { Strategy = AllocationStrategy.Strict };
        _clock.Advance(TimeSpan.FromMilliseconds(999));

        (await cache.GetAsync("p"))!.Strategy.Should().Be(AllocationStrategy.SkipLocked, "still within the period");
        _reads.Should().Be(1);
    }

    [Fact]
    public async Task GetAsync_AfterThePeriod_AnswersAtOnce_AndRefreshesInTheBackground()
    {
        using var cache = Create();
        await cache.GetAsync("p");
        _stored = new PoolSettings { Strategy = AllocationStrategy.Strict };
        _clock.Advance(TimeSpan.FromSeconds(1));

        (await cache.GetAsync("p"))!.Strategy.Should().Be(AllocationStrategy.SkipLocked, "the caller is not made to wait for the refresh");
        await WaitUntilAsync(async () => (await cache.GetAsync("p"))!.Strategy == AllocationStrategy.Strict, "the background refresh");
        _reads.Should().Be(2);
    }

    [Fact]
    public async Task SettingsNotification_DropsTheEntry_CapacityNotificationDoesNot()
    {
        using var cache = Create();
        await cache.GetAsync("p");
        _stored = new PoolSettings { Strategy = AllocationStrategy.Strict };

        _feed.Raise(new PoolChanged("p", PoolChangeKind.CapacityAvailable));
        (await cache.GetAsync("p"))!.Strategy.Should().Be(AllocationStrategy.SkipLocked);
        _feed.Raise(new PoolChanged("p", PoolChangeKind.SettingsChanged));
        (await cache.GetAsync("p"))!.Strategy.Should().Be(AllocationStrategy.Strict);
    }

    [Fact]
    public async Task InvalidateDuringARead_TheReadIsNotCached()
    {
        using var cache = Create();
        _gate = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var read = cache.GetAsync("p").AsTask();
        cache.Invalidate("p"); // a change notified while the read is in flight may be newer than it
        _gate.SetResult();
        await read;
        _gate = null;

        await cache.GetAsync("p");

        _reads.Should().Be(2, "the read that raced the change was not kept");
    }

    [Fact]
    public async Task ColdCache_CallersThatMissTogether_ShareOneRead()
    {
        using var cache = Create();
        _gate = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var callers = Enumerable.Range(0, 100).Select(_ => cache.GetAsync("p").AsTask()).ToList();
        _gate.SetResult();

        (await Task.WhenAll(callers)).Should().OnlyContain(s => s!.Strategy == AllocationStrategy.SkipLocked);
        _reads.Should().Be(1, "a cold start of many callers must not read once per caller");
    }

    [Fact]
    public async Task ColdCache_ACallerCanceled_StopsWaitingWithoutCancelingTheOthers()
    {
        using var cache = Create();
        _gate = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var canceled = new CancellationTokenSource();
        var gaveUp = cache.GetAsync("p", canceled.Token).AsTask();
        var stays = cache.GetAsync("p").AsTask();

        await canceled.CancelAsync();
        await gaveUp.Invoking(t => t).Should().ThrowAsync<OperationCanceledException>();
        _gate.SetResult();

        (await stays)!.Strategy.Should().Be(AllocationStrategy.SkipLocked);
        _reads.Should().Be(1);
    }

    [Fact]
    public async Task MissingPool_IsNotCached()
    {
        using var cache = Create();
        _stored = null;
        (await cache.GetAsync("p")).Should().BeNull();
        _stored = PoolSettings.Default;

        (await cache.GetAsync("p")).Should().NotBeNull("a pool created afterwards is found at once");
    }

    [Fact]
    public void Dispose_Unsubscribes()
    {
        var cache = Create();
        _feed.Subscribers.Should().Be(1);
        cache.Dispose();
        _feed.Subscribers.Should().Be(0);
    }

    private PoolSettingsCache Create() => new(async (_, ct) =>
    {
        Interlocked.Increment(ref _reads);
        if (_gate is { } gate)
        {
            await gate.Task.WaitAsync(ct);
        }

        return _stored;
    }, _feed, TimeSpan.FromSeconds(1), _clock);

    private static async Task WaitUntilAsync(Func<Task<bool>> condition, string what)
    {
        var watch = System.Diagnostics.Stopwatch.StartNew();
        while (!await condition())
        {
            if (watch.Elapsed > TimeSpan.FromSeconds(10))
            {
                throw new TimeoutException($"Timed out waiting for {what}.");
            }

            await Task.Delay(5);
        }
    }

    private sealed class Feed : IPoolChangeFeed
    {
        private Action<PoolChanged>? _handler;

        public int Subscribers => _handler is null ? 0 : 1;

        public IDisposable Subscribe(Action<PoolChanged> handler)
        {
            _handler = handler;
            return new Unsubscribe(this);
        }

        public void Raise(PoolChanged change) => _handler?.Invoke(change);

        private sealed class Unsubscribe(Feed feed) : IDisposable
        {
            public void Dispose() => feed._handler = null;
        }
    }
}
