using Microsoft.Extensions.Time.Testing;

namespace Allocator.Grains.Tests;

/// <summary>Each caller answered once, whoever tries: a batch, a cancellation, a stop.</summary>
public sealed class CallerRepliesTests
{
    private static readonly DateTimeOffset Start = new(2026, 1, 1, 0, 0, 0, TimeSpan.Zero);
    private readonly FakeTimeProvider _time = new(Start);

    [Fact]
    public async Task Answer_CompletesTheCaller_AndALaterFailureChangesNothing()
    {
        var replies = NewReplies();
        var pending = Pending();
        var outcome = new AllocationOutcome(AllocationStatus.NoCapacity, null, default);

        replies.Answer(pending, outcome, batchSize: 3);
        replies.Fail(pending, new InvalidOperationException("late"));

        (await pending.Completion.Task).Should().BeSameAs(outcome);
    }

    [Fact]
    public async Task GiveUp_WhileQueued_IsCanceled_NothingWasWritten()
    {
        var replies = NewReplies();
        var pending = Pending();
        using var cts = new CancellationTokenSource();
        await cts.CancelAsync();

        replies.GiveUp(pending, cts.Token).Should().BeTrue();
        replies.Answer(pending, AllocationOutcome.NoCapacity(), batchSize: 1);

        var wait = () => pending.Completion.Task;
        await wait.Should().ThrowAsync<OperationCanceledException>();
        pending.GaveUp.Should().BeTrue();
    }

    [Fact]
    public async Task GiveUp_WhileInTheStore_IsOutcomeUnknown()
    {
        var replies = NewReplies();
        var pending = Pending();
        pending.EnterStore();

        replies.GiveUp(pending, CancellationToken.None).Should().BeTrue();

        var wait = () => pending.Completion.Task;
        (await wait.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue("its batch may commit for it");
    }

    [Fact]
    public void GiveUp_AfterTheAnswer_ChangesNothing()
    {
        var replies = NewReplies();
        var pending = Pending();
        replies.Answer(pending, AllocationOutcome.NoCapacity(), batchSize: 1);

        replies.GiveUp(pending, CancellationToken.None).Should().BeFalse();

        pending.GaveUp.Should().BeFalse("it heard its outcome: it did not give up");
        pending.Completion.Task.IsCompletedSuccessfully.Should().BeTrue();
    }

    [Fact]
    public async Task Release_AnsweredOnce_ACanceledOneIsNotAnsweredAgain()
    {
        var replies = NewReplies();
        var canceled = new PendingRelease(new LeaseRelease(Guid.NewGuid(), 1), span: null);
        var answered = new PendingRelease(new LeaseRelease(Guid.NewGuid(), 1), span: null);
        var result = new LeaseResult(LeaseStatus.Ok, null);

        replies.GiveUp(canceled, CancellationToken.None);
        replies.Answer(canceled, result, batchSize: 2).Should().BeFalse();
        replies.Answer(answered, result, batchSize: 2).Should().BeTrue();
        replies.Fail(answered, new InvalidOperationException("late"));

        canceled.Completion.Task.IsCanceled.Should().BeTrue();
        (await answered.Completion.Task).Should().BeSameAs(result);
    }

    private CallerReplies NewReplies() => new("pool-1", _time, () => AllocationStrategy.SkipLocked);

    private PendingAllocation Pending() => new(new AllocationRequest("k"), TimeSpan.Zero, arrival: 0, Start, _time.GetTimestamp(), Start.AddSeconds(30));
}

/// <summary>The grain's view of its pool's settings: read once, read again on a change.</summary>
public sealed class KnownPoolSettingsTests
{
    [Fact]
    public async Task EnsureAsync_ReadsOnce_ThenAnswersFromWhatItRead()
    {
        var cache = new ScriptedCache();
        var known = new KnownPoolSettings("p", cache, _ => { }, CancellationToken.None);
        cache.Next(new PoolSettings { MaxWait = TimeSpan.FromSeconds(1) });

        (await known.EnsureAsync())!.MaxWait.Should().Be(TimeSpan.FromSeconds(1));
        (await known.EnsureAsync())!.MaxWait.Should().Be(TimeSpan.FromSeconds(1));

        cache.Reads.Should().Be(1);
    }

