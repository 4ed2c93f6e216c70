using Allocator.Grains.Tests.Support;
using Allocator.Storage.PostgreSql;
using Allocator.Storage.PostgreSql.Internal;

using Microsoft.Extensions.DependencyInjection;
using Npgsql;
using Orleans.Configuration;

namespace Allocator.Grains.Tests;

/// <summary>
/// The pool grain over the real PostgreSQL store (ALLOCATOR_POSTGRES), each test in a fresh
/// schema. A missing variable fails the test, never skips it.
/// </summary>
public sealed class PostgresPoolGrainTests
{
    private const string PoolId = GrainHarness.PoolId;

    [Fact]
    public async Task ConcurrentCallers_AreCoalescedIntoFewerBatches_AndSpreadEvenly()
    {
        await using var pg = await PgHarness.CreateAsync(workers: 8, capacity: 16, PoolSettings.Default);
        var store = new CountingStore(pg.Store);
        await using var h = await GrainHarness.CreateAsync(workers: 0, fakeTime: false, store: store);
        var pool = h.Grains.GetPoolGrain(PoolId);

        // Every batch waits at the store's door until all 64 calls are either in a batch or
        // queued behind the batches in flight: the coalescing does not depend on timing.
        store.Hold();
        var calls = Enumerable.Range(0, 64).Select(i => pool.AllocateAsync(new AllocationRequest($"s{i}"), TimeSpan.Zero)).ToList();
        await Wait.UntilAsync(async () => store.RequestsSeen + (await pool.GetStatusAsync()).QueuedAllocations == 64, "all 64 calls to be in a store batch or queued in the grain");
        var batchesWhileHeld = store.Batches.Count;
        store.Open();
        var outcomes = await Wait.ForAsync(Task.WhenAll(calls), "all 64 callers to be answered");

        outcomes.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated, "8 workers x 16 slots hold 64");
        outcomes.Select(o => o.Allocation!.SessionKey).Should().Equal(Enumerable.Range(0, 64).Select(i => $"s{i}"), "each caller gets the outcome of its own request");
        outcomes.Select(o => o.Allocation!.AllocationId).Should().OnlyHaveUniqueItems();
        var batches = store.Batches;
        batches.Sum().Should().Be(64);
        batchesWhileHeld.Should().BeLessThanOrEqualTo(new GrainOptions().MaxBatchesInFlight);
        batches.Should().HaveCountLessThan(64, "concurrent calls are coalesced into store batches")
            .And.HaveCountLessThanOrEqualTo(batchesWhileHeld + 1, "everything queued behind the held batches goes in one more batch");

