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
/// source still has it.
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
        if (await from.Store.GetPoolAsync(poolId, cancellationToken) is { } source)
        {
            var copy = await to.Store.UpsertPoolAsync(poolId, source.Settings, cancellationToken);
            var removal = await from.Placement!.RemovePoolIfEmptyAsync(poolId, cancellationToken);
            if (!removal.Removed)
            {
                // A worker came in through an instance that had not heard of the move yet: undo.
                if (copy.Created)
                {
                    await to.Placement!.RemovePoolIfEmptyAsync(poolId, cancellationToken);
                }

                await Directory.Placement!.ReplacePlacementAsync(moving, stays, cancellationToken);
                forget(poolId);
                throw removal.Found ? NotEmpty(poolId, from.Name, removal.Workers, removal.ActiveAllocations) : AllocatorException.PoolNotFound(poolId);
            }
        }
        else if (await to.Store.GetPoolAsync(poolId, cancellationToken) is null)
        {
            // In neither database: nothing to move (a resumed move of a pool that is gone).
            await Directory.Placement!.ReplacePlacementAsync(moving, stays, cancellationToken);
            forget(poolId);
            throw AllocatorException.PoolNotFound(poolId);
        }

        if (!await Directory.Placement!.ReplacePlacementAsync(moving, new PoolPlacement(poolId, to.Name), cancellationToken))
        {
            throw Changed(poolId);
        }

        forget(poolId);
        return new PoolMove(poolId, from.Name, to.Name, Moved: true);
    }

    private async Task<PoolMove> CancelAsync(string poolId, Database from, PoolPlacement moving, CancellationToken cancellationToken)
    {
        from.EnsureStarted();
        if (await from.Store.GetPoolAsync(poolId, cancellationToken) is null)
        {
            throw new AllocatorException(AllocatorErrorKind.Conflict,
                $"Pool '{poolId}' has left database '{from.Name}' already: finish the move by moving it to '{moving.MovingTo}'.");
        }

        // The copy a move may have made on its target is empty: nothing could reach it meanwhile.
        var target = find(moving.MovingTo!, poolId);
        target.EnsureStarted();
        await target.Placement!.RemovePoolIfEmptyAsync(poolId, cancellationToken);
        if (!await Directory.Placement!.ReplacePlacementAsync(moving, new PoolPlacement(poolId, from.Name), cancellationToken))
        {
            throw Changed(poolId);
        }

        forget(poolId);
        return new PoolMove(poolId, from.Name, from.Name, Moved: false);
    }

    private static AllocatorException NotEmpty(string poolId, string database, int workers, long active) =>
        new(AllocatorErrorKind.Conflict,
            $"Pool '{poolId}' on database '{database}' is not empty ({workers} workers, {active} active allocations): only a drained, empty pool moves. " +
            "Drain its workers, let their allocations end, deregister them, then move it.");

    private static AllocatorException Changed(string poolId) =>
        new(AllocatorErrorKind.Conflict, $"The placement of pool '{poolId}' changed while it was being moved (another move?); read it again and retry.");
}
