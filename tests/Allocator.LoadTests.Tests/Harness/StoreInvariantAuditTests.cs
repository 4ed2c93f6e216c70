using Allocator.Storage.InMemory;
using Allocator.LoadTests.Audit;
using Allocator.LoadTests.Scenarios;

namespace Allocator.LoadTests.Tests.Harness;

public sealed class StoreInvariantAuditTests
{
    [Fact]
    public async Task Audit_ConsistentRun_Passes()
    {
        var (store, ledger) = await ArrangeAsync(allocations: 30);

        var result = await StoreInvariantAudit.AuditAsync(store, "p", ledger, CancellationToken.None);

        result.Passed.Should().BeTrue();
    }

    [Fact]
    public async Task Audit_ReplyWithoutRow_IsAViolation()
    {
        var (store, ledger) = await ArrangeAsync(allocations: 5);
        ledger.RecordReply(new AllocationOutcome(AllocationStatus.Allocated, new Allocation
        {
            AllocationId = Guid.NewGuid(),
            PoolId = "p",
            WorkerId = "w000000",
            Address = "",
            SessionKey = "ghost",
            Units = 1,
            Epoch = 1,
            CreatedAt = default,
        }, default));

        var result = await StoreInvariantAudit.AuditAsync(store, "p", ledger, CancellationToken.None);

        result.Passed.Should().BeFalse();
        result.Violations.Should().ContainSingle(v => v.Check == "reply-without-row");
    }

    [Fact]
    public async Task Audit_AllocationTheRunDidNotRecord_IsAViolation()
    {
        var (store, ledger) = await ArrangeAsync(allocations: 5);
        await store.AllocateAsync("p", [new AllocationRequest("untracked")]);

        var result = await StoreInvariantAudit.AuditAsync(store, "p", ledger, CancellationToken.None);

        result.Passed.Should().BeFalse();
        result.Violations.Select(v => v.Check).Should().Contain(["load-mismatch", "untracked-allocations"]);
    }

    private static async Task<(IWorkerStore Store, AllocationLedger Ledger)> ArrangeAsync(int allocations)
    {
        var store = new InMemoryWorkerStore();
        await PoolProvisioning.ProvisionAsync(store, "p", new PoolShape(4, 20, AllocationStrategy.SkipLocked), CancellationToken.None);
        var ledger = new AllocationLedger();
        for (var i = 0; i < allocations; i++)
        {
            var outcome = (await store.AllocateAsync("p", [new AllocationRequest($"s{i}")]))[0];
            ledger.RecordReply(outcome);
            if (i % 3 == 0)
            {
                await store.ReleaseAsync("p", outcome.Allocation!.AllocationId, outcome.Allocation.Epoch);
                ledger.RecordRelease(outcome.Allocation.AllocationId);
            }
        }

        return (store, ledger);
    }
}