    [Fact]
    public async Task EnsureAsync_AFailedRead_IsReportedAndTriedAgainNextTime()
    {
        var cache = new ScriptedCache();
        var failures = new List<Exception>();
        var known = new KnownPoolSettings("p", cache, failures.Add, CancellationToken.None);
        cache.Fail(new InvalidOperationException("database down"));

        (await known.EnsureAsync()).Should().BeNull();
        cache.Next(PoolSettings.Default);
        (await known.EnsureAsync()).Should().Be(PoolSettings.Default);

        failures.Should().ContainSingle();
        cache.Reads.Should().Be(2);
    }

    [Fact]
    public async Task Changed_DropsTheCachesEntry_AndReadsAgain()
    {
        var cache = new ScriptedCache();
        var known = new KnownPoolSettings("p", cache, _ => { }, CancellationToken.None);
        cache.Next(new PoolSettings { MaxWait = TimeSpan.FromSeconds(1) });
        await known.EnsureAsync();
        cache.Next(new PoolSettings { MaxWait = TimeSpan.FromSeconds(2) });

        known.Changed();

        cache.Invalidated.Should().Equal("p");
        (await known.EnsureAsync())!.MaxWait.Should().Be(TimeSpan.FromSeconds(2));
    }

    [Fact]
    public async Task Changed_WhileTheReadRuns_TheSettingsLastReadStayInForce()
    {
        var cache = new ScriptedCache();
        var known = new KnownPoolSettings("p", cache, _ => { }, CancellationToken.None);
        cache.Next(new PoolSettings { MaxWait = TimeSpan.FromSeconds(1) });
        await known.EnsureAsync();
        var reread = new TaskCompletionSource<PoolSettings?>();
        cache.NextAsync(reread.Task);

        known.Changed();

        known.Current!.MaxWait.Should().Be(TimeSpan.FromSeconds(1), "issue 20, #2: never 'unknown' while a change is being read");
        (await known.EnsureAsync())!.MaxWait.Should().Be(TimeSpan.FromSeconds(1));
        reread.SetResult(new PoolSettings { MaxWait = TimeSpan.FromSeconds(2) });
        known.Current!.MaxWait.Should().Be(TimeSpan.FromSeconds(2));
        cache.Reads.Should().Be(2, "one read for the change, not one per caller meanwhile");
    }

    [Fact]
    public async Task Changed_AndTheReadFails_KeepsTheLastSettings_AndReadsAgainAtTheNextNeed()
    {
        var cache = new ScriptedCache();
        var failures = new List<Exception>();
        var known = new KnownPoolSettings("p", cache, failures.Add, CancellationToken.None);
        cache.Next(new PoolSettings { MaxWait = TimeSpan.FromSeconds(1) });
        await known.EnsureAsync();
        cache.Fail(new InvalidOperationException("database down"));

        known.Changed();

        failures.Should().ContainSingle();
        known.Current!.MaxWait.Should().Be(TimeSpan.FromSeconds(1));
        cache.Next(new PoolSettings { MaxWait = TimeSpan.FromSeconds(2) });
        (await known.EnsureAsync())!.MaxWait.Should().Be(TimeSpan.FromSeconds(1), "answered at once from what is known");
        known.Current!.MaxWait.Should().Be(TimeSpan.FromSeconds(2), "the read it started in the background has returned");
    }

    /// <summary>A settings cache whose answers the test sets, one read at a time.</summary>
    private sealed class ScriptedCache : IPoolSettingsCache
    {
        private Func<PoolSettings?> _next = () => throw new InvalidOperationException("no answer scripted");
        private Task<PoolSettings?>? _nextAsync;

