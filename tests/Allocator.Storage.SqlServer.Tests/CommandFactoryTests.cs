using System.Data;
using Allocator.Storage.SqlServer.Internal;
using Microsoft.Data.SqlClient;

namespace Allocator.Storage.SqlServer.Tests;

public sealed class CommandFactoryTests
{
    private static readonly SqlServerCommandFactory Commands = new(new SqlScripts("allocator", TimeSpan.FromSeconds(5), TimeSpan.FromSeconds(17.5)), TimeSpan.FromSeconds(30));

    public static TheoryData<string> AllCommands => [.. Build().Keys];

    [Fact]
    public void EveryScript_HasACommand()
    {
        Build().Keys.Should().BeEquivalentTo(SqlScripts.RawOperations.Keys);
    }

    [Theory]
    [MemberData(nameof(AllCommands))]
    public void Command_PassesEveryUndeclaredVariableAsATypedParameter(string name)
    {
        using var command = Build()[name]();
        var script = Commands.Scripts[name];
        command.CommandText.Should().Be(script.Text);
        command.CommandType.Should().Be(CommandType.Text);
        command.CommandTimeout.Should().Be(30);
        command.Parameters.Cast<SqlParameter>().Select(p => p.ParameterName.TrimStart('@'))
            .Should().BeEquivalentTo(script.Parameters, "every value reaches SQL Server as a parameter, none is concatenated");
        foreach (SqlParameter parameter in command.Parameters)
        {
            parameter.ParameterName.Should().StartWith("@");
        }
    }

    [Theory]
    [MemberData(nameof(AllCommands))]
    public void Command_IsNamedAfterItsScript_ForTelemetry(string name)
    {
        using var command = Build()[name]();
        Commands.Scripts.NameOf(command.CommandText).Should().Be(name);
    }

    [Fact]
    public void Ids_AreNVarCharOfTheColumnSize_SoSeeksStaySeeks()
    {
        using var command = Commands.GetWorker("p", "w");
        foreach (var name in new[] { "@pool_id", "@worker_id" })
        {
            var parameter = command.Parameters[name];
            parameter.SqlDbType.Should().Be(SqlDbType.NVarChar);
            parameter.Size.Should().Be(AllocatorLimits.MaxIdLength);
        }
    }

    [Fact]
    public void NullableValues_AreDbNull()
    {
        using var command = Commands.Renew("p", Guid.NewGuid(), 3, lease: null, owner: null);
        command.Parameters["@lease_ms"].Value.Should().Be(DBNull.Value);
        using var report = Commands.ReportLoad("p", "w", 1, loadIndex: null);
        report.Parameters["@load_index"].Value.Should().Be(DBNull.Value);
    }

    [Fact]
    public void AllocateBlocking_CarriesOneRequest_AsTypedScalars()
    {
        var id = Guid.NewGuid();
        using var command = Commands.AllocateBlocking("p", id, new AllocationRequest("session-1", 3, ["b", "a"], TimeSpan.FromMilliseconds(1500)) { Owner = "farm-a" }, fallback: false);
        command.Parameters["@allocation_id"].Value.Should().Be(id);
        command.Parameters["@session_key"].Should().Match<SqlParameter>(p => p.SqlDbType == SqlDbType.NVarChar && p.Size == 329 && (string)p.Value == "farm-a\u001Fsession-1",
            "the stored key is the owner's (issue 22): an owner id, a unit separator, the session key");
        command.Parameters["@units"].Value.Should().Be(3);
        command.Parameters["@tags"].Value.Should().Be("[\"b\",\"a\"]");
        command.Parameters["@lease_ms"].Value.Should().Be(1500L);
        command.Parameters["@fallback"].Value.Should().Be(false);

        using var untagged = Commands.AllocateBlocking("p", id, new AllocationRequest("s"), fallback: true);
        untagged.Parameters["@tags"].Value.Should().Be(DBNull.Value, "no required tags: OPENJSON(NULL) is empty");
        untagged.Parameters["@lease_ms"].Value.Should().Be(DBNull.Value, "the pool's default lease");
    }

