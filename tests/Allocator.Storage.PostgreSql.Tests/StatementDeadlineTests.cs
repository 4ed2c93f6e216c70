using Microsoft.Extensions.Time.Testing;

namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>
/// <see cref="StatementDeadline"/> alone: what Npgsql registers on its token (here a callback that
/// blocks, as Npgsql's cancel request does against a hung server) runs on a thread of its own,
/// and neither the clock nor the caller that cancels waits for it.
/// </summary>
public sealed class StatementDeadlineTests
{
    private static readonly TimeSpan Timeout = TimeSpan.FromSeconds(3);

    [Fact]
    public void TheTimeoutPasses_TheTokenIsCancelledOffTheThreadPool_AndTheClockDoesNotWait()
    {
        var time = new FakeTimeProvider();
        using var deadline = new StatementDeadline(Timeout, time, CancellationToken.None);
        using var callback = new BlockingCallback(deadline.Token);

        time.Advance(Timeout - TimeSpan.FromMilliseconds(1));
        deadline.Token.IsCancellationRequested.Should().BeFalse();
        time.Advance(TimeSpan.FromMilliseconds(1));

        callback.Started.Wait(TimeSpan.FromSeconds(10)).Should().BeTrue("the command timeout passed");
        deadline.Expired.Should().BeTrue();
        callback.OnThreadPool.Should().BeFalse("a cancel that waits for a hung server must not hold a shared thread-pool thread");
        callback.Release();
    }

    [Fact]
    public async Task TheCallerCancels_ItsCancelReturnsAtOnce_AndTheTokenIsCancelledOffTheThreadPool()
    {
        using var caller = new CancellationTokenSource();
        using var deadline = new StatementDeadline(Timeout, new FakeTimeProvider(), caller.Token);
        using var callback = new BlockingCallback(deadline.Token);

        await Task.Run(caller.Cancel).WaitAsync(TimeSpan.FromSeconds(10)); // returns while the callback still blocks

        callback.Started.Wait(TimeSpan.FromSeconds(10)).Should().BeTrue();
        deadline.Expired.Should().BeFalse("the caller cancelled, the timeout did not pass");
        callback.OnThreadPool.Should().BeFalse();
        callback.Release();
    }

    [Fact]
    public void DisposedBeforeTheTimeout_NothingIsCancelledAfterwards()
    {
        var time = new FakeTimeProvider();
        using var caller = new CancellationTokenSource();
        var deadline = new StatementDeadline(Timeout, time, caller.Token);
        var token = deadline.Token;
        var cancelled = 0;
        using var registration = token.Register(() => Interlocked.Increment(ref cancelled));

        deadline.Dispose();
        time.Advance(Timeout * 2);
        caller.Cancel();

        Thread.Sleep(100); // a cancel thread, had one been started, would have run by now
        Volatile.Read(ref cancelled).Should().Be(0);
        deadline.Expired.Should().BeFalse();
    }

    [Fact]
    public void DisposedWhileACancelRuns_TheCancelRunsToItsEnd()
    {
        var time = new FakeTimeProvider();
        var deadline = new StatementDeadline(Timeout, time, CancellationToken.None);
        using var callback = new BlockingCallback(deadline.Token);
        time.Advance(Timeout);
        callback.Started.Wait(TimeSpan.FromSeconds(10)).Should().BeTrue();

        deadline.Dispose(); // the statement ended meanwhile
        callback.Release();

        callback.Finished.Wait(TimeSpan.FromSeconds(10)).Should().BeTrue("the cancel thread finishes, and disposes the token's source itself");
    }

    /// <summary>Registered on a token: records its thread, then blocks until released.</summary>
    private sealed class BlockingCallback : IDisposable
    {
        private readonly ManualResetEventSlim _release = new();
        private readonly CancellationTokenRegistration _registration;

        public BlockingCallback(CancellationToken token) => _registration = token.Register(() =>
        {
            OnThreadPool = Thread.CurrentThread.IsThreadPoolThread;
            Started.Set();
            _release.Wait(TimeSpan.FromSeconds(30));
            Finished.Set();
        });

        public ManualResetEventSlim Started { get; } = new();

        public ManualResetEventSlim Finished { get; } = new();

        public bool OnThreadPool { get; private set; }

        public void Release() => _release.Set();

        public void Dispose()
        {
            _release.Set();
            Finished.Wait(TimeSpan.FromSeconds(10));
            _registration.Dispose();
            _release.Dispose();
            Started.Dispose();
            Finished.Dispose();
        }
    }
}
