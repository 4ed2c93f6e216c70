using Allocator.Reliability.History;

namespace Allocator.Reliability.Workload;

/// <summary>How a crowd of session brokers behaves.</summary>
internal sealed record BrokerOptions
{
    public required int Clients { get; init; }

    /// <summary>The pools the brokers use (client i starts on pool i mod n and moves on at random).</summary>
    public required IReadOnlyList<string> Pools { get; init; }

    /// <summary>
    /// Preferred pools (ADR 0036): each session names all of <see cref="Pools"/>, in an order of
    /// the broker's own (client i starts at pool i mod n), through <c>POST /v1/allocations</c>,
    /// and is released in the pool that answered.
    /// </summary>
    public bool AnyOfPools { get; init; }

    /// <summary>Units of one session (1 unless given).</summary>
    public Func<Random, int> Units { get; init; } = _ => 1;

    /// <summary>Lease of one session; null (the pool's default, none in the scenarios) for a share <see cref="LeaselessShare"/> of sessions.</summary>
    public TimeSpan Lease { get; init; } = TimeSpan.FromSeconds(5);

    /// <summary>Share of sessions allocated without a lease: their slots come back only by release.</summary>
    public double LeaselessShare { get; init; }

    public TimeSpan MaxWait { get; init; }

    /// <summary>Shortest a session is held before its release.</summary>
    public TimeSpan MinHold { get; init; }

    /// <summary>Longest a session is held before its release (uniform from <see cref="MinHold"/>).</summary>
    public TimeSpan MaxHold { get; init; } = TimeSpan.FromMilliseconds(200);

    /// <summary>Chance that a held session is renewed once before release.</summary>
    public double RenewShare { get; init; }

    /// <summary>The client's own patience per call (shorter than the service's timeouts on purpose in some scenarios).</summary>
    public TimeSpan ClientTimeout { get; init; } = TimeSpan.FromSeconds(20);

    /// <summary>
    /// False: sessions are never released, their leases run out (needs <see cref="LeaselessShare"/> 0).
    /// Such brokers keep allocating while others are stuck retrying releases (an outage).
    /// </summary>
    public bool Release { get; init; } = true;

    /// <summary>
    /// The client's patience for retries and releases, when it differs from <see cref="ClientTimeout"/>
    /// (a broker that gave up on a first attempt and then waits for the answer of its retry).
    /// </summary>
    public TimeSpan? RetryClientTimeout { get; init; }

    /// <summary>Pause before retrying an allocation whose outcome was unknown, in ms (uniform in [min, max)).</summary>
    public (int Min, int Max) RetryDelay { get; init; } = (50, 250);

    /// <summary>
    /// Wait what a 503's <c>Retry-After</c> says before the next session (as the .NET client's
    /// retry handler does), instead of 20-100 ms.
    /// </summary>
    public bool HonorRetryAfter { get; init; }

    /// <summary>How long after the stop a broker keeps retrying an unknown outcome or a release.</summary>
    public TimeSpan DrainTime { get; init; } = TimeSpan.FromSeconds(30);
}

/// <summary>
/// Session brokers as the design expects them to behave: allocate with an idempotency key; on an
/// unknown outcome (503 outcome-unknown, 504, no answer) retry with the same key, through another
/// instance, until an answer settles the key (an allocation, or no capacity; a later "unavailable"
/// speaks only for that attempt); hold, maybe renew, release with the current epoch
/// (re-reading it after a stale-epoch answer), retrying unknown releases. Each broker has at
/// most one session open, so the units held at once are at most clients × units.
/// </summary>
internal sealed class Brokers(Func<string, TimeSpan, ApiClient> newClient, string prefix, BrokerOptions options)
{
    private long _sessions;
    private long _allocated;
    private long _noCapacity;

    public long Sessions => Interlocked.Read(ref _sessions);

    public long Allocated => Interlocked.Read(ref _allocated);

    public long NoCapacity => Interlocked.Read(ref _noCapacity);

    /// <summary>Runs until <paramref name="stop"/>, then finishes the open sessions (bounded by <see cref="BrokerOptions.DrainTime"/>).</summary>
    public Task RunAsync(CancellationToken stop) =>
        Task.WhenAll(Enumerable.Range(0, options.Clients).Select(i => Task.Run(() => BrokerAsync(i, stop))));