        public int Reads { get; private set; }

        public List<string> Invalidated { get; } = [];

        public void Next(PoolSettings settings) => _next = () => settings;

        public void Fail(Exception exception) => _next = () => throw exception;

        public void NextAsync(Task<PoolSettings?> answer) => _nextAsync = answer;

        public ValueTask<PoolSettings?> GetAsync(string poolId, CancellationToken cancellationToken = default)
        {
            Reads++;
            if (_nextAsync is { } pending)
            {
                _nextAsync = null;
                return new ValueTask<PoolSettings?>(pending);
            }

            return ValueTask.FromResult(_next());
        }

        public void Invalidate(string poolId) => Invalidated.Add(poolId);
    }
}

/// <summary>Items from any thread reach the grain's turns in order, one drain turn per burst.</summary>
public sealed class TurnInboxTests
{
    [Fact]
    public void ItemsAddedBeforeTheDrainRuns_RideAlongWithIt()
    {
        var turns = new Queue<Action>();
        var handled = new List<int>();
        var inbox = new TurnInbox<int>(turns.Enqueue, handled.Add);

        inbox.Add(1);
        inbox.Add(2);
        turns.Should().ContainSingle("one drain turn for a burst");
        turns.Dequeue()();

        inbox.Add(3);
        turns.Should().ContainSingle("a drain ran: the next item posts its own");
        turns.Dequeue()();

        handled.Should().Equal(1, 2, 3);
    }

    [Fact]
    public async Task ItemsFromManyThreads_AreEachHandledOnce()
    {
        var turns = new System.Collections.Concurrent.ConcurrentQueue<Action>();
        var handled = new List<int>();
        var inbox = new TurnInbox<int>(turns.Enqueue, handled.Add);

        await Task.WhenAll(Enumerable.Range(0, 4).Select(t => Task.Run(() =>
        {
            for (var i = 0; i < 1000; i++)
            {
                inbox.Add((t * 1000) + i);
            }
        })));
        while (turns.TryDequeue(out var turn))
        {
            turn();
        }

        handled.Should().HaveCount(4000).And.OnlyHaveUniqueItems();
    }
}

/// <summary>What a caller that gave up in the store leaves behind, and who claims it.</summary>
public sealed class AbandonedKeysTests
{
    [Fact]
    public void GoneCallerNobodyCameBackFor_WhatItAllocatedIsReleased_ThenTheKeyIsForgotten()
    {
        var keys = new AbandonedKeys();
        keys.EnteredStore("k");

        keys.Settled("k", callerGone: true, Allocated()).Should().NotBeNull("nobody came back for it");
        keys.Count.Should().Be(1, "its release is outstanding");
        keys.Released("k");

        keys.Count.Should().Be(0);
    }

    [Fact]
    public void CallerLeftAfterItsAnswer_NothingElseForTheKey_IsReleased_AndARequestMeanwhileWaitsForTheRelease()
    {
        var keys = new AbandonedKeys();
        var now = DateTimeOffset.UnixEpoch;
        var resumed = 0;

        keys.AbandonedAfterAnswer("k", now).Should().BeTrue();
        keys.Claim("k", () => resumed++).Should().BeTrue("the release is in the store: the retry hears the ended allocation after it");
        keys.Released("k");

        resumed.Should().Be(1);
        keys.Count.Should().Be(0);
    }

    [Fact]
    public void CallerLeftAfterItsAnswer_ButARetryWasAnsweredTheAllocation_IsKept_UntilThatAnswerIsLongPast()
    {
        var keys = new AbandonedKeys();
        var now = DateTimeOffset.UnixEpoch + TimeSpan.FromDays(1);
        keys.AnsweredExisting("k", Made(now - TimeSpan.FromSeconds(1)), now);

        keys.AbandonedAfterAnswer("k", now + TimeSpan.FromSeconds(1)).Should().BeFalse("the retry's caller holds it");
        keys.AbandonedAfterAnswer("other", now + TimeSpan.FromSeconds(1)).Should().BeTrue("another key is another allocation");
        keys.Released("other");
        keys.AbandonedAfterAnswer("k", now + AbandonedKeys.ReplayMemory + TimeSpan.FromSeconds(1)).Should().BeTrue("the answer is forgotten after its memory");
    }

