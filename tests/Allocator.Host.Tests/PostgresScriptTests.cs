using System.Diagnostics;
using Npgsql;

namespace Allocator.Host.Tests;

/// <summary><c>eng/postgres.sh</c> as a newcomer and <c>eng/test.sh</c> use it.</summary>
public sealed class PostgresScriptTests
{
    [Fact]
    public async Task Status_OfTheRunningClusterWithoutAStandby_SaysWhereItRuns()
    {
        var port = new NpgsqlConnectionStringBuilder(TestPostgres.ConnectionString).Port;
        if (!File.Exists(Path.Combine(Repository.Root, ".pg", "data", "postmaster.pid")))
        {
            // The tests' PostgreSQL is not this checkout's eng/postgres.sh cluster: nothing to ask it about.
            return;
        }

        using var script = Process.Start(new ProcessStartInfo("bash", ["eng/postgres.sh", "status"]) { WorkingDirectory = Repository.Root, RedirectStandardOutput = true, RedirectStandardError = true })!;
        var output = await script.StandardOutput.ReadToEndAsync();
        await script.WaitForExitAsync();

        script.ExitCode.Should().Be(0, output);
        output.Should().StartWith($"postgres: running on 127.0.0.1:{port}", "eng/test.sh reads this line to tell whether it started the cluster");
    }
}
