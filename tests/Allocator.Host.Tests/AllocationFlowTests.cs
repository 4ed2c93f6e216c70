using System.Net;
using Allocator.Client;

namespace Allocator.Host.Tests;

[Collection(SharedHostCollection.Name)]
public sealed class AllocationFlowTests(SharedHostFixture fixture)
{
    private readonly TestHost _host = fixture.Host;

    private async Task<string> NewPoolAsync(string name, int workers, int capacity, Client.PoolSettings? settings = null)
    {
        var pool = name + "-" + Guid.NewGuid().ToString("N")[..12];
        await _host.Admin.PutPoolAsync(pool, settings ?? new Client.PoolSettings());
        var entries = Enumerable.Range(1, workers).Select(i => new WorkerBatchEntry($"w{i}", $"10.0.0.{i}:7000", capacity)).ToList();
        if (entries.Count > 0)
        {
            var results = await _host.Admin.RegisterWorkersAsync(pool, entries);
            results.Should().OnlyContain(r => r.Status == "created");
        }

        return pool;
    }

    [Fact]
    public async Task Allocate_ThenRelease_FreesTheSlot()
    {
        var pool = await NewPoolAsync("flow", workers: 2, capacity: 2);

        var result = await _host.Broker.AllocateAsync(pool, new AllocateRequest { Units = 1 }, "session-1");

        result.Status.Should().Be(AllocateStatus.Allocated);
        var allocation = result.Allocation!;
        allocation.WorkerId.Should().Be("w1", "ties are broken by worker id");
        allocation.Address.Should().Be("10.0.0.1:7000");
        allocation.Epoch.Should().BePositive();
        (await _host.Broker.GetPoolAsync(pool)).Load.Should().Be(1);
        (await _host.Broker.GetAllocationAsync(pool, allocation.AllocationId)).Active.Should().BeTrue();

        await _host.Broker.ReleaseAsync(pool, allocation.AllocationId, allocation.Epoch);

        var stats = await _host.Broker.GetPoolAsync(pool);
        stats.Load.Should().Be(0);
        stats.ActiveAllocations.Should().Be(0);
        (await _host.Broker.GetAllocationAsync(pool, allocation.AllocationId)).Active.Should().BeFalse();
    }

    [Fact]
    public async Task Allocate_SpreadsOverLeastLoadedWorkers()
    {
        var pool = await NewPoolAsync("spread", workers: 3, capacity: 4);

        var workers = new List<string>();
        for (var i = 0; i < 6; i++)
        {
            workers.Add((await _host.Broker.AllocateAsync(pool, new AllocateRequest(), $"s{i}")).Allocation!.WorkerId);
        }

        workers.GroupBy(w => w).Should().HaveCount(3).And.OnlyContain(g => g.Count() == 2);
        (await _host.Broker.GetPoolAsync(pool)).LoadSpread.Should().Be(0);
    }

    [Fact]
    public async Task Allocate_SameIdempotencyKey_ReturnsTheSameAllocation()
    {
        var pool = await NewPoolAsync("idem", workers: 2, capacity: 5);

        var first = await _host.Broker.AllocateAsync(pool, new AllocateRequest { Units = 2 }, "retry-me");
        var second = await _host.Broker.AllocateAsync(pool, new AllocateRequest { Units = 2 }, "retry-me");

        first.Status.Should().Be(AllocateStatus.Allocated);
        second.Status.Should().Be(AllocateStatus.Existing);
        second.Allocation!.AllocationId.Should().Be(first.Allocation!.AllocationId);
        (await _host.Broker.GetPoolAsync(pool)).Load.Should().Be(2);
    }

    [Fact]
    public async Task Allocate_SessionKeyInBody_WorksLikeTheHeader()
    {
        var pool = await NewPoolAsync("body-key", workers: 1, capacity: 5);
        using var content = JsonContent("{\"sessionKey\":\"k-body\",\"units\":1}");

        var first = await _host.Http.PostAsync($"v1/pools/{pool}/allocations", content);
        using var again = JsonContent("{\"units\":1}");
        using var request = new HttpRequestMessage(HttpMethod.Post, $"v1/pools/{pool}/allocations") { Content = again };
        request.Headers.Add("Idempotency-Key", "k-body");
        var second = await _host.Http.SendAsync(request);

        first.StatusCode.Should().Be(HttpStatusCode.Created);
        first.Headers.Location.Should().NotBeNull();
        second.StatusCode.Should().Be(HttpStatusCode.OK);
        (await _host.Broker.GetPoolAsync(pool)).ActiveAllocations.Should().Be(1);
    }

    [Fact]
    public async Task Allocate_WhenFull_AnswersNoCapacityWithoutException()
    {
        var pool = await NewPoolAsync("full", workers: 1, capacity: 1);
        (await _host.Broker.AllocateAsync(pool, new AllocateRequest(), "a")).Status.Should().Be(AllocateStatus.Allocated);

        var result = await _host.Broker.AllocateAsync(pool, new AllocateRequest(), "b");

        result.Status.Should().Be(AllocateStatus.NoCapacity);
        result.Allocation.Should().BeNull();
        result.Detail.Should().Contain(pool);
    }