    [Fact]
    public void AnswersOfEndedOrLongMadeAllocations_AreNotRemembered()
    {
        // No endpoint can still hand those back: remembering them would only cost memory under replay storms.
        var keys = new AbandonedKeys();
        var now = DateTimeOffset.UnixEpoch + TimeSpan.FromDays(1);
        keys.AnsweredExisting("ended", Made(now) with { EndedAt = now }, now);
        keys.AnsweredExisting("old", Made(now - AbandonedKeys.RecentlyMade - TimeSpan.FromSeconds(1)), now);

        keys.AbandonedAfterAnswer("ended", now).Should().BeTrue();
        keys.AbandonedAfterAnswer("old", now).Should().BeTrue();
    }

    private static Allocation Made(DateTimeOffset createdAt) => new()
    {
        AllocationId = Guid.NewGuid(),
        PoolId = "p",
        WorkerId = "w",
        Address = "a:1",
        SessionKey = "k",
        Units = 1,
        Epoch = 1,
        CreatedAt = createdAt,
    };

    [Fact]
    public void CallerLeftAfterItsAnswer_WhileARequestForTheKeyIsInTheStore_IsKept()
    {
        var keys = new AbandonedKeys();
        keys.EnteredStore("k");

        keys.AbandonedAfterAnswer("k", DateTimeOffset.UnixEpoch).Should().BeFalse("that request will be answered the allocation");
        keys.Settled("k", callerGone: false, Existing(Made(DateTimeOffset.UnixEpoch))).Should().BeNull();
        keys.Count.Should().Be(0);
    }

    [Fact]
    public void RequestForTheKeyWhileOneIsInTheStore_ClaimsIt_EvenBeforeThatCallerGivesUp()
    {
        // A retry can reach the grain before the news of its own caller's abort does.
        var keys = new AbandonedKeys();
        keys.EnteredStore("k");

        keys.Claim("k", () => throw new InvalidOperationException("must not wait")).Should().BeFalse("no release is in the store: it goes on now");
        var made = Allocated();
        keys.Settled("k", callerGone: true, made).Should().BeNull("the later request holds it now");
        keys.HasUnheard("k").Should().BeTrue("until the later request's caller hears of it");

        keys.EnteredStore("k");
        keys.Settled("k", callerGone: false, Existing(made.Allocation!)).Should().BeNull();
        keys.HasUnheard("k").Should().BeFalse("the later request's caller was answered it");
        keys.Unclaimed("k").Should().BeNull();
        keys.Count.Should().Be(0);
    }

    [Fact]
    public void TwoRequestsForTheKeyInTheStore_ClaimEachOther_WhicheverArrivedFirst()
    {
        // The retry can even reach the store first: the first request was still queued when it
        // arrived, so nothing was there to claim at its arrival.
        var keys = new AbandonedKeys();
        keys.Claim("k", () => { }).Should().BeFalse();
        keys.EnteredStore("k"); // the first request, admitted after the retry arrived
        keys.EnteredStore("k"); // the retry

        var made = Allocated();
        keys.Settled("k", callerGone: true, made).Should().BeNull("the retry is answered with whatever the first allocated");
        keys.Settled("k", callerGone: false, Existing(made.Allocation!)).Should().BeNull();
        keys.Count.Should().Be(0);
    }

