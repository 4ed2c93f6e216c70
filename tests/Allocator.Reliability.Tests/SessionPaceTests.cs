using System.Diagnostics;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Tests;

/// <summary>The quick scenarios' pace (ADR 0030): turns shared by every broker come no faster than the rate, and a stop ends a wait.</summary>
public sealed class SessionPaceTests
{
    [Fact]
    public async Task Turns_SharedByManyBrokers_ComeNoFasterThanTheRate()
    {
        var pace = new SessionPace(perSecond: 100);
        var clock = Stopwatch.StartNew();

        // 8 brokers, 5 turns each: 40 turns at 100 a second, the first at once, the last 390 ms later.
        await Task.WhenAll(Enumerable.Range(0, 8).Select(async _ =>
        {
            for (var i = 0; i < 5; i++)
            {
                (await pace.WaitTurnAsync(CancellationToken.None)).Should().BeTrue();
            }
        }));

        clock.Elapsed.Should().BeGreaterThanOrEqualTo(TimeSpan.FromMilliseconds(380), "40 turns at 100 a second span 390 ms, whoever takes them");
    }

    [Fact]
    public async Task WaitTurn_StoppedWhileWaiting_ReturnsFalse()
    {
        var pace = new SessionPace(perSecond: 0.01); // a turn every 100 s
        (await pace.WaitTurnAsync(CancellationToken.None)).Should().BeTrue("the first turn comes at once");
        using var stop = new CancellationTokenSource();

        var waiting = pace.WaitTurnAsync(stop.Token);
        waiting.IsCompleted.Should().BeFalse("the next turn is 100 s away");
        await stop.CancelAsync();

        (await waiting.WaitAsync(TimeSpan.FromSeconds(30))).Should().BeFalse("a stop ends the wait, and the broker opens no more sessions");
    }
}
