namespace Allocator.Storage.Conformance;

/// <summary>Bad arguments are refused with a clear error before anything is written.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    private static readonly string OversizedId = new('a', AllocatorLimits.MaxIdLength + 1);

    [Theory]
    [InlineData(0)]
    [InlineData(-1)]
    [InlineData(AllocatorLimits.MaxCapacity + 1)]
    public async Task Register_CapacityOutOfRange_ThrowsArgumentAndWritesNothing(int capacity)
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var before = await SnapshotAsync(poolId);

        var act = async () => await Store.RegisterWorkersAsync(poolId, [Registration("w-new", 4), Registration("w-bad", capacity)]);

        (await act.Should().ThrowAsync<ArgumentException>()).WithMessage("*capacity*");
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before, "a bad registration rejects the whole batch");
    }

    [Theory]
    [InlineData("")]
    [InlineData("-starts-with-dash")]
    [InlineData("has space")]
    public async Task Register_BadWorkerId_ThrowsArgumentAndWritesNothing(string workerId)
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var before = await SnapshotAsync(poolId);

        var act = async () => await Store.RegisterWorkersAsync(poolId, [Registration("w-new", 4), Registration(workerId, 4)]);

        await act.Should().ThrowAsync<ArgumentException>();
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before);
    }

    [Fact]
    public async Task Register_OversizedWorkerId_ThrowsArgumentAndWritesNothing()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var before = await SnapshotAsync(poolId);

        var act = async () => await Store.RegisterWorkersAsync(poolId, [Registration(OversizedId, 4)]);

        (await act.Should().ThrowAsync<ArgumentException>()).WithMessage($"*{AllocatorLimits.MaxIdLength}*");
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before);
    }

    [Fact]
    public async Task Register_EmptyBatchOrDuplicateWorker_ThrowsArgumentAndWritesNothing()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var before = await SnapshotAsync(poolId);

        var empty = async () => await Store.RegisterWorkersAsync(poolId, []);
        var duplicate = async () => await Store.RegisterWorkersAsync(poolId, [Registration("w-x", 1), Registration("w-x", 2)]);

        await empty.Should().ThrowAsync<ArgumentException>();
        await duplicate.Should().ThrowAsync<ArgumentException>();
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before);
    }

    [Theory]
    [InlineData(0)]
    [InlineData(-1)]
    [InlineData(AllocatorLimits.MaxCapacity + 1)]
    public async Task Allocate_UnitsOutOfRange_ThrowsArgumentAndWritesNothing(int units)
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 4);
        var before = await SnapshotAsync(poolId);

        var act = async () => await Store.AllocateAsync(poolId, [Request(), Request(units: units)]);

        (await act.Should().ThrowAsync<ArgumentException>()).WithMessage("*units*");
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before, "a bad request rejects the whole batch");
    }

    [Fact]
    public async Task Allocate_EmptyOrOversizedSessionKey_ThrowsArgumentAndWritesNothing()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 4);
        var before = await SnapshotAsync(poolId);

        var empty = async () => await Store.AllocateAsync(poolId, [Request(sessionKey: "")]);
        var oversized = async () => await Store.AllocateAsync(poolId, [Request(), Request(sessionKey: new string('k', AllocatorLimits.MaxSessionKeyLength + 1))]);

        (await empty.Should().ThrowAsync<ArgumentException>()).WithMessage("*sessionKey*");
        (await oversized.Should().ThrowAsync<ArgumentException>()).WithMessage("*sessionKey*");
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before);
    }

    [Fact]
    public async Task Allocate_EmptyOrOversizedBatch_ThrowsArgumentAndWritesNothing()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 4);
        var before = await SnapshotAsync(poolId);

        var empty = async () => await Store.AllocateAsync(poolId, []);
        var oversized = async () => await Store.AllocateAsync(poolId, [.. Enumerable.Range(0, AllocatorLimits.MaxBatchSize + 1).Select(_ => Request())]);

        await empty.Should().ThrowAsync<ArgumentException>();
        await oversized.Should().ThrowAsync<ArgumentException>();
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before);
    }

    [Fact]
    public async Task Allocate_BadLeaseOrTag_ThrowsArgumentAndWritesNothing()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 4);
        var before = await SnapshotAsync(poolId);

        var shortLease = async () => await Store.AllocateAsync(poolId, [Request(lease: TimeSpan.FromMilliseconds(10))]);
        var emptyTag = async () => await Store.AllocateAsync(poolId, [Request(tags: [""])]);

        await shortLease.Should().ThrowAsync<ArgumentException>();
        await emptyTag.Should().ThrowAsync<ArgumentException>();
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before);
    }

    [Theory]
    [InlineData("")]
    [InlineData("has space")]
    public async Task PoolId_Bad_ThrowsArgument(string poolId)
    {
        var upsert = async () => await Store.UpsertPoolAsync(poolId, PoolSettings.Default);
        var allocate = async () => await Store.AllocateAsync(poolId, [Request()]);
        var register = async () => await Store.RegisterWorkersAsync(poolId, [Registration("w-a", 1)]);

        await upsert.Should().ThrowAsync<ArgumentException>();
        await allocate.Should().ThrowAsync<ArgumentException>();
        await register.Should().ThrowAsync<ArgumentException>();
    }

    [Fact]
    public async Task PoolId_Oversized_ThrowsArgumentAndCreatesNothing()
    {
        var upsert = async () => await Store.UpsertPoolAsync(OversizedId, PoolSettings.Default);

        (await upsert.Should().ThrowAsync<ArgumentException>()).WithMessage($"*{AllocatorLimits.MaxIdLength}*");
        var lookup = async () => await Store.GetPoolAsync(OversizedId);
        await lookup.Should().ThrowAsync<ArgumentException>();
    }

    [Fact]
    public async Task UnknownPool_PoolScopedCalls_ThrowNotFound()
    {
        var poolId = NewPoolId();

        await AssertPoolNotFoundAsync(() => Store.AllocateAsync(poolId, [Request()]));
        await AssertPoolNotFoundAsync(() => Store.RegisterWorkersAsync(poolId, [Registration("w-a", 1)]));
        await AssertPoolNotFoundAsync(() => Store.GetPoolStatisticsAsync(poolId));
        await AssertPoolNotFoundAsync(() => Store.GetWorkersAsync(poolId));
        await AssertPoolNotFoundAsync(() => Store.DeregisterWorkerAsync(poolId, "w-a"));
        await AssertPoolNotFoundAsync(() => Store.SetWorkerStateAsync(poolId, "w-a", WorkerState.Draining));
        await AssertPoolNotFoundAsync(() => Store.ReleaseAsync(poolId, Guid.NewGuid(), 1));
        (await Store.GetPoolAsync(poolId)).Should().BeNull("nothing was created by the failed calls");
    }

    [Fact]
    public async Task Renew_LeaseOutOfRange_ThrowsArgumentAndChangesNothing()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var allocation = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(1));

        var tooShort = async () => await Store.RenewAsync(poolId, allocation.AllocationId, allocation.Epoch, TimeSpan.Zero);
        var tooLong = async () => await Store.RenewAsync(poolId, allocation.AllocationId, allocation.Epoch, AllocatorLimits.MaxLease + TimeSpan.FromDays(1));

        await tooShort.Should().ThrowAsync<ArgumentException>();
        await tooLong.Should().ThrowAsync<ArgumentException>();
        (await Store.GetAllocationAsync(poolId, allocation.AllocationId)).Should().BeEquivalentTo(allocation);
    }

    [Theory]
    [InlineData(-1)]
    [InlineData(AllocatorLimits.MaxLoadIndex + 1)]
    public async Task ReportLoad_IndexOutOfRange_ThrowsArgumentAndChangesNothing(int loadIndex)
    {
        var poolId = await CreatePoolAsync();
        var worker = (await RegisterAsync(poolId, Registration("w-a", 2))).Single().Worker;
        var before = await SnapshotAsync(poolId);

        var act = async () => await Store.ReportLoadAsync(poolId, "w-a", worker.Epoch, loadIndex);

        (await act.Should().ThrowAsync<ArgumentException>()).WithMessage("*loadIndex*");
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before);
    }

    [Fact]
    public async Task ReapExpired_MaxCountNotPositive_ThrowsArgument()
    {
        var act = async () => await Store.ReapExpiredAsync(0);

        await act.Should().ThrowAsync<ArgumentException>();
    }

    [Fact]
    public async Task UpsertPool_BadSettings_ThrowsArgumentAndChangesNothing()
    {
        var poolId = await CreatePoolAsync(new PoolSettings { DefaultLease = TimeSpan.FromMinutes(5) });

        var badLease = async () => await Store.UpsertPoolAsync(poolId, new PoolSettings { DefaultLease = TimeSpan.Zero });
        var badWait = async () => await Store.UpsertPoolAsync(poolId, new PoolSettings { MaxWait = TimeSpan.FromSeconds(-1) });
        var badStrategy = async () => await Store.UpsertPoolAsync(poolId, new PoolSettings { Strategy = (AllocationStrategy)42 });

        await badLease.Should().ThrowAsync<ArgumentException>();
        await badWait.Should().ThrowAsync<ArgumentException>();
        await badStrategy.Should().ThrowAsync<ArgumentException>();
        (await Store.GetPoolAsync(poolId))!.Settings.Should().BeEquivalentTo(new PoolSettings { DefaultLease = TimeSpan.FromMinutes(5) });
    }

    private static async Task AssertPoolNotFoundAsync(Func<Task> call)
    {
        var act = async () => await call();
        (await act.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.NotFound);
    }
}