    [Fact]
    public void RequestWhileTheReleaseIsInTheStore_WaitsForIt()
    {
        var keys = new AbandonedKeys();
        var resumed = 0;
        keys.EnteredStore("k");
        keys.Settled("k", callerGone: true, Allocated()).Should().NotBeNull();

        keys.Claim("k", () => resumed++).Should().BeTrue();
        keys.HeldBack.Should().Be(1);
        resumed.Should().Be(0);
        keys.Released("k");

        resumed.Should().Be(1);
        keys.HeldBack.Should().Be(0);
        keys.Count.Should().Be(0);
    }

    [Fact]
    public void CallersThatStayedOrAllocatedNothing_LeaveNothing()
    {
        var keys = new AbandonedKeys();
        keys.EnteredStore("a");
        keys.EnteredStore("b");

        keys.Settled("a", callerGone: false, Allocated()).Should().BeNull("its caller hears the answer");
        keys.Settled("b", callerGone: true, AllocationOutcome.NoCapacity()).Should().BeNull("nothing to release");

        keys.Count.Should().Be(0);
        keys.Claim("a", () => { }).Should().BeFalse("a key with nothing in the store is never held back");
    }

    [Fact]
    public void KeysAreKeptApart()
    {
        var keys = new AbandonedKeys();
        keys.EnteredStore("a");
        keys.EnteredStore("b");
        keys.Claim("a", () => { });

        keys.Settled("a", callerGone: true, Allocated()).Should().BeNull("a was claimed");
        keys.Settled("b", callerGone: true, Allocated()).Should().NotBeNull("b was not");
    }

    [Fact]
    public void ClaimsWhoseCallersGaveUpToo_PassItOn_ItIsUnclaimedOnceNoneIsInTheStore()
    {
        // latency-jitter, 2026-12-02: 94 retries of one key, each abandoned in the store.
        var keys = new AbandonedKeys();
        keys.EnteredStore("k");
        keys.Claim("k", () => { }).Should().BeFalse();
        keys.EnteredStore("k"); // the retry

        var made = Allocated();
        keys.Settled("k", callerGone: true, made).Should().BeNull("the retry claimed it");
        keys.Unclaimed("k").Should().BeNull("the retry is still in the store");
        keys.Settled("k", callerGone: true, Existing(made.Allocation!)).Should().BeNull("its caller left too");

        keys.Unclaimed("k").Should().Be(made.Allocation, "every caller that asked for the key left before hearing of it");
        keys.Unclaimed("k").Should().BeNull("it is released once");
        keys.Count.Should().Be(1, "its release is outstanding");
        keys.Released("k");
        keys.Count.Should().Be(0);
    }

    [Fact]
    public void ClaimComesBackFirst_AnsweredTheAllocationTheGoneCallersBatchMade_ItIsHeld()
    {
        // gone-callers: the retry's batch read the allocation as existing and returned before the
        // batch that made it did.
        var keys = new AbandonedKeys();
        keys.EnteredStore("k");
        keys.EnteredStore("k");
        var made = Allocated();
        keys.Settled("k", callerGone: false, Existing(made.Allocation!)).Should().BeNull();
        keys.Settled("k", callerGone: true, made).Should().BeNull("the retry holds it");

        keys.HasUnheard("k").Should().BeFalse();
        keys.Unclaimed("k").Should().BeNull();
        keys.Count.Should().Be(0);
    }

    [Fact]
    public void BatchFailedForTheClaim_TheAllocationStaysUnheard()
    {
        // A retry whose batch failed heard nothing; the allocation is still nobody's.
        var keys = new AbandonedKeys();
        keys.EnteredStore("k");
        keys.EnteredStore("k");
        var made = Allocated();
        keys.Settled("k", callerGone: true, made).Should().BeNull();
        keys.Settled("k", callerGone: false, outcome: null).Should().BeNull();

        keys.Unclaimed("k").Should().Be(made.Allocation);
    }

    private static AllocationOutcome Allocated() => new(AllocationStatus.Allocated, Made(DateTimeOffset.UnixEpoch), default);

    private static AllocationOutcome Existing(Allocation allocation) => new(AllocationStatus.Existing, allocation, default);
}
