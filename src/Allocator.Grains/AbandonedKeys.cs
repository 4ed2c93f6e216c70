namespace Allocator.Grains;

/// <summary>
/// The session keys of requests in the store, and what a caller that gave up there leaves behind.
/// Such a caller was told "outcome unknown, retry with the same key", so what its batch allocated
/// belongs to the key: the grain releases it only when no other request for the key came. A
/// request for the key that arrives while one is in the store (whether or not its caller has given
/// up yet: a retry can overtake the news of its own caller's abort) claims the allocation, and the
/// grain leaves it alone; one that arrives while the grain's release of it is in the store is held
/// back until that release has settled, so the store answers it after the release (the key's ended
/// allocation), never with an allocation about to end. Invariant 11, held means held: an
/// allocation answered active ends only by its broker's release, its lease or its worker's
/// deregistration. A caller that left just after it was answered (its endpoint says so,
/// <see cref="AbandonedAfterAnswer"/>) is treated alike, with the answers of existing allocations
/// since (<see cref="AnsweredExisting"/>) as the claims. A claim whose own caller gives up too
/// passes the allocation on: when every request that claimed it has gone without hearing of it
/// (back from the store, or dropped before it: <see cref="Unclaimed"/>), the grain releases it.
/// </summary>
/// <remarks>
/// Single-threaded by contract, as <see cref="GroupCommitQueue{TItem}"/>: the grain's turns only.
/// Each <see cref="EnteredStore"/> is matched by one <see cref="Settled"/>, and each allocation
/// <see cref="Settled"/> or <see cref="Unclaimed"/> returned by one <see cref="Released"/>; a key is
/// forgotten once nothing is outstanding for it. One activation's view: a request that reaches another activation
/// of the pool (a duplicate during a membership change) is not seen here, and what this view holds
/// unsettled when the activation ends is left to its lease. So is an allocation whose caller left
/// after an answer (<see cref="AbandonedAfterAnswer"/>) while a retry was answered it, whether or
/// not that retry's caller stayed: the grain cannot tell which of them heard.
/// </remarks>
internal sealed class AbandonedKeys
{
    /// <summary>
    /// How long an answer of an existing allocation is remembered: far longer than the moment
    /// between the grain's answer and an endpoint's word that its caller had left by then.
    /// </summary>
    internal static readonly TimeSpan ReplayMemory = TimeSpan.FromMinutes(2);

    /// <summary>
    /// An allocation made longer ago than this (by the database's clock, against the grain's: the
    /// margin over <see cref="ReplayMemory"/> absorbs skew between them) is no one's to hand back.
    /// </summary>
    internal static readonly TimeSpan RecentlyMade = TimeSpan.FromMinutes(10);

    private readonly Dictionary<string, Entry> _entries = new(StringComparer.Ordinal);
    private readonly Dictionary<string, DateTimeOffset> _replayed = new(StringComparer.Ordinal);
    private readonly Queue<(string Key, DateTimeOffset At)> _replayOrder = new();

    /// <summary>Keys with a request in the store or a release of an abandoned allocation outstanding.</summary>
    public int Count => _entries.Count;

    /// <summary>Requests held back until a release of their key's allocation settles.</summary>
    public int HeldBack { get; private set; }

    /// <summary>
    /// A request for <paramref name="key"/> goes to the store (after <see cref="Claim"/> let it):
    /// with another one there already, whichever of the two allocates, the other's caller is
    /// answered with it, so neither may be released as abandoned.
    /// </summary>
    public void EnteredStore(string key)
    {
        if (_entries.TryGetValue(key, out var entry))
        {
            entry.Claimed = true;
        }
        else
        {
            _entries[key] = entry = new Entry();
        }

        entry.InStore++;
    }

    /// <summary>
    /// A request for <paramref name="key"/> arrives, or is about to go to the store: it claims what
    /// a request for the key in the store allocates. True when it must wait: <paramref name="resume"/>
    /// runs once the grain's release in the store has settled. False: it goes on now.
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
    /// A request for <paramref name="key"/> is back from the store (decided, failed, or parked;
    /// <paramref name="outcome"/> <see langword="null"/> when its batch failed). Returns what the
    /// grain must release now (then call <see cref="Released"/> once that release settles): what it
    /// allocated when its caller had given up and nothing claimed the key. When something had, the
    /// allocation stays the key's, unclaimed until a caller hears of it (see <see cref="Unclaimed"/>).
    /// </summary>
    public Allocation? Settled(string key, bool callerGone, AllocationOutcome? outcome)
    {
        var entry = _entries[key];
        entry.InStore--;
        if (callerGone && outcome is { Status: AllocationStatus.Allocated, Allocation: { } made })
        {
            if (!entry.Claimed)
            {
                entry.ReleasesInFlight++;
                return made;
            }

            if (made.AllocationId != entry.Heard)
            {
                entry.Unheard = made;
            }
        }
        else if (!callerGone && outcome?.Allocation is { } answered)
        {
            // Its caller hears of it, held: a claim's batch can come back before the batch that
            // made the allocation does.
            entry.Heard = answered.AllocationId;
            if (answered.AllocationId == entry.Unheard?.AllocationId)
            {
                entry.Unheard = null;
            }
        }

        ForgetIfDone(key, entry);
        return null;
    }

