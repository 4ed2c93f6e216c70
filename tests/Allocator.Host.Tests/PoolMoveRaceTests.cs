using System.Collections.Concurrent;
using Allocator.Host.Storage;
using Allocator.Storage.InMemory;

namespace Allocator.Host.Tests;

/// <summary>
/// Issue 39, hypotheses 6 and 7: moves, a cancel and a PUT of one pool racing each other through
/// the routing store of a host with two databases (two in-memory reference stores, the default
/// <c>a</c> holding the directory). Each interleaving is fixed by gates, so each runs the same way
/// every time. Whatever happens, the pool ends in exactly one database, the one the directory names.
/// </summary>
public sealed class PoolMoveRaceTests : IDisposable
{
    private static readonly AsyncLocal<string?> Caller = new();
    private readonly InMemoryWorkerStore _a = new(TimeProvider.System);
    private readonly InMemoryWorkerStore _b = new(TimeProvider.System);
    private readonly ConcurrentDictionary<string, Gate> _gates = new(StringComparer.Ordinal);
    private readonly RoutingWorkerStore _routing;

    public PoolMoveRaceTests()
    {
        _routing = new RoutingWorkerStore(new Databases([Of("a", _a, isDefault: true), Of("b", _b, isDefault: false)]));
    }

    [Fact]
    public async Task TwoIdenticalMoves_OneOverlappingTheOther_LeaveThePoolOnTheTarget()
    {
        var pool = await CreateOnAAsync("two-moves");
        var first = GateAt("first", "upsert:b");
        var second = GateAt("second", "remove:a");

        // The first move marks the pool and reads it; the second (resent by an operator) finds the
        // mark, copies the pool to b and is about to remove it from a when the first goes on.
        var firstMove = Run("first", () => _routing.MoveAsync(pool, "b", CancellationToken.None));
        await first.Reached;
        var secondMove = Run("second", () => _routing.MoveAsync(pool, "b", CancellationToken.None));
        await second.Reached;
        first.Go();
        (await firstMove).Moved.Should().BeTrue();
        second.Go();
        var answer = await Outcome(secondMove);

        await AssertInOneDatabaseAsync(pool, "b");
        answer.Should().Be("moved to b", "the second move finds the pool moved: the same outcome as the first");
    }

    [Fact]
    public async Task MoveAndCancel_Racing_LeaveThePoolWhereTheDirectorySays()
    {
        var pool = await CreateOnAAsync("move-cancel");
        var move = GateAt("move", "remove:a");

        // The move has copied the pool to b and is about to remove it from a when a cancel comes.
        var moving = Run("move", () => _routing.MoveAsync(pool, "b", CancellationToken.None));
        await move.Reached;
        var cancel = await Outcome(Run("cancel", () => _routing.MoveAsync(pool, "a", CancellationToken.None)));
        move.Go();
        var moved = await Outcome(moving);

        var where = await AssertInOneDatabaseAsync(pool, expected: null);
        (where == "a" ? cancel : moved).Should().NotStartWith("failed", $"the pool is on {where}: the call that put it there says so (move: {moved}; cancel: {cancel})");
    }

    [Fact]
    public async Task PutRacingAMove_DoesNotRecreateThePoolInTheOldDatabase()
    {
        var pool = await CreateOnAAsync("put-move");
        var put = GateAt("put", "upsert:a");

        // A PUT of the pool's settings has read the directory (a) when the move runs from start to end.
        var putting = Run("put", async () => (await _routing.UpsertPoolAsync(pool, new PoolSettings { MaxWait = TimeSpan.FromSeconds(3) }, database: null, CancellationToken.None)).Database);
        await put.Reached;
        (await _routing.MoveAsync(pool, "b", CancellationToken.None)).Moved.Should().BeTrue();
        put.Go();
        var answer = await Outcome(putting);

        await AssertInOneDatabaseAsync(pool, "b");
        answer.Should().BeOneOf(["b", "failed: Unavailable"], "the PUT either reached the pool where it now lives or was told to retry, nothing was written");
    }

    public void Dispose() => _routing.Dispose();

    private async Task<string> CreateOnAAsync(string name)
    {
        var pool = $"{name}-{Guid.NewGuid().ToString("N")[..8]}";
        (await _routing.UpsertPoolAsync(pool, PoolSettings.Default, "a", CancellationToken.None)).Database.Should().Be("a");
        return pool;
    }

