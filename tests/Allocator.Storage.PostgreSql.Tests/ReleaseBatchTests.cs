using Npgsql;

namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>
/// Batched release on PostgreSQL with transient retries switched off: a deadlock (40P01) or a
/// lock timeout would reach the caller instead of being retried away.
/// </summary>
/// <remarks>
/// Allocation skips locked rows and never waits, except in its blocking fallback, which waits
/// for rows in score order while holding its earlier picks: against any statement that locks
/// several workers (release or registration batches, in worker id order) that can deadlock, and
/// the store retries it. That fallback is kept out of reach here (many skip retries) so that
/// what is measured is release batches against each other and against skip-locked allocation.
/// </remarks>
public sealed class ReleaseBatchTests : PostgresStoreTestBase
{
    protected override void Configure(PostgresWorkerStoreOptions options)
    {
        options.TransientRetries = 0;
        options.SkipRetries = 100;
    }

    [Fact]
    public async Task OverlappingBatchesInOppositeOrders_WithAllocations_NeverDeadlock()
    {
        await CreatePoolAsync("p", workers: 8, capacity: 200);
        for (var round = 0; round < 5; round++)
        {
            var held = new List<Allocation>();
            foreach (var outcome in await Store.AllocateAsync("p", [.. Enumerable.Range(0, 64).Select(i => new AllocationRequest($"r{round}-{i}", 1 + (i % 3)))]))
            {
                held.Add(outcome.Allocation!);
            }

            // Every allocation is named by two batches, one in request order and one reversed, so
            // without a fixed lock order the two would each hold what the other waits for.
            var releases = held.Select(a => new LeaseRelease(a.AllocationId, a.Epoch)).ToArray();
            var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            var releasers = Enumerable.Range(0, 8).Select(c => Task.Run(async () =>
            {
                await start.Task;
                var batch = c % 2 == 0 ? releases : [.. releases.Reverse()];
                return await Store.ReleaseAsync("p", batch);
            })).ToList();
            var allocators = Enumerable.Range(0, 8).Select(c => Task.Run(async () =>
            {
                await start.Task;
                return await Store.AllocateAsync("p", [.. Enumerable.Range(0, 8).Select(i => new AllocationRequest($"a{round}-{c}-{i}"))]);
            })).ToList();
            start.SetResult();

            var results = await Task.WhenAll(releasers).WaitAsync(TimeSpan.FromSeconds(30));
            await Task.WhenAll(allocators).WaitAsync(TimeSpan.FromSeconds(30));

            // Exactly one Ok per allocation across the eight batches.
            var okIds = results.SelectMany(r => r.Where(x => x.Status == LeaseStatus.Ok).Select(x => x.Allocation!.AllocationId)).ToList();
            okIds.Should().OnlyHaveUniqueItems().And.HaveCount(held.Count);
            await AssertLoadMatchesAllocationsAsync("p");
        }
    }

    [Fact]
    public async Task Batch_NotifiesOncePerStatement_AndOnlyWhenSomethingWasReleased()
    {
        await CreatePoolAsync("p", workers: 2, capacity: 10);
        var outcomes = await Store.AllocateAsync("p", [.. Enumerable.Range(0, 6).Select(i => new AllocationRequest($"s{i}"))]);

        await using var listener = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        var received = new List<string>();
        listener.Notification += (_, e) =>
        {
            lock (received)
            {
                received.Add(e.Payload);
            }
        };
        await using (var listen = new NpgsqlCommand($"LISTEN \"{Store.Channel}\"", listener))
        {
            await listen.ExecuteNonQueryAsync();
        }

        (await Store.ReleaseAsync("p", [new LeaseRelease(Guid.NewGuid(), 1), new LeaseRelease(outcomes[0].Allocation!.AllocationId, 999_999)]))
            .Select(r => r.Status).Should().Equal(LeaseStatus.NotFound, LeaseStatus.StaleEpoch);
        (await Store.ReleaseAsync("p", [.. outcomes.Select(o => new LeaseRelease(o.Allocation!.AllocationId, o.Allocation.Epoch))]))
            .Should().OnlyContain(r => r.Status == LeaseStatus.Ok);

        // A round trip on the listening connection delivers anything already sent to it.
        await using (var ping = new NpgsqlCommand("SELECT 1", listener))
        {
            await ping.ExecuteScalarAsync();
        }

        await Task.Delay(200);
        lock (received)
        {
            received.Should().Equal(["p:c"], "one notification for the batch that released six, none for the batch that released nothing");
        }
    }
}
