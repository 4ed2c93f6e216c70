using System.Diagnostics;
using Allocator.Testing;

namespace Allocator.Storage.PostgreSql.Tests;

public sealed class ConcurrencyTests : PostgresStoreTestBase
{
    [Fact]
    public async Task SkipLocked_LeastLoadedRowLocked_ReturnsNextWithoutWaiting()
    {
        // A fresh pool each attempt: one whose run the machine kept too far behind is not judged (ADR 0030).
        await SchedulingDelay.JudgeAsync(async attempt =>
        {
            var pool = $"p{attempt}";
            await CreatePoolAsync(pool, workers: 3, capacity: 5);
            await using var held = await PostgresTestDatabase.HoldRowLockAsync(Schema, pool, "w000");
            using var lateness = SchedulingDelay.Start();
            var watch = Stopwatch.StartNew();
            var outcome = (await Store.AllocateAsync(pool, [new AllocationRequest("s")]).WaitAsync(TimeSpan.FromSeconds(30)))[0];
            var took = watch.Elapsed;

            // The promise: one statement, no lock wait. Half a second for it, plus what the machine
            // kept this process waiting; waiting for the locked row would take its 2 s lock timeout.
            took.Should().BeLessThan(
                lateness.Bound(promise: TimeSpan.Zero, allowance: TimeSpan.FromSeconds(0.5), defect: new PostgresWorkerStoreOptions().LockTimeout),
                "a locked row is skipped, not waited for ({0})", lateness);
            outcome.Allocation!.WorkerId.Should().Be("w001");
            outcome.Decision.RowsSkipped.Should().Be(1);
            outcome.Decision.BlockingFallback.Should().BeFalse();
        });
    }

    [Fact]
    public async Task AllRowsLocked_FallsBackToBlocking_AndSucceedsWhenALockIsReleased()
    {
        await CreatePoolAsync("p", workers: 2, capacity: 5);
        var first = await PostgresTestDatabase.HoldRowLockAsync(Schema, "p", "w000");
        await using var second = await PostgresTestDatabase.HoldRowLockAsync(Schema, "p", "w001");
        var allocation = Store.AllocateAsync("p", [new AllocationRequest("s")]);
        await WaitUntilBlockedOnRowLockAsync(allocation);
        allocation.IsCompleted.Should().BeFalse("every eligible row is locked, so the blocking fallback waits");
        await first.DisposeAsync();
        var outcome = (await allocation.WaitAsync(TimeSpan.FromSeconds(5)))[0];
        outcome.Status.Should().Be(AllocationStatus.Allocated);
        outcome.Allocation!.WorkerId.Should().Be("w000");
        outcome.Decision.BlockingFallback.Should().BeTrue();
        outcome.Decision.Retries.Should().Be(2);
    }

