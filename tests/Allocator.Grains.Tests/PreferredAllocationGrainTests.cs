using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

/// <summary>
/// ADR 0036: one request over an ordered list of pools, one allocation per key across the list,
/// and a caller waiting in every pool at once served by exactly one of them, first come first served.
/// Real time, the in-memory store, one silo.
/// </summary>
public sealed class PreferredAllocationGrainTests
{
    private const string Home = GrainHarness.PoolId;
    private const string Away = "pool-2";
    private static readonly string[] Both = [Home, Away];

    private static async Task<GrainHarness> TwoPoolsAsync(int homeSlots, int awaySlots, TimeSpan? maxWait = null, short silos = 1)
    {
        var settings = PoolSettings.Default with { MaxWait = maxWait ?? TimeSpan.FromSeconds(30) };
        var harness = await GrainHarness.CreateAsync(workers: 0, settings: settings, fakeTime: false, silos: silos);
        var store = harness.Store.Inner;
        await store.UpsertPoolAsync(Away, settings);
        if (homeSlots > 0)
        {
            await store.RegisterWorkersAsync(Home, [new WorkerRegistration("home-1", "10.0.1.1:7000", homeSlots)]);
        }

        if (awaySlots > 0)
        {
            await store.RegisterWorkersAsync(Away, [new WorkerRegistration("away-1", "10.0.2.1:7000", awaySlots)]);
        }

        return harness;
    }

    private static IPreferredAllocationGrain KeyGrain(GrainHarness harness, string key, string? owner = "tenant-a") =>
        harness.Grains.GetGrain<IPreferredAllocationGrain>(PreferredAllocationKey.Of(owner, key));

    private static AllocationRequest Request(string key) => new(key) { Owner = "tenant-a" };

    private static Task<AllocationOutcome> AllocateAsync(GrainHarness harness, string key, string[]? pools = null, TimeSpan? wait = null) =>
        KeyGrain(harness, key).AllocateAsync(Request(key), pools ?? Both, wait ?? TimeSpan.Zero);

    /// <summary>Every allocation (active or ended) the key has in either pool.</summary>
    private static async Task<List<Allocation>> HeldAsync(GrainHarness harness, string key)
    {
        List<Allocation> found = [];
        foreach (var pool in Both)
        {
            if (await harness.Store.Inner.GetAllocationByKeyAsync(pool, key, "tenant-a") is { } allocation)
            {
                found.Add(allocation);
            }
        }

        return found;
    }

    [Fact]
    public async Task TheFirstPoolWithRoom_Answers_InTheOrderGiven()
    {
        await using var harness = await TwoPoolsAsync(homeSlots: 1, awaySlots: 1);

        var first = await AllocateAsync(harness, "k1");
        var second = await AllocateAsync(harness, "k2");
        var third = await AllocateAsync(harness, "k3");
        var reversed = await AllocateAsync(harness, "k4", [Away, Home]);

        first.Status.Should().Be(AllocationStatus.Allocated);
        first.Allocation!.PoolId.Should().Be(Home, "the first pool named has room");
        second.Allocation!.PoolId.Should().Be(Away, "the first is full: the next one answers");
        third.Status.Should().Be(AllocationStatus.NoCapacity, "both are full and the caller does not wait");
        reversed.Status.Should().Be(AllocationStatus.NoCapacity);
        (await HeldAsync(harness, "k3")).Should().BeEmpty();
    }

    [Fact]
    public async Task ARetry_FindsTheAllocationWhereItWasMade_EvenWhenAnEarlierPoolHasRoomNow()
    {
        await using var harness = await TwoPoolsAsync(homeSlots: 1, awaySlots: 1);
        var blocker = await AllocateAsync(harness, "blocker");
        var made = await AllocateAsync(harness, "k1");
        made.Allocation!.PoolId.Should().Be(Away);
        await harness.Pool.ReleaseAsync(blocker.Allocation!.AllocationId, blocker.Allocation.Epoch);

        var retry = await AllocateAsync(harness, "k1");

        retry.Status.Should().Be(AllocationStatus.Existing);
        retry.Allocation!.AllocationId.Should().Be(made.Allocation.AllocationId);
        (await HeldAsync(harness, "k1")).Should().ContainSingle("the home pool has room again, yet the key stays one allocation");
    }

    [Fact]
    public async Task ANewActivation_AsksEveryPoolsStore_BeforeItAllocatesAnywhere()
    {
        await using var harness = await TwoPoolsAsync(homeSlots: 1, awaySlots: 1);

        // An earlier attempt allocated in the second pool and its answer was lost with an
        // activation this one never knew (as after the silo hosting it died).
        var earlier = await harness.Grains.GetPoolGrain(Away).AllocateAsync(Request("k1"), TimeSpan.Zero);

        var retry = await AllocateAsync(harness, "k1");

        retry.Status.Should().Be(AllocationStatus.Existing, "the home pool has room, but the key already holds an allocation in the other");
        retry.Allocation!.AllocationId.Should().Be(earlier.Allocation!.AllocationId);
        (await HeldAsync(harness, "k1")).Should().ContainSingle();
        (await harness.Store.Inner.GetPoolStatisticsAsync(Home)).Load.Should().Be(0);
    }

