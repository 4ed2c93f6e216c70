using Allocator.Testing;

namespace Allocator.LoadTests.Tests;

/// <summary>
/// <c>tests/Shared/SchedulingDelay.cs</c>, the slack every timed check of the suite allows (ADR
/// 0030): it counts the time its probes were kept waiting, and it refuses a bound that could no
/// longer tell a promise from the defect it guards.
/// </summary>
[Collection(TimingSensitive.Name)]
public sealed class SchedulingDelayTests
{
    [Fact]
    public async Task Lost_CountsTheTimeTheThreadPoolKeptItsProbeWaiting()
    {
        using var lateness = SchedulingDelay.Start();
        await Task.Delay(100);

        // Every pool thread blocked for 1.5 s, and more work queued than the pool has threads: the
        // pool probe's wake-up waits behind it for the pool to grow (it adds a thread about every
        // half second when starved). As many blockers as the pool already has threads (other
        // tests of the run grew it) plus four per core. Only a lower bound: a slower machine only
        // keeps it waiting longer.
        using var release = new ManualResetEventSlim();
        var blockers = Enumerable.Range(0, ThreadPool.ThreadCount + (Environment.ProcessorCount * 4)).Select(_ => Task.Run(() => release.Wait(TimeSpan.FromSeconds(1.5)))).ToList();
        await Task.WhenAll(blockers);

        lateness.Lost.Should().BeGreaterThanOrEqualTo(TimeSpan.FromMilliseconds(200), "the pool probe could not run while every pool thread was blocked ({0})", lateness);
        lateness.Worst.Should().BeGreaterThanOrEqualTo(TimeSpan.FromMilliseconds(200));
    }

    [Fact]
    public void Bound_IsAtLeastThePromisePlusTheAllowance()
    {
        using var lateness = SchedulingDelay.Start();

        lateness.Bound(promise: TimeSpan.FromSeconds(2), allowance: TimeSpan.FromSeconds(1), defect: TimeSpan.FromMinutes(10))
            .Should().BeGreaterThanOrEqualTo(TimeSpan.FromSeconds(3));
    }

    [Fact]
    public void Bound_ThatWouldReachTheDefectsOwnSignature_RefusesToJudge()
    {
        using var lateness = SchedulingDelay.Start();

        var judge = () => lateness.Bound(promise: TimeSpan.FromSeconds(2), allowance: TimeSpan.FromSeconds(1), defect: TimeSpan.FromSeconds(3));

        judge.Should().Throw<TooBusyToJudgeException>().WithMessage("*could no longer tell the promise (2.00 s) from the defect it guards (3.00 s)*");
    }

    [Fact]
    public async Task Judge_AnAttemptTooBusyToJudge_IsRunAgain_AndTheFirstJudgedOneDecides()
    {
        var attempts = new List<int>();

        await SchedulingDelay.JudgeAsync(attempt =>
        {
            attempts.Add(attempt);
            return attempt < 3 ? throw new TooBusyToJudgeException("busy") : Task.CompletedTask;
        });

        attempts.Should().Equal(1, 2, 3);
    }

    [Fact]
    public async Task Judge_AFailedAttempt_IsNotRunAgain()
    {
        var attempts = 0;

        var judge = () => SchedulingDelay.JudgeAsync(_ =>
        {
            attempts++;
            throw new InvalidOperationException("the promise was broken");
        });

        await judge.Should().ThrowAsync<InvalidOperationException>().WithMessage("the promise was broken");
        attempts.Should().Be(1, "a judged attempt decides: a broken promise is not given another chance");
    }

    [Fact]
    public async Task Judge_NoAttemptJudged_FailsAndSaysSo()
    {
        var attempts = 0;

        var judge = () => SchedulingDelay.JudgeAsync(_ =>
        {
            attempts++;
            throw new TooBusyToJudgeException("busy");
        });

        await judge.Should().ThrowAsync<TooBusyToJudgeException>().WithMessage("None of 3 attempts could be judged; the last: busy");
        attempts.Should().Be(3);
    }
}