    [Fact]
    public void Create_RefusesACommandWhoseParametersDoNotMatchTheScript()
    {
        var missing = () => Commands.Create("get_worker", new SqlParameter("@pool_id", "p"));
        missing.Should().Throw<InvalidOperationException>().WithMessage("*get_worker.sql*worker_id*");
        var extra = () => Commands.Create("get_pool", new SqlParameter("@pool_id", "p"), new SqlParameter("@other", 1));
        extra.Should().Throw<InvalidOperationException>();
    }

    [Fact]
    public void Migration_Commands_HaveNoParameters()
    {
        foreach (var migration in SqlScripts.Migrations)
        {
            using var command = Commands.Migration(migration);
            command.Parameters.Count.Should().Be(0);
            command.CommandText.Should().Contain("[allocator].");
        }
    }

    [Fact]
    public void Milliseconds_RoundsUp_AndKeepsNull()
    {
        SqlServerCommandFactory.Milliseconds(null).Should().BeNull();
        SqlServerCommandFactory.Milliseconds(TimeSpan.FromDays(30)).Should().Be(2_592_000_000L);
        SqlServerCommandFactory.Milliseconds(TimeSpan.FromTicks(1)).Should().Be(1);
    }

    private static Dictionary<string, Func<SqlCommand>> Build() => new()
    {
        ["upsert_pool"] = () => Commands.UpsertPool("p", new PoolSettings { DefaultLease = TimeSpan.FromSeconds(5), HeartbeatTimeout = TimeSpan.FromSeconds(3) }),
        ["get_pool"] = () => Commands.GetPool("p"),
        ["get_pool_statistics"] = () => Commands.GetPoolStatistics("p"),
        ["register_workers"] = () => Commands.RegisterWorkers("p", "[]"),
        ["deregister_worker"] = () => Commands.DeregisterWorker("p", "w"),
        ["set_worker_state"] = () => Commands.SetWorkerState("p", "w", WorkerState.Draining),
        ["report_load"] = () => Commands.ReportLoad("p", "w", 1, 500),
        ["get_worker"] = () => Commands.GetWorker("p", "w"),
        ["get_workers"] = () => Commands.GetWorkers("p"),
        ["allocate_skip_locked"] = () => Commands.Allocate("p", "[]", fence: 7),
        ["allocate_blocking"] = () => Commands.AllocateBlocking("p", Guid.NewGuid(), new AllocationRequest("s", 2, ["gpu"], TimeSpan.FromSeconds(5)), fallback: true, fence: 7),
        ["release"] = () => Commands.Release("p", Guid.NewGuid(), 1),
        ["release_batch"] = () => Commands.ReleaseBatch("p", "[]", fence: 7),
        ["claim_pool_activation"] = () => Commands.ClaimPoolActivation("p"),
        ["renew"] = () => Commands.Renew("p", Guid.NewGuid(), 1, TimeSpan.FromSeconds(10), "farm-a"),
        ["get_allocation"] = () => Commands.GetAllocation("p", Guid.NewGuid()),
        ["get_allocation_by_key"] = () => Commands.GetAllocationByKey("p", "owner\u001Fkey"),
        ["reap_expired"] = () => Commands.ReapExpired(100),
        ["get_pool_changes"] = Commands.GetPoolChanges,
        ["migrate_lock"] = () => Commands.MigrateLock("allocator-migrations:allocator", "allocator", TimeSpan.FromSeconds(10)),
        ["migrate_versions"] = Commands.MigrateVersions,
        ["migrate_record"] = () => Commands.MigrateRecord(new SqlMigration(1, "0001_baseline", "x")),
        ["directory_get"] = () => Commands.DirectoryGet("p"),
        ["directory_replace"] = () => Commands.DirectoryReplace(new PoolPlacement("p", "a"), new PoolPlacement("p", "a", MovingTo: "b")),
        ["directory_count"] = () => Commands.DirectoryCount("a"),
        ["remove_pool"] = () => Commands.RemovePool("p"),
    };
}
