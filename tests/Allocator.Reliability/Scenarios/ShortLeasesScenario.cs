using Allocator.Reliability.Checking;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>One-second leases, renewed right around their expiry, with a reaper on every instance.</summary>
internal sealed class ShortLeasesScenario : Scenario
{
    public override string Name => "short-leases";

    public override string Proves =>
        "One-second leases renewed between 0.8 and 1.2 s after they were granted, racing their expiry and the reapers of every instance, released with the superseded epoch and then late: an expired lease is never renewed, a stale release changes nothing, a slot is freed exactly once (by the reaper or the release, never both), loads stay exact.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, "{}", workers: 8, capacity: 20);
        var duration = context.Pick(TimeSpan.FromSeconds(8), TimeSpan.FromSeconds(40));
        using var stop = new CancellationTokenSource(duration);
        var clients = context.Pick(12, 24);
        long renewed = 0, renewRefused = 0, released = 0, releaseRefused = 0, staleRefused = 0, staleOther = 0;
        context.Fault($"{clients} clients: 1 s leases, renewed 0.8-1.2 s after grant, released with the pre-renewal epoch, then 0.8-1.3 s later; reapers every 1 s on {context.Cluster.Urls.Count} instances");
        var lease = TimeSpan.FromSeconds(1);
        await Task.WhenAll(Enumerable.Range(0, clients).Select(i => Task.Run(async () =>
        {
            using var client = context.NewClient(context.Pool($"l{i}"), TimeSpan.FromSeconds(20));
            var random = new Random(i);
            for (var session = 0; !stop.IsCancellationRequested; session++)
            {
                var key = $"{context.Pool("k")}-{i}-{session}";
                var op = await client.AllocateAsync(random.Next(client.Instances), pool, key, 1, lease, TimeSpan.Zero);
                for (var retry = 0; op.Outcome == Outcome.Unknown && retry < 50; retry++)
                {
                    await Task.Delay(100, CancellationToken.None);
                    op = await client.AllocateAsync(random.Next(client.Instances), pool, key, 1, lease, TimeSpan.Zero);
                }

                if (op is not { Outcome: Outcome.Ok, Allocation: { Active: true } allocation })
                {
                    continue;
                }

                await Task.Delay(random.Next(800, 1200), CancellationToken.None);
                var epoch = allocation.Epoch;
                var renew = await client.RenewAsync(random.Next(client.Instances), pool, allocation.AllocationId, epoch, lease, key);
                if (renew is { Outcome: Outcome.Ok, Allocation: { } fresh })
                {
                    Interlocked.Increment(ref renewed);
                    epoch = fresh.Epoch;

                    // The holder of the superseded epoch tries to release: it must change nothing.
                    var stale = await client.ReleaseAsync(random.Next(client.Instances), pool, allocation.AllocationId, allocation.Epoch, key, knownStale: true);
                    Interlocked.Increment(ref stale.Problem == "stale-epoch" ? ref staleRefused : ref staleOther);
                }
                else
                {
                    Interlocked.Increment(ref renewRefused);
                }

                await Task.Delay(random.Next(800, 1300), CancellationToken.None);
                var release = await client.ReleaseAsync(random.Next(client.Instances), pool, allocation.AllocationId, epoch, key);
                Interlocked.Increment(ref release.Outcome == Outcome.Ok ? ref released : ref releaseRefused);
            }
        })));

        context.Figure("renewals ok / refused (expired)", $"{renewed:N0} / {renewRefused:N0}");
        context.Figure("releases ok / refused (already expired)", $"{released:N0} / {releaseRefused:N0}");
        context.Figure("releases with the epoch before the renewal: refused stale / other answers", $"{staleRefused:N0} / {staleOther:N0}");

        // 160 slots for at most 24 held.
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = _ => true });
    }
}
