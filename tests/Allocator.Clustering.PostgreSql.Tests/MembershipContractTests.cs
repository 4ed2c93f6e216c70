using System.Net;
using Npgsql;
using Orleans;
using Orleans.Runtime;

namespace Allocator.Clustering.PostgreSql.Tests;

/// <summary>
/// Drives Orleans' own ADO.NET membership table and gateway list provider, configured by
/// <c>UseAllocatorPostgresClustering</c>, against our schema and queries in a real PostgreSQL.
/// Every test has its own cluster id; the class has its own schema.
/// </summary>
public sealed class MembershipContractTests(ClusteringSchemaFixture fixture) : IClassFixture<ClusteringSchemaFixture>, IAsyncLifetime
{
    private static int _generation;

    private readonly string _clusterId = "cluster-" + Guid.NewGuid().ToString("N")[..8];
    private ProviderServices _providers = null!;

    private IMembershipTable Table => _providers.Table;

    public async Task InitializeAsync() => _providers = await ProviderServices.CreateAsync(fixture.Schema, _clusterId);

    public async Task DisposeAsync() => await _providers.DisposeAsync();

    [Fact]
    public async Task InitializeMembershipTable_NewCluster_CreatesVersionZeroOnceEvenWhenConcurrent()
    {
        var clusterId = "init-" + Guid.NewGuid().ToString("N")[..8];
        await using var providers = await ProviderServices.CreateAsync(fixture.Schema, clusterId, initialize: false);

        await providers.Table.InitializeMembershipTableAsync(false);
        (await VersionRowsAsync(clusterId)).Should().Be(0, "tryInitTableVersion: false must not create the version row");

        var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var inits = Enumerable.Range(0, 8).Select(_ => Task.Run(async () =>
        {
            await start.Task;
            await providers.Table.InitializeMembershipTableAsync(true);
        })).ToList();
        start.SetResult();
        await Task.WhenAll(inits).WaitAsync(TimeSpan.FromSeconds(30));

        (await VersionRowsAsync(clusterId)).Should().Be(1);
        var data = await providers.Table.ReadAllAsync();
        data.Members.Should().BeEmpty();
        data.Version.Version.Should().Be(0);
        data.Version.VersionEtag.Should().Be("0");
    }

    [Fact]
    public async Task InsertRow_CurrentVersion_InsertsRowAndMovesVersionByOne()
    {
        var entry = NewEntry();
        var before = await Table.ReadAllAsync();

        (await Table.InsertRowAsync(entry, before.Version.Next())).Should().BeTrue();

        var after = await Table.ReadAllAsync();
        after.Version.Version.Should().Be(before.Version.Version + 1);
        after.Members.Should().ContainSingle().Which.Item1.SiloAddress.Should().Be(entry.SiloAddress);
    }

