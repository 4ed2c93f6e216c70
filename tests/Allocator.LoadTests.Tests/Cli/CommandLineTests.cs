using Allocator.LoadTests.Cli;
using Allocator.LoadTests.Workloads;

namespace Allocator.LoadTests.Tests.Cli;

public sealed class CommandLineTests
{
    [Fact]
    public void Parse_WorkloadWithOptions_ReadsThemAll()
    {
        var line = CommandLine.Parse(["storm-250", "--quick", "--store", "postgres", "--connection", "Host=x", "--strategies", "strict, baseline"]);

        line.Command.Should().Be("storm-250");
        line.Quick.Should().BeTrue();
        line.Store.Should().Be("postgres");
        line.Connection.Should().Be("Host=x");
        line.Strategies.Should().Equal("strict", "baseline");
        line.Help.Should().BeFalse();
    }

    [Theory]
    [InlineData("--store", "oracle")]
    [InlineData("--runs", "0")]
    [InlineData("storm-90", "storm-250")]
    public void Parse_BadArguments_Throw(string first, string second)
    {
        var parse = () => CommandLine.Parse([first, second]);

        parse.Should().Throw<ArgumentException>();
    }

    [Fact]
    public void Catalogue_HasEveryWorkloadOfTheDesign()
    {
        // The seven workloads of the design, then issue 4's figure over HTTP.
        WorkloadCatalogue.All.Select(w => w.Name).Should().Equal("storm-90", "storm-250", "wide-250", "loopback", "big-pool", "reg-storm", "sustained", "http");
        WorkloadCatalogue.Find("storm-90")!.Full.Should().Match<WorkloadSize>(s => s.Workers == 100 && s.Capacity == 100 && s.Callers == 48 && s.Allocations == 10_000);
        WorkloadCatalogue.Find("wide-250")!.MaxConnections.Should().Be(16);
    }
}