    [Fact]
    public async Task AnotherTenantsKey_IsAnotherKey()
    {
        await using var harness = await TwoPoolsAsync(homeSlots: 2, awaySlots: 0);

        var mine = await KeyGrain(harness, "k1").AllocateAsync(Request("k1"), Both, TimeSpan.Zero);
        var theirs = await KeyGrain(harness, "k1", owner: "tenant-b").AllocateAsync(new AllocationRequest("k1") { Owner = "tenant-b" }, Both, TimeSpan.Zero);

        mine.Status.Should().Be(AllocationStatus.Allocated);
        theirs.Status.Should().Be(AllocationStatus.Allocated);
        theirs.Allocation!.AllocationId.Should().NotBe(mine.Allocation!.AllocationId);
    }

    [Fact]
    public async Task AWaiter_InBothPools_IsServedByTheFirstToFreeASlot_AndLeavesTheOtherQueue()
    {
        await using var harness = await TwoPoolsAsync(homeSlots: 1, awaySlots: 1);
        await AllocateAsync(harness, "home-holder", [Home]);
        var awayHolder = await AllocateAsync(harness, "away-holder", [Away]);

        var waiting = AllocateAsync(harness, "k1", wait: TimeSpan.FromSeconds(20));
        await WaitUntilAsync(async () => await harness.WaitersAsync(Home) == 1 && await harness.WaitersAsync(Away) == 1, "the caller waits in both pools");
        waiting.IsCompleted.Should().BeFalse();

        await harness.Grains.GetPoolGrain(Away).ReleaseAsync(awayHolder.Allocation!.AllocationId, awayHolder.Allocation.Epoch);
        var outcome = await waiting.WaitAsync(TimeSpan.FromSeconds(10));

        outcome.Status.Should().Be(AllocationStatus.Allocated);
        outcome.Allocation!.PoolId.Should().Be(Away, "the second pool freed a slot first");
        await WaitUntilAsync(async () => await harness.WaitersAsync(Home) == 0, "the home pool's queue lets the served caller go");
        (await HeldAsync(harness, "k1")).Should().ContainSingle();
    }

    /// <summary>
    /// The silo hosting the pools' grains stops while a caller waits in both. A waiting call that
    /// heard "moved" is sent again where the grain is now; one whose answer was lost with the silo
    /// while its pool held the claim leaves the outcome unknown (it may have been allocating, on a
    /// call the stopping silo forwarded). Either way the broker ends with one allocation for its
    /// key: served, or told to retry and answered by the retry.
    /// </summary>
    [Fact]
    public async Task AWaiter_WhosePoolGrainsMove_IsServedWhereTheyAreNow_OrToldToRetry_NeverTwice()
    {
        await using var harness = await TwoPoolsAsync(homeSlots: 1, awaySlots: 1, silos: 2);
        var homeHolder = (await AllocateAsync(harness, "home-holder", [Home])).Allocation!;
        await AllocateAsync(harness, "away-holder", [Away]);
        var hostSilo = (await harness.Pool.GetStatusAsync()).Silo;
        var host = harness.Cluster.Silos.ToList().FindIndex(s => s.SiloAddress.ToParsableString() == hostSilo);
        var survivor = harness.GrainsOf(1 - host);
        var key = survivor.GetGrain<IPreferredAllocationGrain>(PreferredAllocationKey.Of("tenant-a", "k1"));

        var waiting = key.AllocateAsync(Request("k1"), Both, TimeSpan.FromSeconds(30));
        await WaitUntilAsync(async () => await WaitersIn(survivor, Home) == 1 && await WaitersIn(survivor, Away) == 1, "the caller waits in both pools");
        await harness.Cluster.StopSiloAsync(harness.Cluster.Silos[host]).WaitAsync(TimeSpan.FromSeconds(60));
        await WaitUntilAsync(async () => waiting.IsCompleted || await WaitersIn(survivor, Home) == 1, "the caller waits again in the home pool, or is answered");
        await survivor.GetPoolGrain(Home).ReleaseAsync(homeHolder.AllocationId, homeHolder.Epoch);

        AllocationOutcome outcome;
        try
        {
            outcome = await waiting.WaitAsync(TimeSpan.FromSeconds(20));
        }
        catch (AllocatorException unknown) when (unknown.OutcomeUnknown)
        {
            outcome = await key.AllocateAsync(Request("k1"), Both, TimeSpan.FromSeconds(10)).WaitAsync(TimeSpan.FromSeconds(20));
        }

        outcome.Status.Should().BeOneOf(AllocationStatus.Allocated, AllocationStatus.Existing);
        outcome.Allocation!.PoolId.Should().Be(Home, "only the home pool freed a slot");
        (await HeldAsync(harness, "k1")).Should().ContainSingle().Which.AllocationId.Should().Be(outcome.Allocation.AllocationId);
    }

