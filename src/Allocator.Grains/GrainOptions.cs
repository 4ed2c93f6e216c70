namespace Allocator.Grains;

/// <summary>
/// Options of the pool grains and the registration batchers, bound from <c>Allocator:Grains</c>.
/// <see cref="IdleTimeout"/> and <see cref="CallTimeout"/> are applied to Orleans' own options
/// (<c>GrainCollectionOptions.CollectionAge</c>, <c>SiloMessagingOptions.ResponseTimeout</c>).
/// </summary>
public sealed class GrainOptions
{
    /// <summary>The configuration section these options bind from.</summary>
    public const string Section = "Allocator:Grains";

    /// <summary>
    /// Most allocation requests in one store batch, and likewise most releases in one release
    /// batch. Default: 256. Range 1 to
    /// <see cref="AllocatorLimits.MaxBatchSize"/>.
    /// </summary>
    /// <remarks>
    /// A batch carries the requests that gathered while it waited for a store slot
    /// (<see cref="MaxStoreBatchesInFlight"/>): where the database is far and callers are many,
    /// that is more than 64. wide-250 with 12 store slots: batches of at most 64 carried 62.8
    /// (2,809 allocations/s), of at most 256 carried 72 (3,222/s). Near databases and few callers
    /// make smaller batches whatever the bound.
    /// </remarks>
    public int MaxBatchSize { get; set; } = 256;

    /// <summary>
    /// Most allocation batches of one pool in flight at once in this instance; while they are all
    /// in flight, new requests gather for the next batch. Release batches have the same bound,
    /// counted apart, so that a burst of one kind never holds up the other. Default: 16. Range 1 to 64.
    /// </summary>
    /// <remarks>
    /// Callers answered by one batch come back together; the first to arrive finds a free slot
    /// and flushes at once, the rest gather behind it. With too few slots they wait for a whole
    /// round trip before a slot frees: at 90 ms injected RTT and 48 callers, 4 slots gave p50
    /// 134 ms and 292 allocations/s, 16 slots p50 110 ms and 387/s (same machine, same run
    /// conditions). 16 also matches a 16-connection database pool.
    /// </remarks>
    public int MaxBatchesInFlight { get; set; } = 16;

    /// <summary>
    /// Most store batches in flight at once in this instance, across every pool and kind
    /// (allocations, releases, registrations): a batch beyond it waits in its grain, where its
    /// batch keeps growing, instead of inside the database connection pool with its items already
    /// chosen. Default: 0, which takes it from the store: its connection limit less a quarter (at
    /// least 2) for the statements that do not go through a grain (the reaper, renewals, reads);
    /// no bound for a store that does not say (<see cref="IWorkerStore.ConnectionLimit"/>).
    /// Range 0 to 10,000.
    /// </summary>
    /// <remarks>
    /// Measured (wide-250: 16 connections, 1,000 callers, 250 ms; one machine, one run each): with
    /// up to 16 allocation batches in flight on 16 connections, each batch waited a median 29–33 ms
    /// for a connection and carried 55 requests (2,858–2,919 allocations/s); with 12 slots none
    /// waited at the median and batches carried 72 (3,232/s, with <see cref="MaxBatchSize"/> 256).
    /// See docs/decisions/0025-batches-wait-in-the-grain-not-the-connection-pool.md.
    /// </remarks>
    public int MaxStoreBatchesInFlight { get; set; }

    /// <summary>
    /// Whether a pool grain adapts how many batches it keeps in flight (1 to
    /// <see cref="MaxBatchesInFlight"/>) to how long they take: while batches take more than twice
    /// as long as the quickest recent one they are queuing inside the database, and fewer, larger
    /// batches do the same work for less. A full batch (<see cref="MaxBatchSize"/>) always goes
    /// while fewer than <see cref="MaxBatchesInFlight"/> are in flight. Default: true. False keeps
    /// up to <see cref="MaxBatchesInFlight"/> in flight whatever they take.
    /// </summary>
    /// <remarks>
    /// Measured (loopback, 64 callers, 2 cores, allocate + release): 16 fixed gave batches of 6 and
    /// 1,436 steps/s; 1 fixed gave batches of 24 and 3,528 steps/s, but at 90 ms of round trip 4
    /// fixed gave 292 allocations/s where 16 gave 387/s. Adaptive finds either end by itself.
    /// See docs/decisions/0010-adaptive-batches-in-flight.md.
    /// </remarks>
    public bool AdaptiveBatchesInFlight { get; set; } = true;

    /// <summary>Most workers in one store registration batch. Default: 500. Range 1 to <see cref="AllocatorLimits.MaxRegistrationBatch"/>.</summary>
    public int MaxRegistrationBatchSize { get; set; } = 500;

