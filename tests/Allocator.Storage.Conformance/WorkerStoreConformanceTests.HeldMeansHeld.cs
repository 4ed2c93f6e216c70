namespace Allocator.Storage.Conformance;

/// <summary>Issue 20: the ways a broker could lose a slot it was given, or a worker its fencing, that every store must not have.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Allocate_FallbackLease_AppliesOnlyWhenNeitherTheRequestNorThePoolNamesALease()
    {
        // Issue 20, #2: the pool's default lease is the store's to apply, with the settings it
        // reads as it allocates; the caller's fallback comes after it, never instead of it.
        var noDefault = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var withDefault = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5, new PoolSettings { DefaultLease = TimeSpan.FromMinutes(1) });
        var fallback = TimeSpan.FromHours(24);

        var poolDefault = await AllocateOneAsync(withDefault, Request() with { FallbackLease = fallback });
        var fellBack = await AllocateOneAsync(noDefault, Request() with { FallbackLease = fallback });
        var own = await AllocateOneAsync(withDefault, Request(lease: TimeSpan.FromMinutes(3)) with { FallbackLease = fallback });

        ExpiryOf(poolDefault).Should().BeCloseTo(TimeSpan.FromMinutes(1), TimeSpan.FromSeconds(5), "the pool's default lease comes before the fallback");
        ExpiryOf(fellBack).Should().BeCloseTo(fallback, TimeSpan.FromSeconds(5), "neither the request nor the pool names a lease");
        ExpiryOf(own).Should().BeCloseTo(TimeSpan.FromMinutes(3), TimeSpan.FromSeconds(5), "the request's own lease comes first");
    }

    [Fact]
    public async Task Allocate_FallbackLease_AlsoOnTheBatchAndBlockingPaths()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 5, new PoolSettings { DefaultLease = TimeSpan.FromMinutes(1), Strategy = AllocationStrategy.Strict });
        var strict = await AllocateOneAsync(poolId, Request() with { FallbackLease = TimeSpan.FromHours(24) });
        var batchPool = await CreatePoolWithWorkersAsync(workers: 2, capacity: 5, new PoolSettings { DefaultLease = TimeSpan.FromMinutes(1) });

        var batch = await Store.AllocateAsync(batchPool, [.. Enumerable.Range(0, 4).Select(_ => Request() with { FallbackLease = TimeSpan.FromHours(24) })]);

        ExpiryOf(strict).Should().BeCloseTo(TimeSpan.FromMinutes(1), TimeSpan.FromSeconds(5));
        batch.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
        batch.Select(ExpiryOf).Should().OnlyContain(e => e > TimeSpan.FromSeconds(55) && e < TimeSpan.FromSeconds(65), "every request of a set batch takes the pool's default");
    }

    [Fact]
    public async Task ReleaseAbandoned_WithThePoolsCurrentFence_EndsTheAllocation()
    {
        // Issue 47: the release of an allocation whose caller gave up, by the activation that holds the pool.
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var fence = await Store.ClaimPoolActivationAsync(poolId);
        var allocation = await AllocateAsync(poolId);

        var result = await Store.ReleaseAbandonedAsync(poolId, new LeaseRelease(allocation.AllocationId, allocation.Epoch), fence);

        result.Status.Should().Be(LeaseStatus.Ok);
        (await Store.GetAllocationAsync(poolId, allocation.AllocationId))!.IsActive.Should().BeFalse();
        (await LoadsAsync(poolId)).Values.Should().AllBeEquivalentTo(0, "its slot is free again");
    }

    [Fact]
    public async Task ReleaseAbandoned_AfterALaterActivationClaimedThePool_ChangesNothing()
    {
        // Issue 47, #1: an activation superseded while its instance hung wakes and releases what its
        // caller abandoned; its successor, which claimed the pool, may have answered a retry of the
        // key with that allocation. The store, not the activation's memory, decides.
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var superseded = await Store.ClaimPoolActivationAsync(poolId);
        var allocation = await AllocateAsync(poolId);
        var successor = await Store.ClaimPoolActivationAsync(poolId);
        successor.Should().NotBe(superseded, "every claim gives the pool a new fence");
        var before = await SnapshotAsync(poolId);

        var late = await Store.ReleaseAbandonedAsync(poolId, new LeaseRelease(allocation.AllocationId, allocation.Epoch), superseded);

        late.Status.Should().Be(LeaseStatus.StaleEpoch, "a later activation holds the pool");
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before, "nothing changes");
        (await Store.ReleaseAbandonedAsync(poolId, new LeaseRelease(allocation.AllocationId, allocation.Epoch), successor)).Status
            .Should().Be(LeaseStatus.Ok, "the activation that holds the pool still may");
    }

    [Fact]
    public async Task AllocateFenced_WithThePoolsCurrentFence_AllocatesAsWithout_OnEveryPath()
    {
        // Issue 47, #2: the activation that holds the pool allocates as before (skip-locked, the
        // blocking path of a strict pool, a set batch), and hears each outcome once committed.
        var skipLocked = await CreatePoolWithWorkersAsync(workers: 2, capacity: 5);
        var strict = await CreatePoolWithWorkersAsync(workers: 2, capacity: 5, new PoolSettings { Strategy = AllocationStrategy.Strict });
        foreach (var poolId in new[] { skipLocked, strict })
        {
            var fence = await Store.ClaimPoolActivationAsync(poolId);
            var reported = new List<int>();

            var outcomes = await Store.AllocateFencedAsync(poolId, [Request(), Request(), Request()], fence, (i, _) => { lock (reported) { reported.Add(i); } }, CancellationToken.None);

            outcomes.Should().NotBeNull();
            outcomes!.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
            reported.Should().BeEquivalentTo([0, 1, 2], "each outcome is told once");
            (await LoadsAsync(poolId)).Values.Sum().Should().Be(3);
        }
    }

    [Fact]
    public async Task AllocateFenced_AfterALaterActivationClaimedThePool_AllocatesNothing_OnEveryPath()
    {
        // Issue 47, #2: an activation superseded while its instance hung wakes with callers parked
        // in its memory, answered elsewhere or gone since; nothing it sends may take a slot.
        var skipLocked = await CreatePoolWithWorkersAsync(workers: 2, capacity: 5);
        var strict = await CreatePoolWithWorkersAsync(workers: 2, capacity: 5, new PoolSettings { Strategy = AllocationStrategy.Strict });
        foreach (var poolId in new[] { skipLocked, strict })
        {
            var superseded = await Store.ClaimPoolActivationAsync(poolId);
            (await Store.AllocateFencedAsync(poolId, [Request()], superseded, null, CancellationToken.None)).Should().NotBeNull();
            var successor = await Store.ClaimPoolActivationAsync(poolId);
            var before = await SnapshotAsync(poolId);
            var reported = 0;

            var late = await Store.AllocateFencedAsync(poolId, [Request(), Request(sessionKey: "replayed-key")], superseded, (_, _) => Interlocked.Increment(ref reported), CancellationToken.None);

            late.Should().BeNull("a later activation holds the pool: nothing was allocated");
            reported.Should().Be(0);
            (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before, "nothing changes");
            (await Store.AllocateFencedAsync(poolId, [Request()], successor, null, CancellationToken.None))!.Single().Status
                .Should().Be(AllocationStatus.Allocated, "the activation that holds the pool still allocates");
        }
    }

    [Fact]
    public async Task AllocateFenced_PoolThatDoesNotExist_IsAnsweredAsWithoutAFence()
    {
        var poolId = NewPoolId();

        var withFence = () => Store.AllocateFencedAsync(poolId, [Request()], 1, null, CancellationToken.None);

        (await withFence.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.NotFound);
    }

    [Fact]
    public async Task ClaimPoolActivation_PoolThatDoesNotExist_IsZero_AndCreatesNothing()
    {
        var poolId = NewPoolId();

        (await Store.ClaimPoolActivationAsync(poolId)).Should().Be(0);

        (await Store.GetPoolAsync(poolId)).Should().BeNull();
    }

    [Fact]
    public async Task Register_RacingDeregistrationOfTheSameWorker_NeverGivesAnEpochTwice()
    {
        // Issue 20, #3: a registration whose snapshot predated a deregistration's commit read the
        // epoch the deregistration kept from before it, and gave an earlier incarnation's epoch
        // again, so a late report of the old process would be accepted.
        var poolId = await CreatePoolAsync();
        string[] workers = ["w-0", "w-1", "w-2", "w-3"];
        const int Rounds = 150;
        var given = workers.ToDictionary(w => w, _ => new List<long>());
        using var gate = new ManualResetEventSlim();
        var tasks = workers.SelectMany(worker => new[]
        {
            Task.Run(async () =>
            {
                gate.Wait();
                for (var i = 0; i < Rounds; i++)
                {
                    var outcome = (await Store.RegisterWorkersAsync(poolId, [Registration(worker, 5)])).Single();
                    lock (given)
                    {
                        given[worker].Add(outcome.Worker.Epoch);
                    }
                }
            }),
            Task.Run(async () =>
            {
                gate.Wait();
                for (var i = 0; i < Rounds; i++)
                {
                    await Store.DeregisterWorkerAsync(poolId, worker);
                }
            }),
        }).ToList();

        gate.Set();
        await Task.WhenAll(tasks).WaitAsync(CompletionBound * 3);

        foreach (var (worker, epochs) in given)
        {
            var repeated = epochs.GroupBy(e => e).Where(g => g.Count() > 1).Select(g => g.Key).ToList();
            repeated.Should().BeEmpty("worker {0} was given epochs {1}: an epoch is never given twice for a worker id", worker, string.Join(", ", epochs));
        }
    }

    [Fact]
    public async Task ExpiredLease_BeforeTheReaperRuns_IsEndedForEveryPath()
    {
        // Issue 20, #5: GET and release answered an expired, not yet reaped lease as live, and the
        // statistics counted its slot as taken, while allocate (rightly) took that slot.
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var allocation = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(5));
        await ExpireLeaseAsync(poolId, allocation.AllocationId);

        var read = (await Store.GetAllocationAsync(poolId, allocation.AllocationId))!;
        read.IsActive.Should().BeFalse("a lease is over at its expiry, reaped or not");
        read.EndedAt.Should().Be(read.ExpiresAt, "it ended when its lease expired");

        var release = await Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch);
        release.Status.Should().Be(LeaseStatus.NotActive, "there is nothing left to release");
        release.Allocation!.EndedAt.Should().Be(read.ExpiresAt);
        var batch = await Store.ReleaseAsync(poolId, [new LeaseRelease(allocation.AllocationId, allocation.Epoch)]);
        batch.Single().Status.Should().Be(LeaseStatus.NotActive);

        var statistics = await Store.GetPoolStatisticsAsync(poolId);
        statistics.ActiveAllocations.Should().Be(0);
        statistics.Load.Should().Be(0, "an expired lease holds no slot");
        statistics.FreeSlots.Should().Be(2);
        (await GetWorkerAsync(poolId, WorkerId(0))).Load.Should().Be(0);
        (await Store.GetWorkersAsync(poolId)).Single().Load.Should().Be(0);

        // The reaper (or the next allocation that needs the slot) ends it as it was read: at its expiry, once.
        await Store.ReapExpiredAsync(100);
        var reaped = (await Store.GetAllocationAsync(poolId, allocation.AllocationId))!;
        reaped.EndedAt.Should().Be(read.ExpiresAt, "reaping records the end that was already answered");
        await AssertLoadsMatchAsync(poolId, []);
    }

    [Fact]
    public async Task ExpiredLease_OfADeregisteredWorker_EndedAtItsExpiry()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var allocation = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(5));
        await ExpireLeaseAsync(poolId, allocation.AllocationId);
        var expiry = (await Store.GetAllocationAsync(poolId, allocation.AllocationId))!.ExpiresAt;

        await Store.DeregisterWorkerAsync(poolId, allocation.WorkerId);

        (await Store.GetAllocationAsync(poolId, allocation.AllocationId))!.EndedAt.Should().Be(expiry, "it had ended before the worker left");
    }

    [Fact]
    public async Task Allocate_KeyAllocatedAndReleasedWhileABlockingAllocationOfItWaits_NeverAllocatesTheKeyTwice()
    {
        // Issue 20, #4: the blocking path checked the key only before its lock wait; the active-key
        // unique index ignores ended allocations, so nothing stopped a second allocation of a key
        // that was allocated and released meanwhile.
        var poolId = await CreatePoolAsync(new PoolSettings { Strategy = AllocationStrategy.Strict });
        await RegisterAsync(poolId, Registration(WorkerId(0), 10), Registration(WorkerId(1), 1));
        await AllocateAsync(poolId, units: 2); // w-00 is now busier than w-01, which has room for one unit only
        var key = NewSessionKey();
        AllocationOutcome blocked;
        IAsyncDisposable? rowLock = await HoldRowLockAsync(poolId, WorkerId(0));
        try
        {
            // Five units fit only on w-00: the strict (blocking) allocation waits for its lock.
            var waiting = AllocateOneAsync(poolId, Request(units: 5, sessionKey: key));
            await AssertStillBlockedAsync(waiting, "the only row with room for five units is locked");

            // Meanwhile the same key is allocated (one unit, on w-01) and released.
            var first = await WithinAsync(AllocateOneAsync(poolId, Request(units: 1, sessionKey: key)), CompletionBound, "the key's first allocation, on the unlocked w-01");
            first.Status.Should().Be(AllocationStatus.Allocated);
            (await Store.ReleaseAsync(poolId, first.Allocation!.AllocationId, first.Allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok);

            await rowLock.DisposeAsync();
            rowLock = null;
            blocked = await WithinAsync(waiting, CompletionBound, "the blocked allocation once the lock is released");
            blocked.Status.Should().Be(AllocationStatus.Existing, "the key already has an outcome (allocated, then released): a replay never allocates twice");
            blocked.Allocation!.AllocationId.Should().Be(first.Allocation.AllocationId);
            blocked.Allocation.IsActive.Should().BeFalse();
        }
        finally
        {
            if (rowLock is not null)
            {
                await rowLock.DisposeAsync();
            }
        }

        (await Store.GetPoolStatisticsAsync(poolId)).ActiveAllocations.Should().Be(1, "only the first, unrelated allocation is active");
        (await LoadsAsync(poolId)).Should().BeEquivalentTo(new Dictionary<string, int> { [WorkerId(0)] = 2, [WorkerId(1)] = 0 });
    }

    private static TimeSpan ExpiryOf(AllocationOutcome outcome)
    {
        outcome.Status.Should().Be(AllocationStatus.Allocated);
        var allocation = outcome.Allocation!;
        allocation.ExpiresAt.Should().NotBeNull();
        return allocation.ExpiresAt!.Value - allocation.CreatedAt;
    }
}