    private static async Task<int> WaitersIn(IGrainFactory grains, string pool) => (await grains.GetPoolGrain(pool).GetStatusAsync()).Waiters;

    [Fact]
    public async Task AWaiter_WhoseWaitRunsOut_IsAnsweredNoCapacity_WithNothingHeldAnywhere()
    {
        await using var harness = await TwoPoolsAsync(homeSlots: 1, awaySlots: 1);
        await AllocateAsync(harness, "h1");
        await AllocateAsync(harness, "h2");

        var outcome = await AllocateAsync(harness, "k1", wait: TimeSpan.FromMilliseconds(300)).WaitAsync(TimeSpan.FromSeconds(20));

        outcome.Status.Should().Be(AllocationStatus.NoCapacity);
        (await HeldAsync(harness, "k1")).Should().BeEmpty();
        await WaitUntilAsync(async () => await harness.WaitersAsync(Home) + await harness.WaitersAsync(Away) == 0, "both queues are empty");
    }

    [Fact]
    public async Task ManyWaiters_InBothPools_SlotsFreedInBoth_EachKeyServedOnce_InArrivalOrder()
    {
        const int Waiters = 12;
        await using var harness = await TwoPoolsAsync(homeSlots: 1, awaySlots: 1);
        var homeHolder = (await AllocateAsync(harness, "home-holder", [Home])).Allocation!;
        var awayHolder = (await AllocateAsync(harness, "away-holder", [Away])).Allocation!;

        // One at a time, so that their arrival order is known.
        var waiting = new List<Task<AllocationOutcome>>();
        for (var i = 0; i < Waiters; i++)
        {
            waiting.Add(AllocateAsync(harness, $"w{i:D2}", wait: TimeSpan.FromSeconds(60)));
            var parked = i + 1;
            await WaitUntilAsync(async () => await harness.WaitersAsync(Home) == parked && await harness.WaitersAsync(Away) == parked, $"waiter {i} parked in both pools");
        }

        // Free the slots alternately in the two pools, each time releasing what the last served holds.
        var served = new List<Allocation>();
        var holders = new Dictionary<string, Allocation> { [Home] = homeHolder, [Away] = awayHolder };
        for (var n = 0; n < Waiters; n++)
        {
            var pool = n % 2 == 0 ? Away : Home;
            var held = holders[pool];
            await harness.Grains.GetPoolGrain(pool).ReleaseAsync(held.AllocationId, held.Epoch);
            var done = n + 1;
            await WaitUntilAsync(() => Task.FromResult(waiting.Count(t => t.IsCompleted) == done), $"slot {n} freed in {pool} serves one waiter");
            var outcome = waiting.Where(t => t.IsCompleted).Select(t => t.Result).Single(o => !served.Any(s => s.AllocationId == o.Allocation?.AllocationId));
            outcome.Status.Should().Be(AllocationStatus.Allocated);
            outcome.Allocation!.PoolId.Should().Be(pool, "only the pool that freed a slot has room");
            served.Add(outcome.Allocation);
            holders[pool] = outcome.Allocation;
        }

        served.Select(a => a.SessionKey).Should().Equal(Enumerable.Range(0, Waiters).Select(i => $"w{i:D2}"), "first come, first served across both pools");
        foreach (var key in served.Select(a => a.SessionKey))
        {
            (await HeldAsync(harness, key)).Should().ContainSingle($"key {key} holds one allocation across both pools");
        }

        (await harness.WaitersAsync(Home)).Should().Be(0);
        (await harness.WaitersAsync(Away)).Should().Be(0);
    }

    [Fact]
    public async Task PoolsNamedTwice_OrTooMany_AreRefused()
    {
        await using var harness = await TwoPoolsAsync(homeSlots: 1, awaySlots: 1);

        var twice = () => AllocateAsync(harness, "k1", [Home, Home]);
        var many = () => AllocateAsync(harness, "k2", [.. Enumerable.Range(0, 9).Select(i => $"p{i}")]);
        var none = () => AllocateAsync(harness, "k3", []);

        await twice.Should().ThrowAsync<ArgumentException>().WithMessage("*twice*");
        await many.Should().ThrowAsync<ArgumentException>().WithMessage("*at most 8*");
        await none.Should().ThrowAsync<ArgumentException>();
    }

    private static async Task WaitUntilAsync(Func<Task<bool>> condition, string what)
    {
        var clock = System.Diagnostics.Stopwatch.StartNew();
        while (!await condition())
        {
            if (clock.Elapsed > TimeSpan.FromSeconds(20))
            {
                throw new TimeoutException($"Timed out waiting until {what}.");
            }

            await Task.Delay(20);
        }
    }
}
