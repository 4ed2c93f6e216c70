using Allocator.Reliability.Checking;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>Duplicate and delayed replays of one key through every instance, also racing and after the release.</summary>
internal sealed class ReplayScenario : Scenario
{
    public override string Name => "replays";

    public override string Proves =>
        "The same idempotency key sent through every instance at once, again after a delay, racing its release and after it: one allocation per key, every reply names it, a replay after the release answers the ended allocation and never allocates again.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, "{}", workers: 10, capacity: 20);
        var duration = context.Pick(TimeSpan.FromSeconds(7), TimeSpan.FromSeconds(40));
        using var stop = new CancellationTokenSource(duration);
        var clients = context.Pick(8, 16);
        long sessions = 0, afterRelease = 0, newAfterRelease = 0;
        context.Fault($"{clients} clients: each key sent through all instances at once, replayed after 50-300 ms, racing its release and twice after it");
        await Task.WhenAll(Enumerable.Range(0, clients).Select(i => Task.Run(async () =>
        {
            using var client = context.NewClient(context.Pool($"r{i}"), TimeSpan.FromSeconds(20));
            var random = new Random(i);
            for (var session = 0; !stop.IsCancellationRequested; session++)
            {
                Interlocked.Increment(ref sessions);
                var key = $"{context.Pool("k")}-{i}-{session}";
                TimeSpan? lease = random.Next(3) == 0 ? null : TimeSpan.FromSeconds(5);

                // Duplicates through every instance at the same moment.
                var first = await Task.WhenAll(Enumerable.Range(0, client.Instances).Select(instance => client.AllocateAsync(instance, pool, key, 1, lease, TimeSpan.Zero)));
                var allocation = first.Where(o => o.Outcome == Outcome.Ok).Select(o => o.Allocation).FirstOrDefault();
                for (var retry = 0; allocation is null && first.Any(o => o.Outcome == Outcome.Unknown) && retry < 50; retry++)
                {
                    await Task.Delay(100, CancellationToken.None);
                    var again = await client.AllocateAsync(random.Next(client.Instances), pool, key, 1, lease, TimeSpan.Zero);
                    allocation = again.Outcome == Outcome.Ok ? again.Allocation : null;
                }

                if (allocation is not { Active: true })
                {
                    continue;
                }

                // A delayed replay, through some instance.
                await Task.Delay(random.Next(50, 300), CancellationToken.None);
                await client.AllocateAsync(random.Next(client.Instances), pool, key, 1, lease, TimeSpan.Zero);

                // The release, with a replay racing it through another instance.
                var releasedThrough = random.Next(client.Instances);
                var release = Brokers.ReleaseAsync(client, random, pool, allocation.AllocationId, allocation.Epoch, key, () => TimeProvider.System.GetUtcNow() + TimeSpan.FromSeconds(30));
                var racing = client.AllocateAsync((releasedThrough + 1) % client.Instances, pool, key, 1, lease, TimeSpan.Zero);
                await Task.WhenAll(release, racing);
                if (!await release)
                {
                    continue;
                }

                // Replays after the release, through two instances at once: the ended allocation, never a new one.
                var late = await Task.WhenAll(client.AllocateAsync(0, pool, key, 1, lease, TimeSpan.Zero), client.AllocateAsync(client.Instances - 1, pool, key, 1, lease, TimeSpan.Zero));
                foreach (var op in late.Where(o => o.Outcome == Outcome.Ok))
                {
                    Interlocked.Increment(ref afterRelease);
                    if (op.Allocation!.Active || op.Allocation.AllocationId != allocation.AllocationId)
                    {
                        Interlocked.Increment(ref newAfterRelease);
                    }
                }
            }
        })));

        context.Figure("keys", sessions.ToString("N0", System.Globalization.CultureInfo.InvariantCulture));
        context.Figure("replays answered after the release (of which a new or active allocation)", $"{afterRelease:N0} ({newAfterRelease:N0})");
        if (newAfterRelease > 0)
        {
            context.ScenarioViolations.Add($"{newAfterRelease} replays after the release answered an active or different allocation");
        }

        // 200 slots for at most 16 keys open at once.
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = _ => true });
    }
}
