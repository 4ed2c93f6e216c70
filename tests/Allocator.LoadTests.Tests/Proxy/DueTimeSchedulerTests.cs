using System.Diagnostics;
using Allocator.LoadTests.Proxy;

namespace Allocator.LoadTests.Tests.Proxy;

public sealed class DueTimeSchedulerTests
{
    private static long In(double ms) => Stopwatch.GetTimestamp() + (long)(ms * Stopwatch.Frequency / 1000);

    [Fact]
    public async Task WaitUntilAsync_SeveralWaits_CompleteInDueOrderAndNotBeforeTheirDueTime()
    {
        using var scheduler = new DueTimeScheduler("test");
        var order = new List<int>();
        var dues = new[] { 60.0, 20.0, 40.0, 5.0 };
        var tasks = dues.Select((ms, i) =>
        {
            var due = In(ms);
            return scheduler.WaitUntilAsync(due, CancellationToken.None).ContinueWith(
                _ =>
                {
                    lock (order)
                    {
                        order.Add(i);
                    }

                    return Stopwatch.GetTimestamp() - due;
                },
                TaskScheduler.Default);
        }).ToList();

        var early = await Task.WhenAll(tasks).WaitAsync(TimeSpan.FromSeconds(30));

        order.Should().Equal(3, 1, 2, 0);
        early.Should().OnlyContain(ticks => ticks >= -Stopwatch.Frequency / 2_000, "no wait ends more than the 0.5 ms tolerance early");
        scheduler.Pending.Should().Be(0);
    }

    [Fact]
    public async Task WaitUntilAsync_DueTimePassed_CompletesAtOnce()
    {
        using var scheduler = new DueTimeScheduler("test");

        var wait = scheduler.WaitUntilAsync(Stopwatch.GetTimestamp() - 1, CancellationToken.None);

        wait.IsCompletedSuccessfully.Should().BeTrue();
        await wait;
    }

    [Fact]
    public async Task WaitUntilAsync_Canceled_StopsWaitingAtOnce()
    {
        using var scheduler = new DueTimeScheduler("test");
        using var cancel = new CancellationTokenSource();

        var wait = scheduler.WaitUntilAsync(In(60_000), cancel.Token);
        await cancel.CancelAsync();

        await FluentActions.Awaiting(() => wait.WaitAsync(TimeSpan.FromSeconds(30))).Should().ThrowAsync<OperationCanceledException>();
    }

    [Fact]
    public async Task Dispose_WithPendingWaits_CancelsThem()
    {
        var scheduler = new DueTimeScheduler("test");
        var wait = scheduler.WaitUntilAsync(In(60_000), CancellationToken.None);

        scheduler.Dispose();

        await FluentActions.Awaiting(() => wait.WaitAsync(TimeSpan.FromSeconds(30))).Should().ThrowAsync<OperationCanceledException>();
        scheduler.WaitUntilAsync(In(60_000), CancellationToken.None).IsCanceled.Should().BeTrue();
    }
}
