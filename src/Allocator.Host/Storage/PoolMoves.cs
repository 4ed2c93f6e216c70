namespace Allocator.Host.Storage;

/// <summary>
/// Moves a drained, empty pool from its database to another (issue 23, ADR 0023; the steps and
/// what an operator sees: docs/postgresql.md, "Moving a pool").
/// </summary>
/// <remarks>
/// <list type="number">
/// <item>Refused at once, changing nothing, while the pool has a worker or an active allocation.</item>
/// <item>The directory entry is marked <c>moving_to</c> (compare and set): every instance answers
/// the pool 503 (retry) from the moment it hears of it (the entry's notification).</item>
/// <item>The pool is created on the target with the source's settings.</item>
/// <item>It is removed from the source in one statement that removes it only if it is still empty;
/// a worker registered meanwhile, through an instance that had not heard of the move yet, makes
/// this fail, and the move is undone (the copy removed, the mark cleared): 409. Once removed, a
/// stale instance's call finds no pool there, reads the directory and follows.</item>
/// <item>The entry names the target: the move is done.</item>
/// </list>
/// A move interrupted between 2 and 5 (the instance died) leaves the pool answering 503: moving it
/// to the same target again finishes it; moving it back to the source cancels it, as long as the
/// source still has it. Requests that race (a move sent twice, a cancel during a move, issue 39
/// #7) never undo each other's copy: a move that finds the source already emptied carries on,
/// a cancel marks the directory before it removes anything, and a move whose last step finds the
/// directory changed makes the databases agree with it; the pool ends in exactly one database,
/// the one the directory names.
/// </remarks>
internal sealed class PoolMoves(Databases databases, Action<string> forget, Func<string, string, Database> find)
{
    public static AllocatorException BeingMoved(string poolId, string from, string to) =>
        new(AllocatorErrorKind.Unavailable,
            $"Pool '{poolId}' is being moved from database '{from}' to '{to}'; nothing was written. Retry in a moment.",
            outcomeUnknown: false, innerException: null);

    private Database Directory
    {
        get
        {
            databases.Default.EnsureStarted();
            return databases.Default;
        }
    }

    public async Task<PoolMove> MoveAsync(string poolId, string target, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        var to = databases.Find(target) ?? throw new ArgumentException($"Database '{target}' is not configured (Allocator:Databases).", nameof(target));
        var entry = await Directory.Placement!.GetPlacementAsync(poolId, cancellationToken);
        var from = find(entry?.Database ?? databases.Default.Name, poolId);
        if (entry?.MovingTo is { } under)
        {
            return under == to.Name ? await FinishAsync(poolId, from, to, entry, cancellationToken)
                : from == to ? await CancelAsync(poolId, from, entry, cancellationToken)
                : throw new AllocatorException(AllocatorErrorKind.Conflict,
                    $"A move of pool '{poolId}' from database '{from.Name}' to '{under}' is under way: move it to '{under}' to finish that move, or to '{from.Name}' to cancel it.");
        }

        from.EnsureStarted();
        to.EnsureStarted();
        var statistics = await from.Store.GetPoolStatisticsAsync(poolId, cancellationToken); // NotFound: no such pool
        if (from == to)
        {
            return new PoolMove(poolId, from.Name, to.Name, Moved: false);
        }

        if (statistics.Workers > 0 || statistics.ActiveAllocations > 0)
        {
            throw NotEmpty(poolId, from.Name, statistics.Workers, statistics.ActiveAllocations);
        }

        var moving = new PoolPlacement(poolId, from.Name, MovingTo: to.Name);
        if (!await Directory.Placement!.ReplacePlacementAsync(entry, moving, cancellationToken))
        {
            throw Changed(poolId);
        }

        forget(poolId);
        return await FinishAsync(poolId, from, to, moving, cancellationToken);
    }