    /// <summary>
    /// What <paramref name="key"/>'s requests allocated for a caller that gave up and then only
    /// passed to callers that gave up too, once none of the key's requests is in the store: the
    /// grain releases it (then calls <see cref="Released"/>) when none is queued or parked either
    /// for a caller still waiting, and asks again when such a request goes without reaching the
    /// store. <see langword="null"/>: nothing to release.
    /// </summary>
    public Allocation? Unclaimed(string key)
    {
        if (!_entries.TryGetValue(key, out var entry) || entry.Unheard is not { } unheard || entry.InStore > 0 || entry.ReleasesInFlight > 0)
        {
            return null;
        }

        entry.Unheard = null;
        entry.ReleasesInFlight++;
        return unheard;
    }

    /// <summary>Whether <paramref name="key"/> has an allocation no caller has heard of yet (<see cref="Unclaimed"/>).</summary>
    public bool HasUnheard(string key) => _entries.TryGetValue(key, out var entry) && entry.Unheard is not null;

    /// <summary>
    /// A request for <paramref name="key"/> was answered an allocation that existed already (a
    /// retry or a replay): its caller holds it now, so a late word that the key's first caller left
    /// (<see cref="AbandonedAfterAnswer"/>) must not release it. Remembered for <see cref="ReplayMemory"/>;
    /// only an active allocation made in the last <see cref="RecentlyMade"/> can be the subject of
    /// such a word, so replays of older or ended ones (the common kind) are not remembered at all.
    /// </summary>
    public void AnsweredExisting(string key, Allocation existing, DateTimeOffset now)
    {
        ForgetOldReplays(now);
        if (!existing.IsActive || now - existing.CreatedAt > RecentlyMade)
        {
            return;
        }

        _replayed[key] = now;
        _replayOrder.Enqueue((key, now));
    }

    /// <summary>
    /// The caller that was answered <paramref name="key"/>'s new allocation is known to have left
    /// before it heard the answer (its HTTP connection closed meanwhile). True when the grain must
    /// release the allocation (then call <see cref="Released"/> once that release settles): no
    /// request for the key is in the store or held back, and none was answered the allocation
    /// since. Requests for the key still queued or parked are the grain's to check before this.
    /// Requests for the key that arrive while the release is in the store are held back until it
    /// settles, as for <see cref="Settled"/>.
    /// </summary>
    public bool AbandonedAfterAnswer(string key, DateTimeOffset now)
    {
        ForgetOldReplays(now);
        if (_entries.ContainsKey(key) || _replayed.ContainsKey(key))
        {
            return false;
        }

        _entries[key] = new Entry { ReleasesInFlight = 1 };
        return true;
    }

    /// <summary>The answers of existing allocations still remembered (oldest first), for the grain's next activation when it moves.</summary>
    public IReadOnlyList<(string Key, DateTimeOffset At)> Replays(DateTimeOffset now)
    {
        ForgetOldReplays(now);
        return [.. _replayOrder.Where(r => _replayed.TryGetValue(r.Key, out var at) && at == r.At)];
    }

    /// <summary>Takes over what the grain's previous activation remembered (<see cref="Replays"/>), before any turn of this one.</summary>
    public void RememberReplays(IEnumerable<(string Key, DateTimeOffset At)> replays)
    {
        foreach (var (key, at) in replays.OrderBy(r => r.At))
        {
            if (!_replayed.TryGetValue(key, out var known) || known < at)
            {
                _replayed[key] = at;
                _replayOrder.Enqueue((key, at));
            }
        }
    }

    private void ForgetOldReplays(DateTimeOffset now)
    {
        while (_replayOrder.TryPeek(out var oldest) && now - oldest.At > ReplayMemory)
        {
            _replayOrder.Dequeue();
            if (_replayed.TryGetValue(oldest.Key, out var at) && at == oldest.At)
            {
                _replayed.Remove(oldest.Key);
            }
        }
    }

    /// <summary>The release of <paramref name="key"/>'s abandoned allocation settled (done or failed): held requests go on.</summary>
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
        if (entry.InStore == 0 && entry.ReleasesInFlight == 0 && entry.Unheard is null)
        {
            _entries.Remove(key);
        }
    }

    private sealed class Entry
    {
        public int InStore;
        public int ReleasesInFlight;
        public bool Claimed;

        /// <summary>Allocated for a caller that gave up, kept for the requests that claimed it; none of their callers has heard of it yet.</summary>
        public Allocation? Unheard;

        /// <summary>The allocation of the key a caller that stayed was last answered, while the key was tracked.</summary>
        public Guid? Heard;
        public List<Action>? HeldBack;
    }
}
