using Allocator.LoadTests.Cli;
using Allocator.LoadTests.Scenarios;
using Allocator.LoadTests.Workloads;

namespace Allocator.LoadTests.Tests.Cli;

public sealed class CommandLineTests
{
    [Fact]
    public void Parse_WorkloadWithOptions_ReadsThemAll()
    {
        var line = CommandLine.Parse(["storm-250", "--quick", "--store", "postgres", "--connection", "Host=x", "--strategies", "strict, baseline", "--out", "r", "--jitter", "2.5"]);

        line.Command.Should().Be("storm-250");
        line.Quick.Should().BeTrue();
        line.Store.Should().Be("postgres");
        line.Connection.Should().Be("Host=x");
        line.Strategies.Should().Equal("strict", "baseline");
        line.Output.Should().Be("r");
        line.JitterMs.Should().Be(2.5);
        line.Help.Should().BeFalse();
    }

    [Fact]
    public void Parse_MinutesAfterTheWorkload_SetsTheRunLength()
    {
        // The documented 30-minute run: `sustained --minutes 30` (the option was accepted only
        // before the workload's name).
        CommandLine.Parse(["sustained", "--minutes", "30", "--strategies", "pool grain"]).Minutes.Should().Be(30);
        CommandLine.UsageOf("sustained").Should().Contain("--minutes");
    }

    [Fact]
    public void Parse_KeepSchemas_IsOffUnlessGiven()
    {
        CommandLine.Parse(["loopback"]).KeepSchemas.Should().BeFalse();
        CommandLine.Parse(["loopback", "--keep-schemas"]).KeepSchemas.Should().BeTrue();
        CommandLine.Parse(["--keep-schemas", "all"]).KeepSchemas.Should().BeTrue();
        CommandLine.UsageOf("loopback").Should().Contain("--keep-schemas");
    }

    [Fact]
    public void Parse_OptionsBeforeTheCommand_AreReadToo()
    {
        var line = CommandLine.Parse(["--quick", "storm-90"]);

        line.Command.Should().Be("storm-90");
        line.Quick.Should().BeTrue();
    }

    [Fact]
    public void Parse_StoreAndAuditOptions()
    {
        var store = CommandLine.Parse(["store", "--store", "memory", "--runs", "3", "--seconds", "0.5", "--callers", "4"]);
        store.Should().Match<CommandLine>(l => l.Command == "store" && l.Store == "memory" && l.Runs == 3 && l.Seconds == 0.5 && l.Callers == 4);

        var audit = CommandLine.Parse(["audit", "--schema", "lt_1", "--pool", "p"]);
        audit.Should().Match<CommandLine>(l => l.Command == "audit" && l.Schema == "lt_1" && l.Pool == "p");
    }

    [Theory]
    [InlineData("--store", "oracle")]
    [InlineData("--runs", "0")]
    [InlineData("storm-90", "storm-250")]
    [InlineData("storm-90", "--runs")]
    [InlineData("store", "--runs=0")]
    [InlineData("store", "--seconds=-1")]
    [InlineData("storm-90", "--jitter=-1")]
    [InlineData("no-such-workload", "--quick")]
    public void Parse_BadArguments_Throw(string first, string second)
    {
        var parse = () => CommandLine.Parse([first, second]);

        parse.Should().Throw<ArgumentException>();
    }

    [Theory]
    [InlineData]
    [InlineData("--help")]
    [InlineData("-h")]
    [InlineData("help")]
    [InlineData("storm-90", "--help")]
    public void Parse_HelpOrNothing_AsksForHelp(params string[] args) =>
        CommandLine.Parse(args).Help.Should().BeTrue();

    [Fact]
    public void Usage_IsGeneratedFromTheDefinition_AndNamesEveryCommandAndOption()
    {
        foreach (var workload in WorkloadCatalogue.All)
        {
            CommandLine.Usage.Should().Contain(workload.Name).And.Contain(workload.Question);
        }

        CommandLine.Usage.Should().Contain("all").And.Contain("store").And.Contain("list").And.Contain("audit");
        foreach (var option in CommandLine.Definition.Options.Where(o => !o.Hidden))
        {
            CommandLine.Usage.Should().Contain(option.Name);
        }

        CommandLine.UsageOf("store").Should().Contain("--runs").And.Contain("--seconds").And.Contain("--callers");
        CommandLine.UsageOf("audit").Should().Contain("--schema").And.Contain("--pool");
    }

    [Fact]
    public void EveryCommandOfTheDefinition_Parses()
    {
        foreach (var command in CommandLine.Definition.Subcommands)
        {
            CommandLine.Parse([command.Name]).Command.Should().Be(command.Name);
        }
    }

    [Fact]
    public void Catalogue_HasEveryWorkloadOfTheDesign()
    {
        // The seven workloads of the design, issue 49's churn, then issue 4's figure over HTTP.
        WorkloadCatalogue.All.Select(w => w.Name).Should().Equal("storm-90", "storm-250", "wide-250", "loopback", "big-pool", "reg-storm", "sustained", "cluster", "churn", "http");
        WorkloadCatalogue.Find("churn")!.Strategies.Select(s => s.Placement).Should().Equal(Placement.Spread, Placement.Pack);
        WorkloadCatalogue.Find("loopback")!.Strategies.Should().Contain(s => s.Placement == Placement.Pack && s.Driver == DriverKind.PoolGrain);
        WorkloadCatalogue.Find("storm-90")!.Strategies.Should().Contain(s => s.Placement == Placement.Pack && s.Driver == DriverKind.Http);
        WorkloadCatalogue.Find("storm-90")!.Full.Should().Match<WorkloadSize>(s => s.Workers == 100 && s.Capacity == 100 && s.Callers == 48 && s.Allocations == 10_000);
        WorkloadCatalogue.Find("wide-250")!.MaxConnections.Should().Be(16);
    }
}