    [Fact]
    public async Task InsertRow_SameSiloTwice_SecondFailsWithoutMovingVersion()
    {
        var entry = NewEntry();
        (await Table.InsertRowAsync(entry, (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();
        var current = await Table.ReadAllAsync();

        (await Table.InsertRowAsync(entry, current.Version.Next())).Should().BeFalse("the silo already has a row");

        var after = await Table.ReadAllAsync();
        after.Version.Should().Be(current.Version, "a failed insert leaves no trace, version included");
        after.Members.Should().ContainSingle();
    }

    [Fact]
    public async Task InsertRow_StaleVersion_Fails()
    {
        var stale = (await Table.ReadAllAsync()).Version;
        (await Table.InsertRowAsync(NewEntry(), stale.Next())).Should().BeTrue();

        (await Table.InsertRowAsync(NewEntry(), stale.Next())).Should().BeFalse("another writer moved the version since it was read");

        var after = await Table.ReadAllAsync();
        after.Members.Should().ContainSingle();
        after.Version.Version.Should().Be(stale.Version + 1);
    }

    [Fact]
    public async Task UpdateRow_CurrentVersionSucceeds_StaleVersionFails()
    {
        var entry = NewEntry();
        (await Table.InsertRowAsync(entry, (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();
        var read = await Table.ReadRowAsync(entry.SiloAddress);
        var (row, etag) = read.Members.Single();

        row.Status = SiloStatus.Active;
        (await Table.UpdateRowAsync(row, etag, read.Version.Next())).Should().BeTrue();

        row.Status = SiloStatus.Dead;
        (await Table.UpdateRowAsync(row, etag, read.Version.Next())).Should().BeFalse("the version read before the first update is stale now");

        var after = await Table.ReadRowAsync(entry.SiloAddress);
        after.Members.Single().Item1.Status.Should().Be(SiloStatus.Active);
        after.Version.Version.Should().Be(read.Version.Version + 1);
    }

    [Fact]
    public async Task UpdateRow_UnknownSilo_FailsWithoutMovingVersion()
    {
        var read = await Table.ReadAllAsync();

        (await Table.UpdateRowAsync(NewEntry(SiloStatus.Active), string.Empty, read.Version.Next())).Should().BeFalse();

        (await Table.ReadAllAsync()).Version.Should().Be(read.Version);
    }

    [Fact]
    public async Task UpdateRow_ConflictingWritersWithSameVersion_ExactlyOneWinsAndItsWriteIsStored()
    {
        var entry = NewEntry();
        (await Table.InsertRowAsync(entry, (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();
        var read = await Table.ReadRowAsync(entry.SiloAddress);
        var (row, etag) = read.Members.Single();
        var baseTime = Now();

        const int Writers = 8;
        var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var writes = Enumerable.Range(0, Writers).Select(i => Task.Run(async () =>
        {
            var mine = Copy(row);
            mine.Status = SiloStatus.Active;
            mine.IAmAliveTime = baseTime.AddSeconds(i + 1);
            await start.Task;
            return await Table.UpdateRowAsync(mine, etag, read.Version.Next());
        })).ToList();
        start.SetResult();
        var results = await Task.WhenAll(writes).WaitAsync(TimeSpan.FromSeconds(30));

        results.Count(ok => ok).Should().Be(1, "all writers presented the same version");
        var winner = Array.IndexOf(results, true);
        var after = await Table.ReadRowAsync(entry.SiloAddress);
        after.Version.Version.Should().Be(read.Version.Version + 1);
        after.Members.Single().Item1.IAmAliveTime.Should().Be(baseTime.AddSeconds(winner + 1), "the stored row is the winner's");
    }

    [Fact]
    public async Task InsertRow_ConflictingWritersWithSameVersion_ExactlyOneSiloIsInserted()
    {
        var read = await Table.ReadAllAsync();
        var entries = Enumerable.Range(0, 8).Select(_ => NewEntry()).ToList();

        var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var writes = entries.Select(e => Task.Run(async () =>
        {
            await start.Task;
            return await Table.InsertRowAsync(e, read.Version.Next());
        })).ToList();
        start.SetResult();
        var results = await Task.WhenAll(writes).WaitAsync(TimeSpan.FromSeconds(30));

        results.Count(ok => ok).Should().Be(1);
        var after = await Table.ReadAllAsync();
        after.Version.Version.Should().Be(read.Version.Version + 1);
        after.Members.Should().ContainSingle().Which.Item1.SiloAddress.Should().Be(entries[Array.IndexOf(results, true)].SiloAddress);
    }

    [Fact]
    public async Task UpdateRow_WaitingOnAWriterThatMovesTheVersion_RechecksAndFails()
    {
        // Deterministic form of the race above: a writer holding the version row lock moves the
        // version while our update waits for that lock; after the commit ours must see the new
        // version and change nothing.
        var entry = NewEntry();
        (await Table.InsertRowAsync(entry, (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();
        var read = await Table.ReadRowAsync(entry.SiloAddress);
        var (row, etag) = read.Members.Single();

        await using var holder = await ClusteringTestDatabase.DataSource.OpenConnectionAsync();
        await using var transaction = await holder.BeginTransactionAsync();
        await using (var bump = new NpgsqlCommand($"UPDATE \"{fixture.Schema}\".membership_version SET version = version + 1 WHERE cluster_id = $1", holder, transaction))
        {
            bump.Parameters.Add(new NpgsqlParameter { Value = _clusterId });
            (await bump.ExecuteNonQueryAsync()).Should().Be(1);
        }

        row.Status = SiloStatus.Dead;
        var update = Table.UpdateRowAsync(row, etag, read.Version.Next());
        await WaitUntilBlockedByAsync(holder.ProcessID, "the UpdateRow statement to wait for the version row lock");
        await transaction.CommitAsync();

        (await update.WaitAsync(TimeSpan.FromSeconds(30))).Should().BeFalse();
        var after = await Table.ReadRowAsync(entry.SiloAddress);
        after.Members.Single().Item1.Status.Should().Be(SiloStatus.Joining);
        after.Version.Version.Should().Be(read.Version.Version + 1, "only the lock holder moved it");
    }

    [Fact]
    public async Task ReadRowAndReadAll_RoundTripEveryField()
    {
        var start = Now().AddMinutes(-5);
        var entry = NewEntry(SiloStatus.Joining, port: 22222, proxyPort: 40000, time: start);
        entry.HostName = "worker-host-ü.example";
        entry.SiloName = "Silo_Ü-1";
        var v6 = NewEntry(SiloStatus.Joining, time: start);
        v6.SiloAddress = SiloAddress.New(IPAddress.IPv6Loopback, 33333, v6.SiloAddress.Generation);
        (await Table.InsertRowAsync(entry, (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();
        (await Table.InsertRowAsync(v6, (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();

        var read = await Table.ReadRowAsync(entry.SiloAddress);
        var (row, etag) = read.Members.Single();
        row.SuspectTimes.Should().BeNullOrEmpty("InsertRow writes no votes");
        row.Status = SiloStatus.Active;
        row.IAmAliveTime = start.AddSeconds(90);
        row.SuspectTimes =
        [
            Tuple.Create(SiloAddress.New(IPAddress.Parse("10.1.2.3"), 11111, 7), start.AddSeconds(30)),
            Tuple.Create(v6.SiloAddress, start.AddSeconds(31.5)),
        ];
        (await Table.UpdateRowAsync(row, etag, read.Version.Next())).Should().BeTrue();

        var one = await Table.ReadRowAsync(entry.SiloAddress);
        var all = await Table.ReadAllAsync();
        one.Version.Should().Be(all.Version);
        one.Version.Version.Should().Be(3);
        all.Members.Should().HaveCount(2);
        foreach (var stored in new[] { one.Members.Single().Item1, all.Members.Single(m => m.Item1.SiloAddress.Equals(entry.SiloAddress)).Item1 })
        {
            stored.SiloAddress.Should().Be(entry.SiloAddress);
            stored.SiloAddress.Generation.Should().Be(entry.SiloAddress.Generation);
            stored.SiloName.Should().Be("Silo_Ü-1");
            stored.HostName.Should().Be("worker-host-ü.example");
            stored.Status.Should().Be(SiloStatus.Active);
            stored.ProxyPort.Should().Be(40000);
            stored.StartTime.Should().Be(start);
            stored.StartTime.Kind.Should().Be(DateTimeKind.Utc);
            stored.IAmAliveTime.Should().Be(start.AddSeconds(90));
            stored.SuspectTimes.Should().HaveCount(2);
            stored.SuspectTimes![0].Item1.Should().Be(SiloAddress.New(IPAddress.Parse("10.1.2.3"), 11111, 7));
            stored.SuspectTimes[0].Item2.Should().Be(start.AddSeconds(30));
            stored.SuspectTimes[1].Item1.Should().Be(v6.SiloAddress);
            stored.SuspectTimes[1].Item2.Should().Be(start.AddSeconds(31.5));
        }

        var ipv6 = (await Table.ReadRowAsync(v6.SiloAddress)).Members.Single().Item1;
        ipv6.SiloAddress.Should().Be(v6.SiloAddress);
        ipv6.Status.Should().Be(SiloStatus.Joining);
    }

    [Fact]
    public async Task ReadRow_UnknownSilo_ReturnsNoEntryButTheVersion()
    {
        (await Table.InsertRowAsync(NewEntry(), (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();

        var read = await Table.ReadRowAsync(NewEntry().SiloAddress);

        read.Members.Should().BeEmpty();
        read.Version.Version.Should().Be(1);
    }

    [Fact]
    public async Task UpdateIAmAlive_ChangesOnlyTheHeartbeat_NotTheVersion()
    {
        var entry = NewEntry(SiloStatus.Active);
        (await Table.InsertRowAsync(entry, (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();
        var before = await Table.ReadRowAsync(entry.SiloAddress);
        var heartbeat = Now().AddSeconds(5);

        // Orleans passes an entry that carries only the address and the time.
        await Table.UpdateIAmAliveAsync(new MembershipEntry { SiloAddress = entry.SiloAddress, IAmAliveTime = heartbeat });

        var after = await Table.ReadRowAsync(entry.SiloAddress);
        after.Version.Should().Be(before.Version);
        var stored = after.Members.Single().Item1;
        stored.IAmAliveTime.Should().Be(heartbeat);
        stored.Status.Should().Be(SiloStatus.Active);
        stored.HostName.Should().Be(entry.HostName);
        stored.StartTime.Should().Be(entry.StartTime);
    }

    [Fact]
    public async Task GetGateways_ListsOnlyActiveSilosWithAProxyPort()
    {
        var activeGateway = NewEntry(SiloStatus.Active, proxyPort: 30001);
        var activeNoGateway = NewEntry(SiloStatus.Active, proxyPort: 0);
        var joining = NewEntry(SiloStatus.Joining, proxyPort: 30002);
        var dead = NewEntry(SiloStatus.Dead, proxyPort: 30003);
        var secondGateway = NewEntry(SiloStatus.Active, port: 11112, proxyPort: 30004);
        foreach (var entry in new[] { activeGateway, activeNoGateway, joining, dead, secondGateway })
        {
            (await Table.InsertRowAsync(entry, (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();
        }

        await using var other = await ProviderServices.CreateAsync(fixture.Schema, _clusterId + "-other");
        (await other.Table.InsertRowAsync(NewEntry(SiloStatus.Active, proxyPort: 30005), (await other.Table.ReadAllAsync()).Version.Next())).Should().BeTrue();

        var gateways = await _providers.Gateways.GetGateways();

        gateways.Should().BeEquivalentTo(new[]
        {
            SiloAddress.New(activeGateway.SiloAddress.Endpoint.Address, 30001, activeGateway.SiloAddress.Generation).ToGatewayUri(),
            SiloAddress.New(secondGateway.SiloAddress.Endpoint.Address, 30004, secondGateway.SiloAddress.Generation).ToGatewayUri(),
        });
    }

    [Fact]
    public async Task CleanupDefunctSiloEntries_RemovesOldNonActiveRows_KeepsLiveAndRecentlyDeclaredDead()
    {
        var now = Now();
        var old = now.AddDays(-10);
        var cutoff = now.AddDays(-7);

        var oldDead = NewEntry(SiloStatus.Dead, time: old);
        var oldJoining = NewEntry(SiloStatus.Joining, time: old);
        var oldActive = NewEntry(SiloStatus.Active, time: old);
        var freshDead = NewEntry(SiloStatus.Dead, time: now.AddHours(-1));
        var oldDeadRecentVote = NewEntry(SiloStatus.Joining, time: old);
        var oldDeadOldVote = NewEntry(SiloStatus.Joining, time: old);
        foreach (var entry in new[] { oldDead, oldJoining, oldActive, freshDead, oldDeadRecentVote, oldDeadOldVote })
        {
            (await Table.InsertRowAsync(entry, (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();
        }

        // Declared dead by a vote: recently for one (it must stay visible), long ago for the other.
        await DeclareDeadAsync(oldDeadRecentVote, now.AddHours(-2));
        await DeclareDeadAsync(oldDeadOldVote, old.AddHours(1));

        await using var other = await ProviderServices.CreateAsync(fixture.Schema, _clusterId + "-other");
        var otherOldDead = NewEntry(SiloStatus.Dead, time: old);
        (await other.Table.InsertRowAsync(otherOldDead, (await other.Table.ReadAllAsync()).Version.Next())).Should().BeTrue();
        var versionBefore = (await Table.ReadAllAsync()).Version;

        await Table.CleanupDefunctSiloEntriesAsync(cutoff);

        var after = await Table.ReadAllAsync();
        after.Members.Select(m => m.Item1.SiloAddress).Should().BeEquivalentTo(new[]
        {
            oldActive.SiloAddress, freshDead.SiloAddress, oldDeadRecentVote.SiloAddress,
        });
        after.Version.Should().Be(versionBefore, "removing defunct rows changes no live silo's view");
        (await other.Table.ReadAllAsync()).Members.Should().ContainSingle("another cluster's rows are not touched");
    }

    [Fact]
    public async Task DeleteMembershipTableEntries_RemovesTheClusterOnly_AndInitStartsItAfresh()
    {
        (await Table.InsertRowAsync(NewEntry(), (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();
        (await Table.InsertRowAsync(NewEntry(), (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();
        await using var other = await ProviderServices.CreateAsync(fixture.Schema, _clusterId + "-other");
        (await other.Table.InsertRowAsync(NewEntry(), (await other.Table.ReadAllAsync()).Version.Next())).Should().BeTrue();

        await Table.DeleteMembershipTableEntriesAsync(_clusterId);

        (await VersionRowsAsync(_clusterId)).Should().Be(0);
        (await ClusteringTestDatabase.ScalarAsync<long>($"SELECT count(*) FROM \"{fixture.Schema}\".membership WHERE cluster_id = $1", _clusterId)).Should().Be(0);
        var otherData = await other.Table.ReadAllAsync();
        otherData.Members.Should().ContainSingle();
        otherData.Version.Version.Should().Be(1);

        await Table.InitializeMembershipTableAsync(true);
        var fresh = await Table.ReadAllAsync();
        fresh.Members.Should().BeEmpty();
        fresh.Version.Version.Should().Be(0);
    }

    [Fact]
    public async Task TwoSchemas_SameClusterId_AreIndependent()
    {
        // The provider reads orleansquery and our queries read our tables unqualified: the
        // connection string's search path decides which schema they hit.
        var otherSchema = ClusteringTestDatabase.NewSchema();
        try
        {
            await PostgresClusteringSchema.EnsureCreatedAsync(ClusteringTestDatabase.Options(otherSchema));
            await using var elsewhere = await ProviderServices.CreateAsync(otherSchema, _clusterId);
            (await Table.InsertRowAsync(NewEntry(), (await Table.ReadAllAsync()).Version.Next())).Should().BeTrue();

            var there = await elsewhere.Table.ReadAllAsync();

            there.Members.Should().BeEmpty();
            there.Version.Version.Should().Be(0);
            (await Table.ReadAllAsync()).Members.Should().ContainSingle();
        }
        finally
        {
            await ClusteringTestDatabase.DropSchemaAsync(otherSchema);
        }
    }

    private async Task DeclareDeadAsync(MembershipEntry entry, DateTime voteTime)
    {
        var read = await Table.ReadRowAsync(entry.SiloAddress);
        var (row, etag) = read.Members.Single();
        row.Status = SiloStatus.Dead;
        row.SuspectTimes = [Tuple.Create(NewEntry().SiloAddress, voteTime)];
        (await Table.UpdateRowAsync(row, etag, read.Version.Next())).Should().BeTrue();
    }

    private Task<long> VersionRowsAsync(string clusterId) =>
        ClusteringTestDatabase.ScalarAsync<long>($"SELECT count(*) FROM \"{fixture.Schema}\".membership_version WHERE cluster_id = $1", clusterId);

    private static async Task WaitUntilBlockedByAsync(int blockerPid, string what)
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        while (await ClusteringTestDatabase.ScalarAsync<long>("SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", blockerPid) == 0)
        {
            if (timeout.IsCancellationRequested)
            {
                throw new TimeoutException($"Timed out after 30 s waiting for {what}.");
            }

            await Task.Delay(10);
        }
    }

    private static MembershipEntry NewEntry(SiloStatus status = SiloStatus.Joining, int port = 11111, int proxyPort = 30000, DateTime? time = null)
    {
        var generation = Interlocked.Increment(ref _generation);
        var at = time ?? Now();
        return new MembershipEntry
        {
            SiloAddress = SiloAddress.New(IPAddress.Loopback, port, generation),
            SiloName = $"silo-{generation}",
            HostName = "test-host",
            Status = status,
            ProxyPort = proxyPort,
            StartTime = at,
            IAmAliveTime = at,
        };
    }

    private static MembershipEntry Copy(MembershipEntry entry) => new()
    {
        SiloAddress = entry.SiloAddress,
        SiloName = entry.SiloName,
        HostName = entry.HostName,
        Status = entry.Status,
        ProxyPort = entry.ProxyPort,
        StartTime = entry.StartTime,
        IAmAliveTime = entry.IAmAliveTime,
        SuspectTimes = entry.SuspectTimes is null ? null : [.. entry.SuspectTimes],
    };

    /// <summary>Now, to the millisecond: suspicion votes are stored with millisecond precision.</summary>
    private static DateTime Now()
    {
        var now = TimeProvider.System.GetUtcNow().UtcDateTime;
        return new DateTime(now.Ticks - (now.Ticks % TimeSpan.TicksPerMillisecond), DateTimeKind.Utc);
    }
}
