namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>
/// allocate_batch serves a batch of alike requests with one set statement (Functions/allocate_batch.sql) and
/// everything else request by request. The two must decide alike: these tests run the same
/// requests through both, on identical random pools, and compare every pick.
/// </summary>
public sealed class SetPathTests : PostgresStoreTestBase
{
    public static TheoryData<int> Seeds() => [.. Enumerable.Range(1, 12)];

    [Theory]
    [MemberData(nameof(Seeds))]
    public Task AlikeBatch_PicksWhatRequestsOneAtATimePick(int seed) => CompareWithOneAtATimeAsync(seed, PoolSettings.Default);

    [Theory]
    [MemberData(nameof(Seeds))]
    public Task AlikePackBatch_PicksWhatRequestsOneAtATimePick(int seed) => CompareWithOneAtATimeAsync(seed, new PoolSettings { Placement = Placement.Pack });

    private async Task CompareWithOneAtATimeAsync(int seed, PoolSettings settings)
    {
        var random = new Random(seed);
        var workers = random.Next(1, 40);
        var units = random.Next(1, 4);
        var count = random.Next(2, 65);
        var capacities = Enumerable.Range(0, workers).Select(_ => random.Next(1, 12)).ToArray();
        var loads = capacities.Select(c => random.Next(0, c + 1)).ToArray();
        var reported = capacities.Select(_ => random.Next(4) == 0 ? random.Next(0, 10001) : (int?)null).ToArray();
        await CreateAlikePoolAsync("batch", capacities, loads, reported, settings);
        await CreateAlikePoolAsync("single", capacities, loads, reported, settings);

        var requests = Enumerable.Range(0, count).Select(i => new AllocationRequest($"s{i}", units)).ToList();
        var batched = await Store.AllocateAsync("batch", requests);
        var oneByOne = new List<AllocationOutcome>();
        foreach (var request in requests)
        {
            oneByOne.AddRange(await Store.AllocateAsync("single", [request]));
        }

        batched.Select(Describe).Should().Equal(oneByOne.Select(Describe), $"seed {seed}, {settings.Placement.ToName()}: {workers} workers, {count} requests of {units}");
        await AssertLoadMatchesAllocationsAsync("batch");
        await AssertLoadMatchesAllocationsAsync("single");
    }

    [Fact]
    public async Task AlikeBatch_WithActiveKeys_AnswersThemExistingAndAllocatesTheRest()
    {
        await CreatePoolAsync("p", workers: 3, capacity: 10);
        var first = await Store.AllocateAsync("p", [new AllocationRequest("a"), new AllocationRequest("b")]);

        var outcomes = await Store.AllocateAsync("p", [new AllocationRequest("c"), new AllocationRequest("a"), new AllocationRequest("d"), new AllocationRequest("b")]);

        outcomes.Select(o => o.Status).Should().Equal(AllocationStatus.Allocated, AllocationStatus.Existing, AllocationStatus.Allocated, AllocationStatus.Existing);
        outcomes[1].Allocation!.AllocationId.Should().Be(first[0].Allocation!.AllocationId);
        outcomes[3].Allocation!.AllocationId.Should().Be(first[1].Allocation!.AllocationId);
        // Water filling continues from the first batch: w000, w001 taken, so c then d go to w002, w000.
        outcomes[0].Allocation!.WorkerId.Should().Be("w002");
        outcomes[2].Allocation!.WorkerId.Should().Be("w000");
        await AssertLoadMatchesAllocationsAsync("p");
    }

    [Fact]
    public async Task AlikeBatch_LargerThanThePool_FillsItAndAnswersTheRestNoCapacity()
    {
        await CreatePoolAsync("p", workers: 3, capacity: 2);

        var outcomes = await Store.AllocateAsync("p", [.. Enumerable.Range(0, 8).Select(i => new AllocationRequest($"s{i}"))]);

        outcomes.Take(6).Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
        outcomes.Skip(6).Should().OnlyContain(o => o.Status == AllocationStatus.NoCapacity);
        outcomes.Take(6).Select(o => o.Allocation!.WorkerId).Should().Equal("w000", "w001", "w002", "w000", "w001", "w002");
        outcomes.Take(6).Select(o => o.Allocation!.Epoch).Should().BeInAscendingOrder("epochs follow request order");
        await AssertLoadMatchesAllocationsAsync("p");
    }

