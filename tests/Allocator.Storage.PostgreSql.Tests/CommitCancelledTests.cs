namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>
/// A statement whose commit is cancelled after its rows were sent is not reported as done
/// (<c>StatementEnd</c>). A rolling restart on a machine that stalled for three seconds answered
/// a release 204 whose allocation stayed active: the command timeout fired while the release's
/// transaction was committing, the server rolled it back, and the rows it had already sent were
/// taken for the outcome. Here a deferred constraint trigger holds the commit (as a stall would)
/// past the command timeout.
/// </summary>
public sealed class CommitCancelledTests : PostgresStoreTestBase
{
    protected override void Configure(PostgresWorkerStoreOptions options)
    {
        options.LockTimeout = TimeSpan.FromMilliseconds(500);
        options.CommandTimeout = TimeSpan.FromSeconds(1);
        options.TransientRetries = 0;
    }

    [Fact]
    public async Task Release_CommitHeldPastTheCommandTimeout_IsOutcomeUnknown_NotReleased_AndTheAllocationStaysActive()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 2);
        var allocation = (await Store.AllocateAsync("p", [new AllocationRequest("k", 1, null, TimeSpan.FromMinutes(5))]))[0].Allocation!;
        await HoldCommitsOfAsync("allocation_history");

        var release = async () => await Store.ReleaseAsync("p", [new LeaseRelease(allocation.AllocationId, allocation.Epoch)]);

        (await release.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue("the statement may or may not have committed as far as the store can tell");
        (await Store.GetAllocationAsync("p", allocation.AllocationId))!.IsActive.Should().BeTrue("the release was rolled back");
    }

    [Fact]
    public async Task Allocate_CommitHeldPastTheCommandTimeout_IsOutcomeUnknown_NotAllocated()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 2);
        await HoldCommitsOfAsync("allocations");

        var allocate = async () => await Store.AllocateAsync("p", [new AllocationRequest("k", 1, null, TimeSpan.FromMinutes(5))]);

        (await allocate.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue();
        (await Store.GetWorkersAsync("p")).Single().Load.Should().Be(0, "the allocation was rolled back");
    }

    /// <summary>Every commit that inserted into <paramref name="table"/> waits 3 s in a deferred constraint trigger, after the statement's rows were sent.</summary>
    private async Task HoldCommitsOfAsync(string table) => await PostgresTestDatabase.ExecuteAsync($"""
        CREATE FUNCTION "{Schema}".hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$;
        CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON "{Schema}".{table}
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "{Schema}".hold_commit();
        """);
}
