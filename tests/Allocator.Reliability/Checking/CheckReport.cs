namespace Allocator.Reliability.Checking;

/// <summary>What the checker verifies, one entry per invariant (DESIGN.md numbers in brackets).</summary>
internal enum Invariant
{
    /// <summary>[1] load = units of active allocations, 0 ≤ load ≤ capacity; no active allocation on a missing worker.</summary>
    Capacity,

    /// <summary>[2, 3] every 2xx allocation reply has its committed row, on the worker and with the units it named.</summary>
    RepliesCommitted,

    /// <summary>[4] one allocation per idempotency key, and every reply for a key names it.</summary>
    OneAllocationPerKey,

    /// <summary>[5] no allocation on a worker confirmed drained or deregistered.</summary>
    EligibleWorkers,

    /// <summary>[6] a release, renew or load report with a superseded epoch changes nothing.</summary>
    Fencing,

    /// <summary>[7] a slot is freed once: one successful release, none after expiry or deregistration, no renewal of an expired lease.</summary>
    FreedOnce,

    /// <summary>[7] after the clients are done and the leases have run out, nothing is still active.</summary>
    NothingStuck,

    /// <summary>
    /// [11] an allocation answered active to a broker ends only by that broker's release, its lease's
    /// expiry or its worker's deregistration; a broker's release of what it holds is never refused as
    /// "not active" while its lease runs.
    /// </summary>
    HeldMeansHeld,

    /// <summary>[3, outcomes] nothing committed by a call answered as a failure ("nothing was written").</summary>
    FailureMeansNothing,

    /// <summary>[8] no "no capacity" while the scenario kept room for every caller.</summary>
    NoFalseNoCapacity,

    /// <summary>[10] no reply slower than the HTTP timeout (plus the allocation's wait).</summary>
    HttpTimeout,

    /// <summary>no 500, whatever happened.</summary>
    No500,

    /// <summary>
    /// [12, 13] every allocation is stored with the tenant of a broker that sent its key: none
    /// without an owner, none under another tenant (a call that crossed two releases keeps it).
    /// </summary>
    OwnersStored,
}

internal sealed class InvariantResult(Invariant invariant)
{
    private const int MaxSamples = 5;
    private readonly List<string> _examples = [];

    public Invariant Invariant { get; } = invariant;

    public long Checked { get; set; }

    public long Violations { get; private set; }

    public bool NotApplicable { get; set; }

    public IReadOnlyList<string> Samples => _examples;

    /// <summary>Adds another check's counts and samples of this invariant, its samples labelled.</summary>
    public void Add(InvariantResult other, string label)
    {
        Checked += other.Checked;
        NotApplicable = NotApplicable && other.NotApplicable;
        Violations += other.Violations;
        foreach (var sample in other.Samples)
        {
            if (_examples.Count < MaxSamples)
            {
                _examples.Add($"[{label}] {sample}");
            }
        }
    }

    public void Violation(string what)
    {
        Violations++;
        if (_examples.Count < MaxSamples)
        {
            _examples.Add(what);
        }
    }
}

/// <summary>The checker's verdict on one scenario.</summary>
internal sealed class CheckReport
{
    private readonly Dictionary<Invariant, InvariantResult> _results = Enum.GetValues<Invariant>().ToDictionary(i => i, i => new InvariantResult(i));
    private readonly List<string> _notes = [];

    public IEnumerable<InvariantResult> Results => _results.Values.OrderBy(r => r.Invariant);

    public long Violations => _results.Values.Sum(r => r.Violations);

    public IReadOnlyList<string> Notes => _notes;

    public int Allocations { get; set; }

    public int Workers { get; set; }

    public InvariantResult For(Invariant invariant) => _results[invariant];

    /// <summary>Adds the verdict on another database's pools (issue 23): counts add up, samples and notes say which database.</summary>
    public void Add(string database, CheckReport other)
    {
        if (Allocations == 0 && Workers == 0 && _results.Values.All(r => r.Checked == 0))
        {
            foreach (var result in _results.Values)
            {
                result.NotApplicable = true;
            }
        }

        foreach (var result in other.Results)
        {
            _results[result.Invariant].Add(result, database);
        }

        foreach (var note in other.Notes)
        {
            Note($"[{database}] {note}");
        }

        Allocations += other.Allocations;
        Workers += other.Workers;
    }

    public void Note(string note)
    {
        lock (_notes)
        {
            if (_notes.Count < 20)
            {
                _notes.Add(note);
            }
        }
    }
}
