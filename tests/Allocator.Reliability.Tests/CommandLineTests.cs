using Allocator.Reliability.Cli;

namespace Allocator.Reliability.Tests;

public sealed class CommandLineTests
{
    [Fact]
    public void Parse_MisspeltOption_IsAnError()
    {
        var parse = () => FaultsCommandLine.Parse(["--quik"]);

        parse.Should().Throw<ArgumentException>().WithMessage("*--quik*");
    }

    [Fact]
    public void Parse_UnknownScenario_IsAnError()
    {
        var parse = () => FaultsCommandLine.Parse(["--quick", "no-such-scenario"]);

        parse.Should().Throw<ArgumentException>().WithMessage("*no-such-scenario*");
    }

    [Fact]
    public void Parse_QuickAndScenarios_ReadsBoth()
    {
        var line = FaultsCommandLine.Parse(["--quick", "kill-instance", "worker-churn"]);

        line.Quick.Should().BeTrue();
        line.List.Should().BeFalse();
        line.Scenarios.Should().Equal("kill-instance", "worker-churn");
    }

    [Fact]
    public void Parse_Help_IsHelpAndUsageNamesEveryOption()
    {
        FaultsCommandLine.Parse(["--help"]).Help.Should().BeTrue();
        FaultsCommandLine.Usage.Should().Contain("--quick").And.Contain("--list").And.Contain("scenario");
    }
}