    /// <summary>
    /// Most registration batches of one pool in flight at once, unless the pool sets
    /// <see cref="PoolSettings.SerializeRegistrations"/> (then 1). Default: 4. Range 1 to 64.
    /// </summary>
    public int MaxRegistrationBatchesInFlight { get; set; } = 4;

    /// <summary>
    /// A grain activation with no call for this long is deactivated by Orleans' activation
    /// collector (it is activated again on the next call). Default: 5 minutes. At least 1 second
    /// (Orleans collects in quanta of about a minute by default: shorter values take effect at
    /// the next collection).
    /// </summary>
    public TimeSpan IdleTimeout { get; set; } = TimeSpan.FromMinutes(5);

    /// <summary>
    /// How often a pool grain with waiters re-checks the store for capacity even without a
    /// change notification: the safety net for lost notifications. Default: 1 second.
    /// Range 10 milliseconds to 1 minute.
    /// </summary>
    public TimeSpan WaiterRecheckInterval { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>
    /// Longest a grain call may take beyond the wait the caller asked for: Orleans' response
    /// timeout, and the deadline after which a still-queued request goes to no batch. The host
    /// sets it from <c>Allocator:Timeouts:GrainCallTimeout</c> (timeouts nest: command timeout &lt;
    /// this &lt; HTTP request timeout). Default: 30 seconds. Range 1 second to 10 minutes.
    /// </summary>
    public TimeSpan CallTimeout { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>
    /// The lease of an allocation whose request names none, in a pool without a default lease.
    /// Every allocation made through the grains has a lease, because every call can time out:
    /// one whose caller never hears the answer (the outcome was unknown and it never retried)
    /// then frees its slots at the end of this lease instead of never. Renew to keep an
    /// allocation longer. Default: 24 hours. Range <see cref="AllocatorLimits.MinLease"/> to
    /// <see cref="AllocatorLimits.MaxLease"/>.
    /// </summary>
    public TimeSpan FallbackLease { get; set; } = TimeSpan.FromHours(24);

    /// <summary>
    /// How far back a pool grain counts its pool's demand (arrivals, "no capacity" answers, parked
    /// callers) for <c>GET /v1/pools/{pool}</c> and the workers-wanted gauge (issue 49). Default:
    /// 60 seconds. Range 1 second to 1 hour.
    /// </summary>
    public TimeSpan DemandWindow { get; set; } = TimeSpan.FromSeconds(60);

    /// <summary>The problems with these options, empty when valid.</summary>
    public IReadOnlyList<string> Validate()
    {
        List<string> errors = [];
        CheckRange(errors, nameof(MaxBatchSize), MaxBatchSize, 1, AllocatorLimits.MaxBatchSize);
        CheckRange(errors, nameof(MaxBatchesInFlight), MaxBatchesInFlight, 1, 64);
        CheckRange(errors, nameof(MaxStoreBatchesInFlight), MaxStoreBatchesInFlight, 0, 10_000);
        CheckRange(errors, nameof(MaxRegistrationBatchSize), MaxRegistrationBatchSize, 1, AllocatorLimits.MaxRegistrationBatch);
        CheckRange(errors, nameof(MaxRegistrationBatchesInFlight), MaxRegistrationBatchesInFlight, 1, 64);
        CheckRange(errors, nameof(IdleTimeout), IdleTimeout, TimeSpan.FromSeconds(1), TimeSpan.FromDays(1));
        CheckRange(errors, nameof(WaiterRecheckInterval), WaiterRecheckInterval, TimeSpan.FromMilliseconds(10), TimeSpan.FromMinutes(1));
        CheckRange(errors, nameof(CallTimeout), CallTimeout, TimeSpan.FromSeconds(1), TimeSpan.FromMinutes(10));
        CheckRange(errors, nameof(FallbackLease), FallbackLease, AllocatorLimits.MinLease, AllocatorLimits.MaxLease);
        CheckRange(errors, nameof(DemandWindow), DemandWindow, TimeSpan.FromSeconds(1), TimeSpan.FromHours(1));
        return errors;
    }

    /// <summary>Throws <see cref="ArgumentException"/> naming every invalid option.</summary>
    public void EnsureValid()
    {
        var errors = Validate();
        if (errors.Count > 0)
        {
            throw new ArgumentException("Invalid grain options: " + string.Join(" ", errors));
        }
    }

    private static void CheckRange<T>(List<string> errors, string name, T value, T min, T max)
        where T : IComparable<T>
    {
        if (value.CompareTo(min) < 0 || value.CompareTo(max) > 0)
        {
            errors.Add($"{name} is {value}; it must be between {min} and {max}.");
        }
    }
}