    [Theory]
    [InlineData(2, 100)]
    [InlineData(20, 10)]
    public async Task ParallelAllocators_RequestsEqualCapacity_FillEverySlotExactly(int workers, int capacity)
    {
        await CreatePoolAsync("p", workers, capacity);
        var total = workers * capacity;
        var next = -1;
        var results = new System.Collections.Concurrent.ConcurrentBag<AllocationOutcome>();
        var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var callers = Enumerable.Range(0, 64).Select(_ => Task.Run(async () =>
        {
            await start.Task;
            int i;
            while ((i = Interlocked.Increment(ref next)) < total)
            {
                results.Add((await Store.AllocateAsync("p", [new AllocationRequest($"s{i}")]))[0]);
            }
        })).ToList();
        start.SetResult();
        await Task.WhenAll(callers).WaitAsync(TimeSpan.FromSeconds(60));

        results.Should().HaveCount(total);
        results.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated, "no false 'no capacity' while slots are free");
        var stats = await Store.GetPoolStatisticsAsync("p");
        stats.Load.Should().Be(total);
        stats.FreeSlots.Should().Be(0);
        await AssertLoadMatchesAllocationsAsync("p");
        (await Store.AllocateAsync("p", [new AllocationRequest("one-more")]))[0].Status.Should().Be(AllocationStatus.NoCapacity);
    }

    [Fact]
    public async Task FiftyConcurrentRequests_OneSessionKey_GiveOneAllocation()
    {
        await CreatePoolAsync("p", workers: 4, capacity: 100);
        var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var calls = Enumerable.Range(0, 50).Select(_ => Task.Run(async () =>
        {
            await start.Task;
            return (await Store.AllocateAsync("p", [new AllocationRequest("same")]))[0];
        })).ToList();
        start.SetResult();
        var outcomes = await Task.WhenAll(calls).WaitAsync(TimeSpan.FromSeconds(30));
        outcomes.Select(o => o.Allocation!.AllocationId).Distinct().Should().ContainSingle();
        outcomes.Count(o => o.Status == AllocationStatus.Allocated).Should().Be(1);
        (await Store.GetPoolStatisticsAsync("p")).Load.Should().Be(1);
        await AssertLoadMatchesAllocationsAsync("p");
    }

    [Fact]
    public async Task TwoConcurrentReapers_FreeEachExpiredAllocationOnce()
    {
        await CreatePoolAsync("p", workers: 10, capacity: 30, new PoolSettings { DefaultLease = TimeSpan.FromMinutes(1) });
        await Store.AllocateAsync("p", [.. Enumerable.Range(0, 300).Select(i => new AllocationRequest($"s{i}"))]);
        await PostgresTestDatabase.ExecuteAsync($"UPDATE \"{Schema}\".allocations SET expires_at = now() - interval '1 second'");

        var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var reapers = Enumerable.Range(0, 2).Select(_ => Task.Run(async () =>
        {
            await start.Task;
            var mine = new List<Allocation>();
            IReadOnlyList<Allocation> batch;
            while ((batch = await Store.ReapExpiredAsync(25)).Count > 0)
            {
                mine.AddRange(batch);
            }

            return mine;
        })).ToList();
        start.SetResult();
        var reaped = await Task.WhenAll(reapers).WaitAsync(TimeSpan.FromSeconds(30));
        var all = reaped.SelectMany(r => r).Select(a => a.AllocationId).ToList();
        all.Should().HaveCount(300).And.OnlyHaveUniqueItems();
        (await Store.GetPoolStatisticsAsync("p")).Load.Should().Be(0);
        await AssertLoadMatchesAllocationsAsync("p");
    }

    [Fact]
    public async Task RegistrationStorm_OverlappingBatchesInRandomOrder_NoErrorsSurface()
    {
        await Store.UpsertPoolAsync("p", PoolSettings.Default);
        var batches = Enumerable.Range(0, 8).Select(b =>
        {
            var random = new Random(b);
            return Enumerable.Range(0, 1000).OrderBy(_ => random.Next()).Take(500)
                .Select(i => new WorkerRegistration($"w{i:D4}", $"h{i}:1", 10 + b)).ToList();
        }).ToList();
        var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var storm = batches.Select(batch => Task.Run(async () =>
        {
            await start.Task;
            return await Store.RegisterWorkersAsync("p", batch);
        })).ToList();
        start.SetResult();
        var outcomes = await Task.WhenAll(storm).WaitAsync(TimeSpan.FromSeconds(60));

        var counts = batches.SelectMany(b => b).GroupBy(r => r.WorkerId).ToDictionary(g => g.Key, g => g.Count());
        outcomes.SelectMany(o => o).Count(o => o.Status == RegistrationStatus.Created).Should().Be(counts.Count);
        var workers = await Store.GetWorkersAsync("p");
        workers.Should().HaveCount(counts.Count);
        workers.Should().OnlyContain(w => w.Epoch == counts[w.WorkerId], "each registration advances the epoch exactly once");
    }

    [Fact]
    public async Task LockTimeoutAfterRetries_AnswersUnavailableAndWritesNothing()
    {
        await using var store = await PostgresTestDatabase.CreateStoreAsync(Schema, o =>
        {
            o.LockTimeout = TimeSpan.FromMilliseconds(100);
            o.TransientRetries = 1;
            o.ApplyMigrations = false;
        });
        await CreatePoolAsync("p", workers: 1, capacity: 5, new PoolSettings { Strategy = AllocationStrategy.Strict });
        await using var held = await PostgresTestDatabase.HoldRowLockAsync(Schema, "p", "w000");
        var outcome = (await store.AllocateAsync("p", [new AllocationRequest("s")])).Single();
        outcome.Status.Should().Be(AllocationStatus.Unavailable);
        outcome.Allocation.Should().BeNull();
        (await store.GetPoolStatisticsAsync("p")).ActiveAllocations.Should().Be(0);
    }

    /// <summary>Waits until a backend of this schema runs allocate_batch and waits for a lock (the blocking variant).</summary>
    private async Task WaitUntilBlockedOnRowLockAsync(Task pending)
    {
        var deadline = Stopwatch.StartNew();
        while (deadline.Elapsed < TimeSpan.FromSeconds(10) && !pending.IsCompleted)
        {
            await using var command = PostgresTestDatabase.DataSource.CreateCommand(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%allocate_batch%' AND query LIKE '%' || $1 || '%'");
            command.Parameters.Add(new Npgsql.NpgsqlParameter { Value = Schema });
            if ((long)(await command.ExecuteScalarAsync())! > 0)
            {
                return;
            }

            await Task.Delay(20);
        }

        throw new TimeoutException("The allocation never waited for a row lock within 10 s (expected the blocking fallback).");
    }
}