    [Fact]
    public async Task AlikeBatch_SkipsRowsLockedByOthers()
    {
        await CreatePoolAsync("p", workers: 4, capacity: 10);
        await using var connection = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        await using var transaction = await connection.BeginTransactionAsync();
        await using (var hold = new Npgsql.NpgsqlCommand($"""SELECT 1 FROM "{Schema}".workers WHERE worker_id IN ('w000', 'w001') FOR NO KEY UPDATE""", connection, transaction))
        {
            await hold.ExecuteNonQueryAsync();
        }

        var outcomes = await Store.AllocateAsync("p", [new AllocationRequest("a"), new AllocationRequest("b"), new AllocationRequest("c")]);

        outcomes.Select(o => o.Allocation!.WorkerId).Should().Equal("w002", "w003", "w002");
        outcomes[0].Decision.RowsSkipped.Should().Be(2, "the two locked least-loaded rows were passed over");
        outcomes[0].Decision.ExcessScore.Should().Be(0, "w002 scored as low as the skipped rows");
        outcomes[2].Decision.ExcessScore.Should().Be(WorkerScore.Full / 10, "the third pick saw w002 at 1/10 while the skipped rows were at 0");
        await transaction.RollbackAsync();
        await AssertLoadMatchesAllocationsAsync("p");
    }

    [Fact]
    public async Task AlikePackBatch_SkipsRowsLockedByOthers_AndSaysSo()
    {
        await Store.UpsertPoolAsync("p", new PoolSettings { Placement = Placement.Pack });
        await Store.RegisterWorkersAsync("p", [.. Enumerable.Range(0, 4).Select(i => new WorkerRegistration($"w{i:D3}", $"10.0.0.{i}:7000", 3))]);
        await using var connection = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        await using var transaction = await connection.BeginTransactionAsync();
        await using (var hold = new Npgsql.NpgsqlCommand($"""SELECT 1 FROM "{Schema}".workers WHERE worker_id IN ('w003', 'w002') FOR NO KEY UPDATE""", connection, transaction))
        {
            await hold.ExecuteNonQueryAsync();
        }

        var outcomes = await Store.AllocateAsync("p", [new AllocationRequest("a"), new AllocationRequest("b"), new AllocationRequest("c"), new AllocationRequest("d")]);

        outcomes.Select(o => o.Allocation!.WorkerId).Should().Equal(["w001", "w001", "w001", "w000"], "the two rows first in pack order are locked; w001 is filled, then w000");
        outcomes[0].Decision.RowsSkipped.Should().Be(2, "the two locked rows ahead in pack order were passed over");
        outcomes[0].Decision.ExcessScore.Should().Be(0, "w001 scored as high as the skipped rows");
        await transaction.RollbackAsync();
        await AssertLoadMatchesAllocationsAsync("p");
    }

    private async Task CreateAlikePoolAsync(string poolId, int[] capacities, int[] loads, int?[] reported, PoolSettings settings)
    {
        await Store.UpsertPoolAsync(poolId, settings);
        await Store.RegisterWorkersAsync(poolId, [.. capacities.Select((c, i) => new WorkerRegistration($"w{i:D3}", $"10.0.0.{i}:7000", c))]);
        for (var i = 0; i < capacities.Length; i++)
        {
            // Load straight into the row (with matching allocation rows, so the invariant holds):
            // the pools start uneven, as a live pool is.
            await PostgresTestDatabase.ExecuteAsync($"""
                UPDATE "{Schema}".workers SET load = {loads[i]}, reported_load_index = {reported[i]?.ToString(System.Globalization.CultureInfo.InvariantCulture) ?? "NULL"}
                 WHERE pool_id = '{poolId}' AND worker_id = 'w{i:D3}';
                INSERT INTO "{Schema}".allocations (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at)
                SELECT gen_random_uuid(), '{poolId}', 'w{i:D3}', 'x', 'pre-{i}-' || g, 1, 0, now() FROM generate_series(1, {loads[i]}) g;
                """);
        }
    }

    private static string Describe(AllocationOutcome outcome) => $"{outcome.Status} {outcome.Allocation?.WorkerId}";
}
