using Npgsql;

namespace Allocator.Storage.PostgreSql.Tests;

public sealed class DataSourceTests : PostgresStoreTestBase
{
    [Fact]
    public async Task MultiplexingDataSource_AllocatesAndReceivesNotifications()
    {
        await CreatePoolAsync("p", workers: 2, capacity: 5);
        var builder = new NpgsqlConnectionStringBuilder(PostgresTestDatabase.ConnectionString) { Multiplexing = true };
        await using var multiplexing = NpgsqlDataSource.Create(builder.ConnectionString);
        await using var store = (PostgresWorkerStore)await PostgresWorkerStoreFactory.CreateAsync(multiplexing, new PostgresWorkerStoreOptions { Schema = Schema });

        var changed = new TaskCompletionSource<PoolChanged>(TaskCreationOptions.RunContinuationsAsynchronously);
        using var subscription = store.SubscribeToPoolChanges(c => changed.TrySetResult(c));
        await store.WaitForListenerAsync(CancellationToken.None).WaitAsync(TimeSpan.FromSeconds(10));

        var outcome = (await store.AllocateAsync("p", [new AllocationRequest("s")]))[0];
        outcome.Status.Should().Be(AllocationStatus.Allocated);
        (await store.ReleaseAsync("p", outcome.Allocation!.AllocationId, outcome.Allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        (await changed.Task.WaitAsync(TimeSpan.FromSeconds(10))).Should().Be(new PoolChanged("p", PoolChangeKind.CapacityAvailable));
    }

    [Fact]
    public async Task OtherInstance_SeesReleaseThroughNotify_AndSettingsChangeDropsItsCache()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 5);
        await using var other = await PostgresTestDatabase.CreateStoreAsync(Schema, o => o.SettingsCacheDuration = TimeSpan.FromHours(1));
        (await other.GetPoolAsync("p"))!.Settings.Strategy.Should().Be(AllocationStrategy.SkipLocked);
        var settingsChanged = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var subscription = other.SubscribeToPoolChanges(c =>
        {
            if (c.Kind == PoolChangeKind.SettingsChanged)
            {
                settingsChanged.TrySetResult();
            }
        });
        await other.WaitForListenerAsync(CancellationToken.None).WaitAsync(TimeSpan.FromSeconds(10));

        await Store.UpsertPoolAsync("p", new PoolSettings { Strategy = AllocationStrategy.Strict });
        await settingsChanged.Task.WaitAsync(TimeSpan.FromSeconds(10));
        (await other.GetPoolAsync("p"))!.Settings.Strategy.Should().Be(AllocationStrategy.Strict, "the notification dropped the hour-long cache");
    }
}