    /// <summary>The pool is in exactly one database, the one the directory names (and, if given, the expected one).</summary>
    private async Task<string> AssertInOneDatabaseAsync(string pool, string? expected)
    {
        var inA = await _a.GetPoolAsync(pool) is not null;
        var inB = await _b.GetPoolAsync(pool) is not null;
        var entry = await _a.GetPlacementAsync(pool);
        (inA ^ inB).Should().BeTrue($"the pool is in exactly one database (in a: {inA}, in b: {inB}; directory: {entry})");
        var where = inA ? "a" : "b";
        entry.Should().NotBeNull();
        entry!.MovingTo.Should().BeNull("no move is left half-done");
        entry.Database.Should().Be(where, "the directory names the database that has the pool");
        if (expected is not null)
        {
            where.Should().Be(expected);
        }

        return where;
    }

    private Database Of(string name, InMemoryWorkerStore store, bool isDefault) =>
        new(name, isDefault, new StoreFaultTests.FaultyStore(store) { BeforeUpsert = _ => PassAsync($"upsert:{name}") }, store, store, new GatedPlacement(store, () => PassAsync($"remove:{name}")));

    private Gate GateAt(string caller, string step) => _gates[$"{caller}/{step}"] = new Gate();

    private Task PassAsync(string step) =>
        Caller.Value is { } caller && _gates.TryRemove($"{caller}/{step}", out var gate) ? gate.PassAsync() : Task.CompletedTask;

    private static Task<T> Run<T>(string caller, Func<Task<T>> call) => Task.Run(() =>
    {
        Caller.Value = caller;
        return call();
    });

    private static async Task<string> Outcome(Task<PoolMove> move)
    {
        try
        {
            var done = await move.WaitAsync(TimeSpan.FromSeconds(30));
            return done.Moved ? $"moved to {done.To}" : $"stays on {done.To}";
        }
        catch (AllocatorException ex)
        {
            return $"failed: {ex.Kind}";
        }
    }

    private static async Task<string> Outcome(Task<string> put)
    {
        try
        {
            return await put.WaitAsync(TimeSpan.FromSeconds(30));
        }
        catch (AllocatorException ex)
        {
            return $"failed: {ex.Kind}";
        }
    }

    /// <summary>A point a caller reaches and waits at until the test lets it go.</summary>
    private sealed class Gate
    {
        private readonly TaskCompletionSource _reached = new(TaskCreationOptions.RunContinuationsAsynchronously);
        private readonly TaskCompletionSource _go = new(TaskCreationOptions.RunContinuationsAsynchronously);

        public Task Reached => _reached.Task.WaitAsync(TimeSpan.FromSeconds(30));

        public void Go() => _go.TrySetResult();

        public async Task PassAsync()
        {
            _reached.TrySetResult();
            await _go.Task.WaitAsync(TimeSpan.FromSeconds(30));
        }
    }

    /// <summary>The store's directory and pool removal, with a gate before each removal.</summary>
    private sealed class GatedPlacement(IPoolPlacementStore inner, Func<Task> beforeRemove) : IPoolPlacementStore
    {
        public Task InitializeAsync(CancellationToken cancellationToken = default) => inner.InitializeAsync(cancellationToken);

        public Task<PoolPlacement?> GetPlacementAsync(string poolId, CancellationToken cancellationToken = default) => inner.GetPlacementAsync(poolId, cancellationToken);

        public Task<bool> ReplacePlacementAsync(PoolPlacement? expected, PoolPlacement replacement, CancellationToken cancellationToken = default) =>
            inner.ReplacePlacementAsync(expected, replacement, cancellationToken);

        public Task<IReadOnlyDictionary<string, long>> CountPoolsAsync(string defaultDatabase, CancellationToken cancellationToken = default) =>
            inner.CountPoolsAsync(defaultDatabase, cancellationToken);

        public async Task<PoolRemoval> RemovePoolIfEmptyAsync(string poolId, CancellationToken cancellationToken = default)
        {
            await beforeRemove();
            return await inner.RemovePoolIfEmptyAsync(poolId, cancellationToken);
        }
    }
}
