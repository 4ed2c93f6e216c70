using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

/// <summary>
/// Invariant 11, held means held: an allocation answered active to a broker ends only by that
/// broker's release, its lease's expiry or its worker's deregistration, never by the grain's own
/// clean-up of a call it took for abandoned.
/// </summary>
public sealed class HeldMeansHeldTests
{
    [Fact]
    public async Task PoolSettingsUnreadable_AllocationTakesThePoolsDefaultLease_NotTheFallback()
    {
        // Issue 20, hypothesis 2: while the grain does not know the pool's settings (a failed read,
        // or a change being re-read), every allocation was given the 24-hour fallback lease.
        await using var h = await GrainHarness.CreateAsync(settings: new PoolSettings { DefaultLease = TimeSpan.FromSeconds(60) });
        h.Store.FailPoolReads = true;
        var now = h.Time.GetUtcNow();

        var outcome = await h.Pool.AllocateAsync(new AllocationRequest("s"), TimeSpan.Zero);

        outcome.Allocation!.ExpiresAt.Should().Be(now + TimeSpan.FromSeconds(60), "the pool's default lease is the store's to apply, known or not to the grain");
    }

    [Fact]
    public async Task PoolSettingsChanging_AllocationsWhileTheyAreReRead_TakeThePoolsDefaultLease()
    {
        await using var h = await GrainHarness.CreateAsync(settings: new PoolSettings { DefaultLease = TimeSpan.FromSeconds(60) });
        await h.Pool.AllocateAsync(new AllocationRequest("before"), TimeSpan.Zero); // the settings are known now
        h.Store.BlockPoolReads = true;
        await h.Store.UpsertPoolAsync(GrainHarness.PoolId, new PoolSettings { DefaultLease = TimeSpan.FromSeconds(61) });
        await h.Pool.OnSettingsChangedAsync();
        var now = h.Time.GetUtcNow();

        var outcome = await h.Pool.AllocateAsync(new AllocationRequest("during"), TimeSpan.Zero);

        outcome.Allocation!.ExpiresAt.Should().Be(now + TimeSpan.FromSeconds(61), "the store applies the pool's current default lease");
        h.Store.BlockPoolReads = false;
    }
}