    private async Task<PoolMove> FinishAsync(string poolId, Database from, Database to, PoolPlacement moving, CancellationToken cancellationToken)
    {
        from.EnsureStarted();
        to.EnsureStarted();
        var stays = new PoolPlacement(poolId, from.Name);
        var settings = (await from.Store.GetPoolAsync(poolId, cancellationToken))?.Settings;
        if (settings is not null)
        {
            var copy = await to.Store.UpsertPoolAsync(poolId, settings, cancellationToken);
            var removal = await from.Placement!.RemovePoolIfEmptyAsync(poolId, cancellationToken);
            if (removal is { Removed: false, Found: true })
            {
                // A worker came in through an instance that had not heard of the move yet: undo.
                if (copy.Created)
                {
                    await to.Placement!.RemovePoolIfEmptyAsync(poolId, cancellationToken);
                }

                await Directory.Placement!.ReplacePlacementAsync(moving, stays, cancellationToken);
                forget(poolId);
                throw NotEmpty(poolId, from.Name, removal.Workers, removal.ActiveAllocations);
            }

            // Removed here, or already gone: another request finishing this same move (an operator's
            // resend) removed it after this one read it. Either way it has left the source, and its
            // copy on the target must stay (issue 39, #7).
        }
        else if ((settings = (await to.Store.GetPoolAsync(poolId, cancellationToken))?.Settings) is null)
        {
            // In neither database: nothing to move (a resumed move of a pool that is gone).
            await Directory.Placement!.ReplacePlacementAsync(moving, stays, cancellationToken);
            forget(poolId);
            throw AllocatorException.PoolNotFound(poolId);
        }

        if (!await Directory.Placement!.ReplacePlacementAsync(moving, new PoolPlacement(poolId, to.Name), cancellationToken))
        {
            return await AfterLostRaceAsync(poolId, from, to, settings, cancellationToken);
        }

        forget(poolId);
        return new PoolMove(poolId, from.Name, to.Name, Moved: true);
    }

    /// <summary>
    /// The directory changed under a move that had already copied the pool (and maybe removed it
    /// from its source): another request finished the move, or cancelled it. The databases are
    /// made to agree with the directory's word, so the pool is never in both, nor in neither
    /// (issue 39, #7). The pool is empty (only an empty pool moves), so recreating it with its
    /// settings loses nothing.
    /// </summary>
    private async Task<PoolMove> AfterLostRaceAsync(string poolId, Database from, Database to, PoolSettings settings, CancellationToken cancellationToken)
    {
        forget(poolId);
        var entry = await Directory.Placement!.GetPlacementAsync(poolId, cancellationToken);
        if (entry is { MovingTo: null } && entry.Database == to.Name)
        {
            return new PoolMove(poolId, from.Name, to.Name, Moved: true); // finished by the other request
        }

        if (entry is { MovingTo: null } && entry.Database == from.Name)
        {
            // Cancelled meanwhile: the pool stays on its source.
            await from.Store.UpsertPoolAsync(poolId, settings, cancellationToken);
            await to.Placement!.RemovePoolIfEmptyAsync(poolId, cancellationToken);
            throw new AllocatorException(AllocatorErrorKind.Conflict, $"The move of pool '{poolId}' to '{to.Name}' was cancelled while it ran; the pool stays on '{from.Name}'.");
        }

        throw Changed(poolId);
    }

    private async Task<PoolMove> CancelAsync(string poolId, Database from, PoolPlacement moving, CancellationToken cancellationToken)
    {
        from.EnsureStarted();
        if (await from.Store.GetPoolAsync(poolId, cancellationToken) is not { } source)
        {
            throw new AllocatorException(AllocatorErrorKind.Conflict,
                $"Pool '{poolId}' has left database '{from.Name}' already: finish the move by moving it to '{moving.MovingTo}'.");
        }

        // The directory first: a move still running finds it changed and puts the pool back
        // (AfterLostRaceAsync); one that finished first wins, and nothing is removed here.
        var marked = await Directory.Placement!.ReplacePlacementAsync(moving, new PoolPlacement(poolId, from.Name), cancellationToken);
        forget(poolId);
        if (!marked)
        {
            throw Changed(poolId);
        }

        // The source may have lost the pool to the running move between the read and the mark;
        // then the copy a move made on its target (empty: nothing could reach it) goes.
        await from.Store.UpsertPoolAsync(poolId, source.Settings, cancellationToken);
        var target = find(moving.MovingTo!, poolId);
        target.EnsureStarted();
        await target.Placement!.RemovePoolIfEmptyAsync(poolId, cancellationToken);
        return new PoolMove(poolId, from.Name, from.Name, Moved: false);
    }

    private static AllocatorException NotEmpty(string poolId, string database, int workers, long active) =>
        new(AllocatorErrorKind.Conflict,
            $"Pool '{poolId}' on database '{database}' is not empty ({workers} workers, {active} active allocations): only a drained, empty pool moves. " +
            "Drain its workers, let their allocations end, deregister them, then move it.");

    private static AllocatorException Changed(string poolId) =>
        new(AllocatorErrorKind.Conflict, $"The placement of pool '{poolId}' changed while it was being moved (another move?); read it again and retry.");
}
