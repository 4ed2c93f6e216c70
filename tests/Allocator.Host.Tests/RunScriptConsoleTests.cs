using Xunit.Abstractions;

namespace Allocator.Host.Tests;

/// <summary>
/// What <c>eng/run.sh</c> shows a newcomer (issue 40): before the service's block (address, key,
/// curl lines) a start-up summary of at most 40 lines, not Orleans' and ASP.NET Core's ~200 lines
/// of start-up logs; those go whole to the file it names, and come back with <c>--verbose</c>.
/// Warnings still reach the console (while the service runs too: <c>RunScriptTlsTests</c>).
/// </summary>
public sealed class RunScriptConsoleTests(ITestOutputHelper output)
{
    [Fact]
    public async Task PlainRun_ShowsASummaryOfAtMost40Lines_TheNamedFileHasTheFullLogs_AndWarningsReachTheConsole()
    {
        await using var run = await RunScript.StartAsync(instances: 1, output, newcomerLogLevels: true);
        var url = run.Urls[0].ToString().TrimEnd('/');

        run.FirstScreen.Count.Should().BeLessThanOrEqualTo(40, "the first screen is a summary: {0}", string.Join("\n", run.FirstScreen));
        run.FirstScreen.Should().Contain(l => l.StartsWith($"allocator: instance 0 ready in ", StringComparison.Ordinal) && l.Contains(url, StringComparison.Ordinal));
        run.FirstScreen.Should().Contain(l => l.StartsWith("allocator: store: PostgreSQL", StringComparison.Ordinal));
        run.FirstScreen.Should().NotContain(l => l.Contains("Orleans.Runtime.SiloOptionsLogger", StringComparison.Ordinal), "Orleans' options go to the file only");
        run.FirstScreen.Should().NotContain(l => l.StartsWith("info: ", StringComparison.Ordinal));

        // The demo key's warning, logged at start-up, is on the console (stderr) and in the file.
        run.StandardError.Should().Contain(l => l.StartsWith("warn: Allocator.Host.StartupReport", StringComparison.Ordinal));
        run.StandardError.Should().Contain(l => l.Contains("A demo admin key from ALLOCATOR_DEMO_KEY is accepted", StringComparison.Ordinal));

        run.LogFile.Should().Be("artifacts/run/instance-0.log");
        var log = await File.ReadAllTextAsync(Path.Combine(Repository.Root, run.LogFile!));
        log.Should().Contain("Configuration Orleans.Configuration.ClusterMembershipOptions:")
            .And.Contain("Now listening on: " + url)
            .And.Contain("A demo admin key from ALLOCATOR_DEMO_KEY is accepted");
    }

    [Fact]
    public async Task Verbose_ShowsEveryLineOnTheConsoleAgain()
    {
        await using var run = await RunScript.StartAsync(instances: 1, output, verbose: true, newcomerLogLevels: true);

        run.FirstScreen.Should().Contain(l => l.Contains("Orleans.Runtime.SiloOptionsLogger", StringComparison.Ordinal));
        run.FirstScreen.Should().Contain("      Now listening on: " + run.Urls[0].ToString().TrimEnd('/'));
        run.FirstScreen.Count.Should().BeGreaterThan(100);
        (await File.ReadAllTextAsync(Path.Combine(Repository.Root, run.LogFile!))).Should().Contain("Configuration Orleans.Configuration.ClusterMembershipOptions:", "the file is written with --verbose too");
    }
}