    private async Task BrokerAsync(int index, CancellationToken stop)
    {
        using var client = newClient($"{prefix}-b{index}", options.ClientTimeout);
        using var patient = options.RetryClientTimeout is { } retryTimeout ? newClient($"{prefix}-b{index}r", retryTimeout) : null;
        var retries = patient ?? client;
        var random = new Random(HashCode.Combine(prefix, index));
        var pool = options.Pools[index % options.Pools.Count];
        var giveUp = DateTimeOffset.MaxValue;
        using var registration = stop.Register(() => giveUp = TimeProvider.System.GetUtcNow() + options.DrainTime);
        for (var session = 0; !stop.IsCancellationRequested; session++)
        {
            if (client.Pace is { } pace && !await pace.WaitTurnAsync(stop))
            {
                break;
            }

            if (options.Pools.Count > 1 && random.Next(4) == 0)
            {
                pool = options.Pools[random.Next(options.Pools.Count)];
            }

            Interlocked.Increment(ref _sessions);
            var key = $"{prefix}-{index}-{session}";
            TimeSpan? lease = random.NextDouble() < options.LeaselessShare ? null : options.Lease;
            var units = options.Units(random);
            var op = await AllocateAsync(client, random.Next(client.Instances), pool, key, units, lease);
            op = await ElsewhereIfRefusedAsync(op, client, random, pool, key, units, lease);

            // Once an attempt's outcome was unknown, a later "unavailable, nothing was written"
            // speaks only for that later attempt: keep the key until an answer settles it (an
            // allocation, or no capacity, which the store answers after finding no allocation for
            // the key). Moving on earlier left a leaseless allocation nobody holds (pg-restart).
            var unknownSeen = op.Outcome == Outcome.Unknown;
            while ((op.Outcome == Outcome.Unknown || (unknownSeen && op.Problem == "unavailable")) && TimeProvider.System.GetUtcNow() < giveUp)
            {
                var pause = options.HonorRetryAfter && op.RetryAfter is { } after ? (int)after.TotalMilliseconds : random.Next(options.RetryDelay.Min, options.RetryDelay.Max);
                if (pause > 0)
                {
                    await Task.Delay(pause, CancellationToken.None);
                }

                op = await AllocateAsync(retries, (op.Instance + 1 + random.Next(client.Instances - 1)) % client.Instances, pool, key, units, lease);
                op = await ElsewhereIfRefusedAsync(op, retries, random, pool, key, units, lease);
                unknownSeen |= op.Outcome == Outcome.Unknown;
            }

            if (op.Outcome == Outcome.Fail)
            {
                if (op.Problem == "no-capacity")
                {
                    Interlocked.Increment(ref _noCapacity);
                }

                await Delay(options.HonorRetryAfter && op is { Status: 503, RetryAfter: { } after } ? (int)after.TotalMilliseconds : random.Next(20, 100), stop);
                continue;
            }

            if (op.Outcome != Outcome.Ok || op.Allocation is not { Active: true } allocation)
            {
                continue; // gave up, or the key's allocation already ended (the service released it)
            }

            Interlocked.Increment(ref _allocated);
            var held = op.AnsweredPool ?? pool;
            if (!options.Release)
            {
                await Delay(Hold(random), stop);
                continue;
            }

            var epoch = allocation.Epoch;
            await Delay(Hold(random), stop);
            if (lease is not null && random.NextDouble() < options.RenewShare && !stop.IsCancellationRequested)
            {
                var renew = await client.RenewAsync(random.Next(client.Instances), held, allocation.AllocationId, epoch, lease.Value, key);
                if (renew is { Outcome: Outcome.Ok, Allocation: { } renewed })
                {
                    epoch = renewed.Epoch;
                }
            }

            await ReleaseAsync(retries, random, held, allocation.AllocationId, epoch, key, () => giveUp, options.HonorRetryAfter);
        }
    }

    /// <summary>
    /// A refused connection (an instance that is stopped or not started) sent nothing: the broker
    /// goes to another instance at once, as a load balancer would, with the same call.
    /// </summary>
    private async Task<Operation> ElsewhereIfRefusedAsync(Operation op, ApiClient client, Random random, string pool, string key, int units, TimeSpan? lease)
    {
        for (var attempt = 0; op.Problem == ApiClient.Refused && attempt < 10; attempt++)
        {
            op = await AllocateAsync(client, (op.Instance + 1 + random.Next(client.Instances - 1)) % client.Instances, pool, key, units, lease);
        }

        return op;
    }

    /// <summary>One allocate: in <paramref name="pool"/>, or (preferred pools) in every pool, starting at it.</summary>
    private Task<Operation> AllocateAsync(ApiClient client, int instance, string pool, string key, int units, TimeSpan? lease)
    {
        if (!options.AnyOfPools)
        {
            return client.AllocateAsync(instance, pool, key, units, lease, options.MaxWait);
        }

        var first = options.Pools.ToList().IndexOf(pool);
        string[] order = [.. options.Pools.Skip(first), .. options.Pools.Take(first)];
        return client.AllocateAnyAsync(instance, order, key, units, lease, options.MaxWait);
    }

    /// <summary>Releases until the answer is definite: ok, already ended, or (after re-reading the epoch) still stale.</summary>
    /// <param name="honorRetryAfter">Pause as long as a 503's Retry-After says, instead of 50-250 ms.</param>
    internal static async Task<bool> ReleaseAsync(ApiClient client, Random random, string pool, Guid id, long epoch, string key, Func<DateTimeOffset> giveUp, bool honorRetryAfter = false)
    {
        for (var attempt = 0; TimeProvider.System.GetUtcNow() < giveUp(); attempt++)
        {
            var op = await client.ReleaseAsync(random.Next(client.Instances), pool, id, epoch, key);
            if (op.Outcome == Outcome.Ok || op.Problem is "conflict" or "not-found")
            {
                return true;
            }

            if (op.Problem == ApiClient.Refused)
            {
                continue; // another instance, at once (its answer also settles an earlier send)
            }

            if (op.Problem == "stale-epoch" || op.Outcome == Outcome.Unknown)
            {
                // A renewal whose answer was lost may have moved the epoch: read the current one.
                var current = await client.GetAllocationAsync(random.Next(client.Instances), pool, id);
                if (current is { Outcome: Outcome.Ok, Allocation: { } read })
                {
                    if (!read.Active)
                    {
                        return true;
                    }

                    epoch = read.Epoch;
                }
            }

            await Task.Delay(honorRetryAfter && op.RetryAfter is { } after ? (int)after.TotalMilliseconds : random.Next(50, 250), CancellationToken.None);
        }

        return false;
    }

    private int Hold(Random random) => random.Next((int)options.MinHold.TotalMilliseconds, (int)options.MaxHold.TotalMilliseconds + 1);

    private static async Task Delay(int milliseconds, CancellationToken stop)
    {
        try
        {
            await Task.Delay(milliseconds, stop);
        }
        catch (OperationCanceledException)
        {
            // Stopping: finish the session now.
        }
    }
}
