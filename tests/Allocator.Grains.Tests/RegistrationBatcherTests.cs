using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

public sealed class RegistrationBatcherTests
{
    [Fact]
    public async Task RegisterAsync_ArrivingTogether_AreBatchedWithDuplicatesSplitAndOwnOutcomes()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 0, options: new GrainOptions { MaxRegistrationBatchesInFlight = 1 });
        h.Store.BlockRegistrations = true;
        var batcher = h.Grains.GetRegistrationBatcher(GrainHarness.PoolId);

        var first = batcher.RegisterAsync(new WorkerRegistration("w0", "h:0", 1));
        var blocked = await Wait.ForAsync(h.Store.BlockedRegistration(0), "the first batch");
        var w1 = batcher.RegisterAsync(new WorkerRegistration("w1", "h:1", 1));
        var w2 = batcher.RegisterAsync(new WorkerRegistration("w2", "h:2", 1));
        var w1Again = batcher.RegisterAsync(new WorkerRegistration("w1", "h:1b", 5));
        var w3 = batcher.RegisterAsync(new WorkerRegistration("w3", "h:3", 1));
        await Wait.UntilAsync(async () => await QueuedInAsync(h) == 4, "four registrations to queue behind the first batch");

        blocked.Release();
        (await Wait.ForAsync(h.Store.BlockedRegistration(1), "the second batch")).Release();
        (await Wait.ForAsync(h.Store.BlockedRegistration(2), "the batch with the duplicate")).Release();
        var outcomes = await Wait.ForAsync(Task.WhenAll(first, w1, w2, w1Again, w3), "every registration");

        h.Store.RegistrationBatches.Should().BeEquivalentTo(
            new[] { new[] { "w0" }, ["w1", "w2", "w3"], ["w1"] },
            o => o.WithStrictOrdering());
        outcomes.Select(o => (o.WorkerId, o.Status)).Should().Equal(
            ("w0", RegistrationStatus.Created),
            ("w1", RegistrationStatus.Created),
            ("w2", RegistrationStatus.Created),
            ("w1", RegistrationStatus.Updated),
            ("w3", RegistrationStatus.Created));
        outcomes[3].Worker.Capacity.Should().Be(5, "the later registration of a worker applies last");
        outcomes[3].Worker.Epoch.Should().Be(2);
    }

    [Fact]
    public async Task RegisterAsync_PoolNotSerialized_OverlapsBatches()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 0);
        h.Store.BlockRegistrations = true;
        var batcher = h.Grains.GetRegistrationBatcher(GrainHarness.PoolId);
        var a = batcher.RegisterAsync(new WorkerRegistration("a", "h:a", 1));
        var first = await Wait.ForAsync(h.Store.BlockedRegistration(0), "the first batch");
        await Wait.UntilAsync(async () => (await batcher.GetStatusAsync()).SettingsKnown, "the batcher to read the pool's settings");

        var b = batcher.RegisterAsync(new WorkerRegistration("b", "h:b", 1));
        var second = await Wait.ForAsync(h.Store.BlockedRegistration(1), "a second batch while the first is in the store");

        first.Release();
        second.Release();
        (await Wait.ForAsync(Task.WhenAll(a, b), "both registrations")).Should().OnlyContain(o => o.Status == RegistrationStatus.Created);
    }

    [Fact]
    public async Task RegisterAsync_PoolSerializesRegistrations_OneBatchAtATime()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 0, settings: new PoolSettings { SerializeRegistrations = true });
        h.Store.BlockRegistrations = true;
        var batcher = h.Grains.GetRegistrationBatcher(GrainHarness.PoolId);
        var a = batcher.RegisterAsync(new WorkerRegistration("a", "h:a", 1));
        var first = await Wait.ForAsync(h.Store.BlockedRegistration(0), "the first batch");
        await Wait.UntilAsync(async () => (await batcher.GetStatusAsync()).SettingsKnown, "the batcher to read the pool's settings");

        var b = batcher.RegisterAsync(new WorkerRegistration("b", "h:b", 1));
        await Wait.UntilAsync(async () => await QueuedInAsync(h) == 1, "b to queue");
        await SettleAsync(h);

        h.Store.RegistrationBatches.Should().HaveCount(1, "the pool serializes registrations");
        first.Release();
        (await Wait.ForAsync(h.Store.BlockedRegistration(1), "b's batch after the first")).Release();
        (await Wait.ForAsync(Task.WhenAll(a, b), "both registrations")).Should().OnlyContain(o => o.Status == RegistrationStatus.Created);
    }

    [Fact]
    public async Task RegisterAsync_InvalidRegistration_FailsOnlyThatCaller()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 0);
        var batcher = h.Grains.GetRegistrationBatcher(GrainHarness.PoolId);

        var bad = () => batcher.RegisterAsync(new WorkerRegistration("w", "h:1", 0));

        await bad.Should().ThrowAsync<ArgumentException>();
        (await batcher.RegisterAsync(new WorkerRegistration("w", "h:1", 1))).Status.Should().Be(RegistrationStatus.Created);
    }

    [Fact]
    public async Task RegisterAsync_WakesWaitersOfThePool_WithoutTheStoresNotification()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 0, settings: new PoolSettings { MaxWait = TimeSpan.FromMinutes(1) });
        h.Store.SuppressNotifications = true; // the batcher tells the pool grain itself
        var waiter = h.Pool.AllocateAsync(new AllocationRequest("s"), TimeSpan.FromSeconds(30));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the caller to be parked");

        await h.Grains.GetRegistrationBatcher(GrainHarness.PoolId).RegisterAsync(new WorkerRegistration("w", "h:1", 1));

        (await Wait.ForAsync(waiter, "the registration to wake the waiter")).Allocation!.WorkerId.Should().Be("w");
    }

    private static async Task<int> QueuedInAsync(GrainHarness h) => (await h.Grains.GetRegistrationBatcher(GrainHarness.PoolId).GetStatusAsync()).Queued;

    /// <summary>Two empty turns: the first runs after the turns already queued, the second after any flush they posted.</summary>
    private static async Task SettleAsync(GrainHarness h)
    {
        for (var i = 0; i < 2; i++)
        {
            await h.Grains.GetRegistrationBatcher(GrainHarness.PoolId).GetStatusAsync();
        }
    }
}
