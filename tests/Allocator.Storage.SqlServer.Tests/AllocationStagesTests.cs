using System.Collections.Concurrent;
using Allocator.Storage.SqlServer.Internal;
using Microsoft.Extensions.Time.Testing;

namespace Allocator.Storage.SqlServer.Tests;

/// <summary>
/// The bookkeeping of one allocation call on SQL Server (issue 12: #1, #6, deadlines, ADR 0007),
/// without a server: <see cref="AllocationStages"/> drives scripted statements that answer rows
/// or fail with the exceptions <see cref="SqlServerRetryPolicy"/> turns SQL Server's errors into.
/// What these cannot show (that the scripts commit, lock and time out as assumed) needs a live
/// server: see docs/sqlserver.md.
/// </summary>
public sealed class AllocationStagesTests
{
    private static readonly SqlServerWorkerStoreOptions Options = new() { ConnectionString = "Server=x", SkipRetries = 1, RetryJitter = TimeSpan.Zero };

    private readonly FakeTimeProvider _time = new(new DateTimeOffset(2026, 11, 23, 12, 0, 0, TimeSpan.Zero));
    private readonly ScriptedStatements _statements = new();
    private readonly ConcurrentDictionary<int, AllocationOutcome> _reported = new();
    private int _reports;
    private int _strategyChanges;

    [Fact]
    public async Task FallbackConnectionLost_AfterTheFirstStatementCommitted_ReportsTheCommittedWork_TheRestOutcomeUnknown()
    {
        // #1: "a" commits in the skip-locked statement; "b" found only locked rows, retried, then
        // its blocking statement's connection broke.
        _statements.SkipLocked.Enqueue(i => [Allocated(0), OnlyLocked(1)]);
        _statements.SkipLocked.Enqueue(i => [OnlyLocked(1)]);
        _statements.Blocking.Enqueue((key, fallback) =>
        {
            _reported.Should().ContainKey(0, "a is reported as soon as its statement committed, before b's fallback ends");
            throw Error(SqlServerErrorKind.ConnectionLost);
        });

        var outcomes = await RunAsync(strict: false, Request("a"), Request("b"));

        outcomes[0].Status.Should().Be(AllocationStatus.Allocated, "committed work is reported, never thrown away");
        outcomes[1].Status.Should().Be(AllocationStatus.Unavailable);
        outcomes[1].OutcomeUnknown.Should().BeTrue("the statement's connection broke: it may have committed");
        AssertReportedOnce(outcomes);
        _statements.Calls.Should().Equal("skip a,b", "skip b", "block b fallback");
    }

    [Fact]
    public async Task RetryRolledBack_AfterTheFirstStatementCommitted_TheRestAreUnavailable_NothingWritten()
    {
        _statements.SkipLocked.Enqueue(i => [Allocated(0), OnlyLocked(1)]);
        _statements.SkipLocked.Enqueue(i => throw Error(SqlServerErrorKind.StatementTimeout));

        var outcomes = await RunAsync(strict: false, Request("a"), Request("b"));

        outcomes[0].Status.Should().Be(AllocationStatus.Allocated);
        outcomes[1].Status.Should().Be(AllocationStatus.Unavailable);
        outcomes[1].OutcomeUnknown.Should().BeFalse("the script rolled back at its budget: nothing was written");
        AssertReportedOnce(outcomes);
    }

    [Fact]
    public async Task FailureBeforeAnythingCommitted_Throws_AndReportsNothing()
    {
        _statements.SkipLocked.Enqueue(i => throw Error(SqlServerErrorKind.ClientTimeout));

        var error = (await FluentActions.Awaiting(() => RunAsync(strict: false, Request("a"), Request("b"))).Should().ThrowAsync<AllocatorException>()).Which;

        error.OutcomeUnknown.Should().BeTrue();
        _reports.Should().Be(0);
    }

    [Fact]
    public async Task BlockingFallbackLockTimeout_AnswersOnlyThatRequestUnavailable_TheOthersKeepTheirs()
    {
        // ADR 0007: b's rows stayed locked past the lock timeout (1222); c's blocking statement,
        // its own, still runs and allocates.
        _statements.SkipLocked.Enqueue(i => [Allocated(0), OnlyLocked(1), OnlyLocked(2)]);
        _statements.SkipLocked.Enqueue(i => [OnlyLocked(1), OnlyLocked(2)]);
        _statements.Blocking.Enqueue((key, fallback) => throw Error(SqlServerErrorKind.LockTimeout));
        _statements.Blocking.Enqueue((key, fallback) => Allocated(0, key));

        var outcomes = await RunAsync(strict: false, Request("a"), Request("b"), Request("c"));

        outcomes.Select(o => o.Status).Should().Equal(AllocationStatus.Allocated, AllocationStatus.Unavailable, AllocationStatus.Allocated);
        outcomes[1].OutcomeUnknown.Should().BeFalse("a lock timeout rolled back: nothing was written");
        outcomes[1].Decision.BlockingFallback.Should().BeTrue();
        outcomes[2].Allocation!.SessionKey.Should().Be("c");
        AssertReportedOnce(outcomes);
        _statements.Calls.Should().Equal("skip a,b,c", "skip b,c", "block b fallback", "block c fallback");
    }