    [Fact]
    public async Task Renew_AdvancesEpoch_AndTheOldEpochIsStale()
    {
        var pool = await NewPoolAsync("renew", workers: 1, capacity: 2);
        var allocation = (await _host.Broker.AllocateAsync(pool, new AllocateRequest { LeaseSeconds = 60 }, "lease")).Allocation!;
        allocation.ExpiresAt.Should().NotBeNull();

        var renewed = await _host.Broker.RenewAsync(pool, allocation.AllocationId, allocation.Epoch, leaseSeconds: 3600);

        renewed.Epoch.Should().BeGreaterThan(allocation.Epoch);
        renewed.ExpiresAt.Should().BeAfter(allocation.ExpiresAt!.Value);
        var stale = await FluentActions.Awaiting(() => _host.Broker.ReleaseAsync(pool, allocation.AllocationId, allocation.Epoch))
            .Should().ThrowAsync<AllocatorApiException>();
        stale.Which.Type.Should().Be(ProblemTypes.StaleEpoch);
        stale.Which.StatusCode.Should().Be(HttpStatusCode.Conflict);
        await _host.Broker.ReleaseAsync(pool, allocation.AllocationId, renewed.Epoch);
        (await _host.Broker.GetPoolAsync(pool)).Load.Should().Be(0);
    }

    [Fact]
    public async Task Drain_StopsNewAllocations_UndrainResumes()
    {
        var pool = await NewPoolAsync("drain", workers: 2, capacity: 10);

        await _host.Admin.DrainWorkerAsync(pool, "w1");
        var workers = new HashSet<string>();
        for (var i = 0; i < 4; i++)
        {
            workers.Add((await _host.Broker.AllocateAsync(pool, new AllocateRequest(), $"d{i}")).Allocation!.WorkerId);
        }

        workers.Should().BeEquivalentTo(["w2"]);
        (await _host.Admin.GetWorkerAsync(pool, "w1")).State.Should().Be("draining");
        await _host.Admin.UndrainWorkerAsync(pool, "w1");
        (await _host.Broker.AllocateAsync(pool, new AllocateRequest(), "after")).Allocation!.WorkerId.Should().Be("w1");
    }

    [Fact]
    public async Task PutPool_SwitchesStrategy_AndStatisticsShowIt()
    {
        var pool = await NewPoolAsync("strategy", workers: 2, capacity: 3);
        (await _host.Broker.GetPoolAsync(pool)).Strategy.Should().Be("skip-locked");

        var updated = await _host.Admin.PutPoolAsync(pool, new Client.PoolSettings { Strategy = "strict", MaxWaitMs = 500 });

        updated.Strategy.Should().Be("strict");
        var stats = await _host.Broker.GetPoolAsync(pool);
        stats.Strategy.Should().Be("strict");
        stats.MaxWaitMs.Should().Be(500);
        stats.Workers.Should().Be(2);
        for (var i = 0; i < 6; i++)
        {
            (await _host.Broker.AllocateAsync(pool, new AllocateRequest(), $"st{i}")).Status.Should().Be(AllocateStatus.Allocated);
        }

        (await _host.Broker.GetPoolAsync(pool)).FreeSlots.Should().Be(0);
    }

    [Fact]
    public async Task PutPool_Pack_FillsTheFullestWorkerFirst_AndTheSettingReadsBack()
    {
        var pool = await NewPoolAsync("pack", workers: 3, capacity: 2);
        (await _host.Broker.GetPoolAsync(pool)).Placement.Should().Be("spread");

        var updated = await _host.Admin.PutPoolAsync(pool, new Client.PoolSettings { Placement = "pack" });

        updated.Placement.Should().Be("pack");
        (await _host.Broker.GetPoolAsync(pool)).Placement.Should().Be("pack");
        var picks = new List<string>();
        for (var i = 0; i < 6; i++)
        {
            picks.Add((await _host.Broker.AllocateAsync(pool, new AllocateRequest(), $"pk{i}")).Allocation!.WorkerId);
        }

        picks.Should().Equal(["w3", "w3", "w2", "w2", "w1", "w1"], "pack fills one worker before the next (idle ties: the highest id)");
    }

    [Fact]
    public async Task Workers_RegisterReportLoadAndDeregister()
    {
        var pool = await NewPoolAsync("workers", workers: 0, capacity: 1);
        var created = await _host.Admin.RegisterWorkerAsync(pool, "solo", new Client.WorkerRegistration("h:1", 4, ["gpu"]));
        created.Status.Should().Be("created");
        created.Worker.Epoch.Should().Be(1);

        var updated = await _host.Admin.RegisterWorkerAsync(pool, "solo", new Client.WorkerRegistration("h:2", 8, ["gpu"]));
        updated.Status.Should().Be("updated");
        updated.Worker.Epoch.Should().Be(2);
        await _host.Admin.ReportLoadAsync(pool, "solo", epoch: 2, loadIndex: 5000);
        (await _host.Admin.GetWorkerAsync(pool, "solo")).LoadIndex.Should().Be(5000);

        var tagged = await _host.Broker.AllocateAsync(pool, new AllocateRequest { Tags = ["gpu"] }, "t1");
        tagged.Allocation!.WorkerId.Should().Be("solo");
        (await _host.Broker.AllocateAsync(pool, new AllocateRequest { Tags = ["tpu"] }, "t2")).Status.Should().Be(AllocateStatus.NoCapacity);

        var gone = await _host.Admin.DeregisterWorkerAsync(pool, "solo");
        gone.AllocationsEnded.Should().Be(1);
        (await _host.Admin.GetWorkersAsync(pool)).Should().BeEmpty();
    }

    private static StringContent JsonContent(string json) => new(json, System.Text.Encoding.UTF8, "application/json");
}
