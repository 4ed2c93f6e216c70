namespace Allocator.Grains;

/// <summary>
/// Session keys whose caller gave up while its request was in the store. That caller was told
/// "outcome unknown, retry with the same key", so what its batch allocated belongs to the key:
/// the grain releases it only when nobody came back for it. A retry with the same key that
/// arrives before the release starts claims the allocation (no release: the store answers the
/// retry with it); one that arrives while the release is in the store is held back until the
/// release has settled, so the store answers it after the release (the key's ended allocation),
/// never with an allocation that is about to end. Invariant 11, held means held: an allocation
/// answered active ends only by its broker's release, its lease or its worker's deregistration.
/// </summary>
/// <remarks>
/// Single-threaded by contract, as <see cref="GroupCommitQueue{TItem}"/>: the grain's turns only.
/// Each <see cref="GaveUp"/> is matched by one <see cref="Settled"/>; each <see cref="Settled"/>
/// that answered true by one <see cref="Released"/>. A key is forgotten once nothing is
/// outstanding for it. One activation's view: a retry that reaches another activation of the pool
/// (a duplicate during a membership change) is not seen here.
/// </remarks>
internal sealed class AbandonedKeys
{
    private readonly Dictionary<string, Entry> _entries = new(StringComparer.Ordinal);

    /// <summary>Keys with a gone caller's request or release outstanding.</summary>
    public int Count => _entries.Count;

    /// <summary>Retries held back until a release of their key's allocation settles.</summary>
    public int HeldBack { get; private set; }

    /// <summary>A caller gave up while its request for <paramref name="key"/> was in the store.</summary>
    public void GaveUp(string key)
    {
        if (!_entries.TryGetValue(key, out var entry))
        {
            _entries[key] = entry = new Entry();
        }

        entry.GoneRequests++;
    }

    /// <summary>
    /// A request for <paramref name="key"/> arrives: it claims what a gone caller's request
    /// allocates. True when it must wait: <paramref name="resume"/> runs once the release in the
    /// store has settled. False: it goes on now (nothing to wait for).
    /// </summary>
    public bool Claim(string key, Action resume)
    {
        if (!_entries.TryGetValue(key, out var entry))
        {
            return false;
        }

        entry.Claimed = true;
        if (entry.ReleasesInFlight == 0)
        {
            return false;
        }

        (entry.HeldBack ??= []).Add(resume);
        HeldBack++;
        return true;
    }

    /// <summary>
    /// A gone caller's request for <paramref name="key"/> was decided. True when the grain must
    /// release what it allocated (then call <see cref="Released"/> once that release settles):
    /// it allocated and no request for the key has claimed it.
    /// </summary>
    public bool Settled(string key, bool allocated)
    {
        var entry = _entries[key];
        entry.GoneRequests--;
        if (allocated && !entry.Claimed)
        {
            entry.ReleasesInFlight++;
            return true;
        }

        ForgetIfDone(key, entry);
        return false;
    }

    /// <summary>The release of <paramref name="key"/>'s abandoned allocation settled (done or failed): held retries go on.</summary>
    public void Released(string key)
    {
        var entry = _entries[key];
        entry.ReleasesInFlight--;
        if (entry.ReleasesInFlight == 0 && entry.HeldBack is { } held)
        {
            entry.HeldBack = null;
            HeldBack -= held.Count;
            foreach (var resume in held)
            {
                resume();
            }
        }

        ForgetIfDone(key, entry);
    }

    private void ForgetIfDone(string key, Entry entry)
    {
        if (entry.GoneRequests == 0 && entry.ReleasesInFlight == 0)
        {
            _entries.Remove(key);
        }
    }

    private sealed class Entry
    {
        public int GoneRequests;
        public int ReleasesInFlight;
        public bool Claimed;
        public List<Action>? HeldBack;
    }
}
