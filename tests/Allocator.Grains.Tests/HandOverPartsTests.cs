using System.Collections.Immutable;
using System.Net;
using System.Reflection;
using Microsoft.Extensions.Time.Testing;

namespace Allocator.Grains.Tests;

/// <summary>What a caller does with each kind of failed attempt while a pool's grain moves.</summary>
public sealed class CallResendsTests
{
    private readonly FakeTimeProvider _time = new(new DateTimeOffset(2026, 1, 1, 0, 0, 0, TimeSpan.Zero));

    [Fact]
    public void Classify_MovedAndRejected_AreNothingDone_SiloGone_IsOutcomeUnknown_TheRestIsFinal()
    {
        CallResends.Classify(GrainErrors.Moved()).Should().Be(AttemptFailure.NothingDone);
        CallResends.Classify(Rejection("no activation")).Should().Be(AttemptFailure.NothingDone);
        CallResends.Classify(new SiloUnavailableException()).Should().Be(AttemptFailure.OutcomeUnknown, "a call outstanding to a silo declared dead may have run");
        CallResends.Classify(GrainErrors.Stopping()).Should().Be(AttemptFailure.Final, "a stopping silo with nowhere to move to: the host answers 503");
        CallResends.Classify(new AllocatorException(AllocatorErrorKind.Unavailable, "store down", outcomeUnknown: true, innerException: null)).Should().Be(AttemptFailure.Final);
        CallResends.Classify(new ArgumentException("bad")).Should().Be(AttemptFailure.Final);
        CallResends.Classify(new OperationCanceledException()).Should().Be(AttemptFailure.Final);
    }

    /// <summary>Orleans makes these itself (its constructors are not public).</summary>
    private static OrleansMessageRejectionException Rejection(string message) =>
        (OrleansMessageRejectionException)Activator.CreateInstance(typeof(OrleansMessageRejectionException), BindingFlags.Instance | BindingFlags.NonPublic, null, [message], null)!;

    [Fact]
    public void After_PausesNotAtFirst_ThenLongerUpTo200Ms()
    {
        var resends = new CallResends(TimeSpan.FromMinutes(1), _time);

        var pauses = Enumerable.Range(0, 7).Select(_ => resends.After(GrainErrors.Moved())).ToList();

        pauses.Should().Equal(TimeSpan.Zero, TimeSpan.FromMilliseconds(25), TimeSpan.FromMilliseconds(50), TimeSpan.FromMilliseconds(100),
            TimeSpan.FromMilliseconds(200), TimeSpan.FromMilliseconds(200), TimeSpan.FromMilliseconds(200));
        resends.Failures.Should().Be(7);
        resends.OutcomeUnknown.Should().BeFalse();
    }

    [Fact]
    public void After_AFinalFailure_IsNotSentAgain()
    {
        var resends = new CallResends(TimeSpan.FromMinutes(1), _time);

        resends.After(new AllocatorException(AllocatorErrorKind.NotFound, "no pool")).Should().BeNull();
        resends.Failures.Should().Be(0);
    }

    [Fact]
    public void After_TheBudgetIsSpent_StopsSending()
    {
        var resends = new CallResends(TimeSpan.FromSeconds(1), _time);
        resends.After(GrainErrors.Moved()).Should().NotBeNull();

        _time.Advance(TimeSpan.FromMilliseconds(980));

        resends.After(GrainErrors.Moved()).Should().BeNull("a 25 ms pause would end past the 1 s budget");
    }

    [Fact]
    public void GiveUp_AfterOnlyNothingDone_SaysNothingWasDone()
    {
        var resends = new CallResends(TimeSpan.FromSeconds(1), _time);
        var moved = GrainErrors.Moved();
        resends.After(moved);
        _time.Advance(TimeSpan.FromSeconds(2));

        var answer = resends.GiveUp(moved);

        answer.Should().BeOfType<AllocatorException>().Which.Should().Match<AllocatorException>(e => e.Kind == AllocatorErrorKind.Unavailable && !e.OutcomeUnknown);
        answer.Message.Should().Contain("nothing was done");
    }