        var loads = (await pg.Store.GetWorkersAsync(PoolId)).Select(w => w.Load).ToList();
        loads.Sum().Should().Be(64);
        (loads.Max() - loads.Min()).Should().BeLessThanOrEqualTo(1, $"least-loaded allocation spreads 64 over 8 workers evenly (loads {string.Join(",", loads)})");
    }

    [Fact]
    public async Task Waiter_IsWokenByReleaseThroughAnotherStoreInstance()
    {
        await using var pg = await PgHarness.CreateAsync(workers: 1, capacity: 1, new PoolSettings { MaxWait = TimeSpan.FromMinutes(1) });

        // The re-check safety net is slower than the test's limit: only a notification can wake the waiter in time.
        await using var h = await GrainHarness.CreateAsync(workers: 0, fakeTime: false, store: pg.Store, options: new GrainOptions { WaiterRecheckInterval = TimeSpan.FromMinutes(1) });
        var pool = h.Grains.GetPoolGrain(PoolId);
        var holder = (await pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;

        var waiter = pool.AllocateAsync(new AllocationRequest("waiter"), TimeSpan.FromSeconds(30));
        await Wait.UntilAsync(async () => (await pool.GetStatusAsync()).Waiters == 1 || waiter.IsCompleted, "the waiter to be parked");
        waiter.IsCompleted.Should().BeFalse("the pool is full");
        await Task.WhenAny(waiter, Task.Delay(TimeSpan.FromMilliseconds(300)));
        waiter.IsCompleted.Should().BeFalse("nothing has been released yet");

        // Released through a second store on the same schema, as another service instance would.
        var other = await PgHarness.OpenStoreAsync(pg.Schema);
        try
        {
            (await other.ReleaseAsync(PoolId, holder.AllocationId, holder.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        }
        finally
        {
            await ((IAsyncDisposable)other).DisposeAsync();
        }

        var outcome = await TaskLimit.WithinAsync(waiter, TimeSpan.FromSeconds(10), "the waiter to be woken by the release's NOTIFY (the re-check runs only every minute)");
        outcome.Status.Should().Be(AllocationStatus.Allocated);
        outcome.Allocation!.SessionKey.Should().Be("waiter");
        (await pool.GetStatusAsync()).Waiters.Should().Be(0);
        (await pg.Store.GetWorkersAsync(PoolId)).Single().Load.Should().Be(1);
    }

    [Fact]
    public async Task SiloKilledWhileAllocationsFlow_PoolReactivatesOnTheSurvivor_AndLoadMatchesActiveAllocations()
    {
        await using var pg = await PgHarness.CreateAsync(workers: 20, capacity: 10, PoolSettings.Default);
        await using var h = await GrainHarness.CreateAsync(workers: 0, fakeTime: false, store: pg.Store, silos: 2, services: FastFailover);
        var pool = h.Grains.GetPoolGrain(PoolId);
        var hostingSilo = (await pool.GetStatusAsync()).Silo;
        var victim = h.Cluster.Silos.Single(s => s.SiloAddress.ToParsableString() == hostingSilo);
        var survivor = h.Cluster.Silos.Single(s => s != victim);
        var viaSurvivor = survivor.ServiceProvider.GetRequiredService<IGrainFactory>().GetPoolGrain(PoolId);

        // Callers on the surviving silo allocate and release in a loop; every success is recorded.
        using var stop = new CancellationTokenSource();
        var succeeded = new System.Collections.Concurrent.ConcurrentBag<Allocation>();
        var failures = 0;
        var afterKill = 0;
        var killed = false;
        var callers = Enumerable.Range(0, 8).Select(c => Task.Run(async () =>
        {
            for (var i = 0; !stop.IsCancellationRequested; i++)
            {
                try
                {
                    var outcome = await viaSurvivor.AllocateAsync(new AllocationRequest($"c{c}-{i}"), TimeSpan.Zero).WaitAsync(TimeSpan.FromSeconds(20));
                    if (outcome.Allocation is { } allocation)
                    {
                        succeeded.Add(allocation);
                        if (Volatile.Read(ref killed))
                        {
                            Interlocked.Increment(ref afterKill);
                        }

                        if (i % 2 == 0)
                        {
                            await viaSurvivor.ReleaseAsync(allocation.AllocationId, allocation.Epoch).WaitAsync(TimeSpan.FromSeconds(20));
                        }
                    }
                }
                catch (Exception)
                {
                    Interlocked.Increment(ref failures); // calls in flight to the dead silo fail: callers retry with new keys
                }
            }
        })).ToList();

        await Wait.UntilAsync(() => succeeded.Count >= 50, "allocations to flow through the surviving silo");
        await h.Cluster.KillSiloAsync(victim);
        Volatile.Write(ref killed, true);
        await Wait.UntilAsync(() => Volatile.Read(ref afterKill) >= 50, "allocations to succeed again once the pool grain re-activated on the survivor");
        await stop.CancelAsync();
        await Task.WhenAll(callers);

        (await viaSurvivor.GetStatusAsync()).Silo.Should().Be(survivor.SiloAddress.ToParsableString());

        // The database is the truth: every reported success is committed, and loads add up.
        foreach (var allocation in succeeded)
        {
            (await pg.Store.GetAllocationAsync(PoolId, allocation.AllocationId)).Should().NotBeNull($"allocation {allocation.AllocationId} was reported as made");
        }

        var statistics = await pg.Store.GetPoolStatisticsAsync(PoolId);
        statistics.Load.Should().Be(statistics.ActiveAllocations, "every allocation holds one unit: load equals the units of active allocations");
        (await pg.Store.GetWorkersAsync(PoolId)).Should().OnlyContain(w => w.Load >= 0 && w.Load <= w.Capacity);
    }

    /// <summary>Membership probing tuned so that a killed silo is declared dead within seconds.</summary>
    private static void FastFailover(IServiceCollection services) =>
        services.Configure<ClusterMembershipOptions>(o =>
        {
            o.ProbeTimeout = TimeSpan.FromSeconds(1);
            o.NumMissedProbesLimit = 2;
            o.NumVotesForDeathDeclaration = 1;
        });

    /// <summary>A PostgreSQL store in a fresh schema with one pool; drops the schema on dispose.</summary>
    private sealed class PgHarness : IAsyncDisposable
    {
        private PgHarness(string schema, IWorkerStore store)
        {
            Schema = schema;
            Store = store;
        }

        public string Schema { get; }

        public IWorkerStore Store { get; }

        private static string ConnectionString =>
            Environment.GetEnvironmentVariable("ALLOCATOR_POSTGRES") is { Length: > 0 } value
                ? value
                : throw new InvalidOperationException(
                    "Environment variable ALLOCATOR_POSTGRES is not set. Start PostgreSQL with eng/postgres.sh and export its connection string, " +
                    "e.g. ALLOCATOR_POSTGRES=\"Host=127.0.0.1;Port=55432;Username=postgres;Database=allocator\".");

        public static async Task<PgHarness> CreateAsync(int workers, int capacity, PoolSettings settings)
        {
            var schema = "g_" + Guid.NewGuid().ToString("N")[..16];
            var store = await OpenStoreAsync(schema);
            var harness = new PgHarness(schema, store);
            try
            {
                await store.UpsertPoolAsync(PoolId, settings);
                await store.RegisterWorkersAsync(PoolId, [.. Enumerable.Range(0, workers).Select(i => new WorkerRegistration($"w{i}", $"10.0.0.{i}:7000", capacity))]);
                return harness;
            }
            catch
            {
                await harness.DisposeAsync();
                throw;
            }
        }

        public static async Task<IWorkerStore> OpenStoreAsync(string schema) =>
            await PostgresWorkerStore.CreateAsync(new PostgresWorkerStoreOptions { ConnectionString = ConnectionString, Schema = schema });

        public async ValueTask DisposeAsync()
        {
            if (Store is IAsyncDisposable disposable)
            {
                await disposable.DisposeAsync();
            }

            await using var dataSource = NpgsqlDataSource.Create(ConnectionString);
            await using var command = dataSource.CreateCommand($"DROP SCHEMA IF EXISTS \"{Schema}\" CASCADE");
            await command.ExecuteNonQueryAsync();
        }
    }

    /// <summary>Counts allocation batches (and their sizes) on their way to any store; can hold them at the door.</summary>
    private sealed class CountingStore(IWorkerStore inner) : IWorkerStore, IPoolChangeFeed
    {
        private readonly object _sync = new();
        private readonly List<int> _batches = [];
        private readonly SemaphoreSlim _oneAtATime = new(1, 1);
        private TaskCompletionSource _door = Opened();

        public string Name => inner.Name;

        public int? ConnectionLimit => inner.ConnectionLimit;

        public IReadOnlyList<int> Batches
        {
            get
            {
                lock (_sync)
                {
                    return [.. _batches];
                }
            }
        }

        public int RequestsSeen
        {
            get
            {
                lock (_sync)
                {
                    return _batches.Sum();
                }
            }
        }

        public void Hold()
        {
            lock (_sync)
            {
                _door = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            }
        }

        public void Open()
        {
            lock (_sync)
            {
                _door.TrySetResult();
            }
        }

        public async Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken = default)
        {
            Task door;
            lock (_sync)
            {
                _batches.Add(requests.Count);
                door = _door.Task;
            }

            await door.WaitAsync(cancellationToken);

            // One batch in the database at a time: each commits before the next picks, so the
            // spread checked below is the water filling's, not skip-locked contention's (that is
            // the conformance suite's and the load tests' business).
            await _oneAtATime.WaitAsync(cancellationToken);
            try
            {
                return await inner.AllocateAsync(poolId, requests, cancellationToken);
            }
            finally
            {
                _oneAtATime.Release();
            }
        }

        public Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken = default) => inner.UpsertPoolAsync(poolId, settings, cancellationToken);

        public Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken = default) => inner.GetPoolAsync(poolId, cancellationToken);

        public Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken = default) => inner.GetPoolStatisticsAsync(poolId, cancellationToken);

        public Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken = default) => inner.RegisterWorkersAsync(poolId, workers, cancellationToken);

        public Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default) => inner.DeregisterWorkerAsync(poolId, workerId, cancellationToken);

        public Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken = default) => inner.SetWorkerStateAsync(poolId, workerId, state, cancellationToken);

        public Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken = default) => inner.ReportLoadAsync(poolId, workerId, epoch, loadIndex, cancellationToken);

        public Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default) => inner.GetWorkerAsync(poolId, workerId, cancellationToken);

        public Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken = default) => inner.GetWorkersAsync(poolId, cancellationToken);

        public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken = default) => inner.ReleaseAsync(poolId, allocationId, epoch, cancellationToken);

        public Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken = default) => inner.ReleaseAsync(poolId, releases, cancellationToken);

        public Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner = null, CancellationToken cancellationToken = default) => inner.RenewAsync(poolId, allocationId, epoch, lease, owner, cancellationToken);

        public Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken = default) => inner.GetAllocationAsync(poolId, allocationId, cancellationToken);

        public Task<Allocation?> GetAllocationByKeyAsync(string poolId, string sessionKey, string? owner, CancellationToken cancellationToken = default) => inner.GetAllocationByKeyAsync(poolId, sessionKey, owner, cancellationToken);

        public Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken = default) => inner.ReapExpiredAsync(maxCount, cancellationToken);

        public IDisposable Subscribe(Action<PoolChanged> handler) => ((IPoolChangeFeed)inner).Subscribe(handler);

        private static TaskCompletionSource Opened()
        {
            var opened = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            opened.SetResult();
            return opened;
        }
    }
}
