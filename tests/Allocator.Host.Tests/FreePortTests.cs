using Allocator.Networking;

namespace Allocator.Host.Tests;

/// <summary>
/// <c>src/Shared/FreePort.cs</c>: a port is free until its owner binds it, so one handed out must
/// not be handed out again meanwhile (a service once bound the port just given to the dashboard
/// it exported to, and the test failed with "address already in use").
/// </summary>
public sealed class FreePortTests
{
    [Fact]
    public void Next_NeverHandsOutAPortTwice_BeforeItsOwnerBindsIt()
    {
        // 1,000 draws from 12,000 ports: at random, about 40 would repeat.
        var ports = Enumerable.Range(0, 1_000).Select(_ => FreePort.Next()).ToList();

        ports.Should().OnlyHaveUniqueItems();
    }

    [Fact]
    public void Range_DoesNotOverlapPortsHandedOutBefore()
    {
        var single = Enumerable.Range(0, 300).Select(_ => FreePort.Next()).ToHashSet();

        var ranges = Enumerable.Range(0, 300).Select(_ => FreePort.Range(3)).ToList();

        var inRanges = ranges.SelectMany(first => Enumerable.Range(first, 3)).ToList();
        inRanges.Should().OnlyHaveUniqueItems("no two ranges share a port").And.NotContain(single);
    }
}