    [Fact]
    public void GiveUp_OnceAnAttemptsOutcomeWasUnknown_IsOutcomeUnknown_WhateverCameLast()
    {
        var resends = new CallResends(TimeSpan.FromMinutes(1), _time);
        resends.After(new SiloUnavailableException());
        resends.After(GrainErrors.Moved());

        resends.GiveUp(GrainErrors.Moved()).Should().BeOfType<AllocatorException>().Which.OutcomeUnknown.Should().BeTrue();
        resends.GiveUp(new OperationCanceledException()).Should().BeOfType<AllocatorException>().Which.OutcomeUnknown.Should().BeTrue(
            "a later attempt canceled with nothing written does not undo what the earlier one may have committed");
    }

    [Fact]
    public void GiveUp_AFinalFailureWithNothingUnknown_IsTheFailureItself()
    {
        var resends = new CallResends(TimeSpan.FromMinutes(1), _time);
        var notFound = new AllocatorException(AllocatorErrorKind.NotFound, "no pool");

        resends.GiveUp(notFound).Should().BeSameAs(notFound);
    }

    [Fact]
    public void RemainingWait_ShrinksWithTimeSpentSinceTheFirstAttempt_NeverBelowZero()
    {
        var resends = new CallResends(TimeSpan.FromMinutes(1), _time);
        _time.Advance(TimeSpan.FromSeconds(3));

        resends.RemainingWait(TimeSpan.FromSeconds(10)).Should().Be(TimeSpan.FromSeconds(7));
        resends.RemainingWait(TimeSpan.FromSeconds(2)).Should().Be(TimeSpan.Zero);
    }
}

/// <summary>Where a stopping silo's pool grains move.</summary>
public sealed class LocalPoolGrainsTests
{
    private static readonly SiloAddress Self = Silo(11111);

    [Fact]
    public void Successors_AreTheOtherActiveSilos_InAFixedOrder()
    {
        var snapshot = Snapshot((Silo(11113), SiloStatus.Active), (Self, SiloStatus.Active), (Silo(11112), SiloStatus.Active),
            (Silo(11114), SiloStatus.ShuttingDown), (Silo(11115), SiloStatus.Dead), (Silo(11116), SiloStatus.Joining));

        LocalPoolGrains.Successors(snapshot, Self).Should().Equal(Silo(11112), Silo(11113));
    }

    [Fact]
    public void SuccessorFor_NoOtherSilo_IsNone()
    {
        LocalPoolGrains.SuccessorFor("pool", []).Should().BeNull();
    }

    [Fact]
    public void SuccessorFor_IsTheSameForAPool_AndSpreadsPoolsOverTheCandidates()
    {
        IReadOnlyList<SiloAddress> candidates = [Silo(11112), Silo(11113), Silo(11114)];
        var pools = Enumerable.Range(0, 300).Select(i => $"pool-{i}").ToList();

        var chosen = pools.Select(p => LocalPoolGrains.SuccessorFor(p, candidates)).ToList();

        pools.Select(p => LocalPoolGrains.SuccessorFor(p, candidates)).Should().Equal(chosen, "a pool moves to the same silo whoever asks");
        chosen.GroupBy(s => s).Should().HaveCount(3).And.OnlyContain(g => g.Count() > 50, "the pools of a stopping silo do not all land on one silo");
    }

    private static SiloAddress Silo(int port) => SiloAddress.New(IPAddress.Loopback, port, 1);

    private static ClusterMembershipSnapshot Snapshot(params (SiloAddress Silo, SiloStatus Status)[] members) =>
        new(members.ToImmutableDictionary(m => m.Silo, m => new ClusterMember(m.Silo, m.Status, $"silo-{m.Silo.Endpoint.Port}")), new MembershipVersion(1));
}