    [Fact]
    public async Task Strict_RunsOneRequestPerStatement_InRequestOrder()
    {
        // #6: a blocking statement never holds one worker row while it waits for another.
        for (var i = 0; i < 3; i++)
        {
            _statements.Blocking.Enqueue((key, fallback) => Allocated(0, key));
        }

        var outcomes = await RunAsync(strict: true, Request("a"), Request("b", units: 3), Request("c", units: 2));

        outcomes.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated && o.Decision.BlockingFallback);
        outcomes.Select(o => o.Allocation!.SessionKey).Should().Equal("a", "b", "c");
        _statements.Calls.Should().Equal("block a strict", "block b strict", "block c strict");
        AssertReportedOnce(outcomes);
    }

    [Fact]
    public async Task RequestPastItsDeadline_GetsNoRetryAndNoFallback_AndIsAnsweredNothingWritten()
    {
        var past = _time.GetUtcNow() - TimeSpan.FromSeconds(1);
        _statements.SkipLocked.Enqueue(i => [OnlyLocked(0), OnlyLocked(1)]);
        _statements.SkipLocked.Enqueue(i => [OnlyLocked(1)]);
        _statements.Blocking.Enqueue((key, fallback) => Allocated(0, key));

        var outcomes = await RunAsync(strict: false, Request("a", deadline: past), Request("b"));

        outcomes[0].Status.Should().Be(AllocationStatus.Unavailable);
        outcomes[0].OutcomeUnknown.Should().BeFalse("nothing was written for it");
        outcomes[1].Status.Should().Be(AllocationStatus.Allocated);
        _statements.Calls.Should().Equal("skip a,b", "skip b", "block b fallback");
    }

    [Fact]
    public async Task Strict_RequestPastItsDeadline_GetsNoStatement()
    {
        _statements.Blocking.Enqueue((key, fallback) => Allocated(0, key));

        var outcomes = await RunAsync(strict: true, Request("a", deadline: _time.GetUtcNow()), Request("b"));

        outcomes.Select(o => o.Status).Should().Equal(AllocationStatus.Unavailable, AllocationStatus.Allocated);
        _statements.Calls.Should().Equal("block b strict");
    }

    [Fact]
    public async Task DeadlinePassingWhileTheFallbackWaits_StopsTheNextBlockingStatement()
    {
        var deadline = _time.GetUtcNow() + TimeSpan.FromSeconds(2);
        _statements.SkipLocked.Enqueue(i => [OnlyLocked(0), OnlyLocked(1)]);
        _statements.SkipLocked.Enqueue(i => [OnlyLocked(0), OnlyLocked(1)]);
        _statements.Blocking.Enqueue((key, fallback) =>
        {
            _time.Advance(TimeSpan.FromSeconds(5)); // a's fallback waited for its lock
            return Allocated(0, key);
        });

        var outcomes = await RunAsync(strict: false, Request("a", deadline: deadline), Request("b", deadline: deadline));

        outcomes.Select(o => o.Status).Should().Equal(AllocationStatus.Allocated, AllocationStatus.Unavailable);
        outcomes[1].OutcomeUnknown.Should().BeFalse();
        _statements.Calls.Should().Equal("skip a,b", "skip a,b", "block a fallback");
    }

    [Fact]
    public async Task StrategyChangedMidBatch_TheRestRunTheOtherWay_KeepingWhatCommitted()
    {
        _statements.Blocking.Enqueue((key, fallback) => Allocated(0, key));
        _statements.Blocking.Enqueue((key, fallback) => throw new StrategyChangedException(new InvalidOperationException("50412")));
        _statements.SkipLocked.Enqueue(i => [Allocated(1), Allocated(2)]);

        var outcomes = await RunAsync(strict: true, Request("a"), Request("b"), Request("c"));

        outcomes.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
        _strategyChanges.Should().Be(1, "the cached settings are dropped");
        _statements.Calls.Should().Equal("block a strict", "block b strict", "skip b,c");
        AssertReportedOnce(outcomes);
    }

    [Fact]
    public async Task StrategyKeepsChanging_AfterSomethingCommitted_TheRestAreUnavailable_NothingWritten()
    {
        _statements.SkipLocked.Enqueue(i => [Allocated(0), OnlyLocked(1)]);
        for (var i = 0; i <= AllocationStages.MaxStrategySwitches; i++)
        {
            _statements.SkipLocked.Enqueue(i => throw new StrategyChangedException(new InvalidOperationException("50412")));
            _statements.Blocking.Enqueue((key, fallback) => throw new StrategyChangedException(new InvalidOperationException("50412")));
        }

        var outcomes = await RunAsync(strict: false, Request("a"), Request("b"));

        outcomes[0].Status.Should().Be(AllocationStatus.Allocated);
        outcomes[1].Status.Should().Be(AllocationStatus.Unavailable);
        outcomes[1].OutcomeUnknown.Should().BeFalse("a script that finds the other strategy writes nothing");
        _strategyChanges.Should().Be(AllocationStages.MaxStrategySwitches + 1);
    }

    [Fact]
    public async Task NoCapacity_ReapsThePool_AndTriesThoseRequestsOnceMore_ExceptOnesPastTheirDeadline()
    {
        // #5: an expired lease holds no capacity whether or not the reaper ran.
        _statements.SkipLocked.Enqueue(i => [Allocated(0), NoCapacity(1), NoCapacity(2)]);
        _statements.Reaped = 1;
        _statements.SkipLocked.Enqueue(i => [Allocated(1)]);

        var outcomes = await RunAsync(strict: false, Request("a"), Request("b"), Request("c", deadline: _time.GetUtcNow()));

        outcomes.Select(o => o.Status).Should().Equal(AllocationStatus.Allocated, AllocationStatus.Allocated, AllocationStatus.NoCapacity);
        _statements.Calls.Should().Equal("skip a,b,c", "reap", "skip b");
        AssertReportedOnce(outcomes);
    }

    [Fact]
    public async Task NoCapacity_NothingToReap_RunsNothingMore()
    {
        _statements.SkipLocked.Enqueue(i => [NoCapacity(0)]);

        var outcomes = await RunAsync(strict: false, Request("a"));

        outcomes[0].Status.Should().Be(AllocationStatus.NoCapacity);
        _statements.Calls.Should().Equal("skip a", "reap");
    }

    [Fact]
    public async Task CallerCancelsDuringTheFallback_AfterSomethingCommitted_ReportsIt_TheRestUnknown()
    {
        using var cancel = new CancellationTokenSource();
        _statements.SkipLocked.Enqueue(i => [Allocated(0), OnlyLocked(1)]);
        _statements.SkipLocked.Enqueue(i => [OnlyLocked(1)]);
        _statements.Blocking.Enqueue((key, fallback) =>
        {
            cancel.Cancel();
            throw new OperationCanceledException(cancel.Token);
        });

        var outcomes = await RunAsync(strict: false, cancel.Token, Request("a"), Request("b"));

        outcomes[0].Status.Should().Be(AllocationStatus.Allocated);
        outcomes[1].Status.Should().Be(AllocationStatus.Unavailable);
        outcomes[1].OutcomeUnknown.Should().BeTrue("the cancelled statement may have committed");
    }

    [Fact]
    public async Task FenceStale_AtTheFirstStatement_AnswersNothing_AndReportsNothing()
    {
        // Issue 47, #2: a later activation claimed the pool; the script answered no row.
        _statements.SkipLocked.Enqueue(i => []);

        var outcomes = await RunFencedAsync(strict: false, Request("a"), Request("b"));

        outcomes.Should().BeNull("nothing was allocated: the caller hears \"superseded\"");
        _reports.Should().Be(0);
        _statements.Fences.Should().Equal(7L);
    }

    [Fact]
    public async Task FenceStale_AtTheFallback_AfterTheFirstStatementCommitted_ReportsTheCommittedWork_TheRestUnavailable_NothingWritten()
    {
        _statements.SkipLocked.Enqueue(i => [Allocated(0), OnlyLocked(1)]);
        _statements.SkipLocked.Enqueue(i => [OnlyLocked(1)]);
        _statements.Blocking.Enqueue((key, fallback) => null);

        var outcomes = await RunFencedAsync(strict: false, Request("a"), Request("b"));

        outcomes![0].Status.Should().Be(AllocationStatus.Allocated, "committed work is reported, never thrown away");
        outcomes[1].Status.Should().Be(AllocationStatus.Unavailable);
        outcomes[1].OutcomeUnknown.Should().BeFalse("a statement that found the fence stale wrote nothing");
        AssertReportedOnce(outcomes);
        _statements.Fences.Should().Equal(7L, 7L, 7L);
    }

    private Task<IReadOnlyList<AllocationOutcome>> RunAsync(bool strict, params AllocationRequest[] requests) =>
        RunAsync(strict, CancellationToken.None, requests);

    private async Task<IReadOnlyList<AllocationOutcome>> RunAsync(bool strict, CancellationToken cancellationToken, params AllocationRequest[] requests) =>
        (await RunAsync(strict, fence: null, cancellationToken, requests))!;

    private Task<IReadOnlyList<AllocationOutcome>?> RunFencedAsync(bool strict, params AllocationRequest[] requests) =>
        RunAsync(strict, fence: 7, CancellationToken.None, requests);

    private Task<IReadOnlyList<AllocationOutcome>?> RunAsync(bool strict, long? fence, CancellationToken cancellationToken, params AllocationRequest[] requests)
    {
        _statements.Requests = requests;
        var stages = new AllocationStages(_statements, Options, _time, () => TimeSpan.Zero);
        return stages.RunAsync("p", strict, requests, fence, (i, o) =>
        {
            Interlocked.Increment(ref _reports);
            _reported.TryAdd(i, o).Should().BeTrue($"request {i} is reported once");
        }, () => _strategyChanges++, cancellationToken);
    }

    private void AssertReportedOnce(IReadOnlyList<AllocationOutcome> outcomes)
    {
        _reports.Should().Be(outcomes.Count, "every request is reported exactly once");
        for (var i = 0; i < outcomes.Count; i++)
        {
            _reported[i].Should().BeSameAs(outcomes[i], "the reported outcome is the returned one");
        }
    }

    private static AllocationRequest Request(string key, int units = 1, DateTimeOffset? deadline = null) => new(key, units, Deadline: deadline);

    private static Exception Error(SqlServerErrorKind kind) =>
        SqlServerRetryPolicy.Translate(kind, new InvalidOperationException(kind.ToString()), "p", Options);

    private AllocationRow Allocated(int index, string? key = null) => new(index, AllocationRow.Allocated, 0, 0, new Allocation
    {
        AllocationId = Guid.NewGuid(),
        PoolId = "p",
        WorkerId = "w",
        Address = "w:1",
        SessionKey = key ?? _statements.Requests[index].SessionKey,
        Units = 1,
        Epoch = 1,
        CreatedAt = _time.GetUtcNow(),
    });

    private static AllocationRow NoCapacity(int index) => new(index, AllocationRow.NoCapacity, 0, 0, null);

    private static AllocationRow OnlyLocked(int index) => new(index, AllocationRow.OnlyLocked, 0, 0, null);

    /// <summary>Answers each statement with the next scripted handler and records the calls.</summary>
    private sealed class ScriptedStatements : IAllocationStatements
    {
        public IReadOnlyList<AllocationRequest> Requests { get; set; } = [];

        public Queue<Func<IReadOnlyList<int>, IReadOnlyList<AllocationRow>>> SkipLocked { get; } = new();

        public Queue<Func<string, bool, AllocationRow?>> Blocking { get; } = new();

        /// <summary>The fence each statement carried.</summary>
        public List<long?> Fences { get; } = [];

        public int Reaped { get; set; }

        public List<string> Calls { get; } = [];

        public Task<IReadOnlyList<AllocationRow>> SkipLockedAsync(string poolId, IReadOnlyList<AllocationRequest> requests, IReadOnlyList<int> indexes, long? fence, CancellationToken cancellationToken)
        {
            Fences.Add(fence);
            Calls.Add("skip " + string.Join(",", indexes.Select(i => requests[i].SessionKey)));
            SkipLocked.Should().NotBeEmpty("no further skip-locked statement was expected ({0})", Calls[^1]);
            return Task.FromResult(SkipLocked.Dequeue()(indexes));
        }

        public Task<AllocationRow?> BlockingAsync(string poolId, AllocationRequest request, bool fallback, long? fence, CancellationToken cancellationToken)
        {
            Fences.Add(fence);
            Calls.Add($"block {request.SessionKey} {(fallback ? "fallback" : "strict")}");
            Blocking.Should().NotBeEmpty("no further blocking statement was expected ({0})", Calls[^1]);
            return Task.FromResult(Blocking.Dequeue()(request.SessionKey, fallback));
        }

        public Task<int> ReapPoolAsync(string poolId, CancellationToken cancellationToken)
        {
            Calls.Add("reap");
            return Task.FromResult(Reaped);
        }
    }
}
