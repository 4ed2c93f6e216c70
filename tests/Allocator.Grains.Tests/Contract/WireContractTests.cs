using Allocator.Testing;

namespace Allocator.Grains.Tests.Contract;

/// <summary>
/// The grains' half of the compatibility contract (issue 38, ADR 0026): two adjacent releases share
/// one cluster, so every wire identity the previous release has is kept by this one, and every
/// identity this build has is tracked in src/Allocator.Grains/WireContract.Shipped.txt (released)
/// or WireContract.Unshipped.txt (new since the last release), as the public API is.
/// </summary>
public sealed class WireContractTests
{
    private static readonly string ContractDirectory = Path.Combine(Repository.Root, "src", "Allocator.Grains");

    private static readonly Lazy<WireIdentities> ThisBuild = new(() => WireContract.Read(AppContext.BaseDirectory));

    private static IReadOnlyList<string> Shipped => WireContract.Parse(File.ReadLines(Path.Combine(ContractDirectory, "WireContract.Shipped.txt")));

    private static IReadOnlyList<string> Unshipped => WireContract.Parse(File.ReadLines(Path.Combine(ContractDirectory, "WireContract.Unshipped.txt")));

    [Fact]
    public void ThisBuild_KeepsEveryShippedIdentity()
    {
        WireContract.Broken(Shipped, ThisBuild.Value).Should().BeEmpty(
            "a shipped grain method, grain, serialized type, field or enum value is never changed or removed: the previous release's silos still send and expect it (add a new one instead; docs/upgrading.md)");
    }

    [Fact]
    public void ThisBuild_HasNoUntrackedIdentity()
    {
        var tracked = Shipped.Concat(Unshipped).ToHashSet(StringComparer.Ordinal);
        var untracked = ThisBuild.Value.Lines.Where(line => !tracked.Contains(WireContract.Identity(line))).ToList();
        untracked.Should().BeEmpty(
            "every wire identity is tracked: add these lines to src/Allocator.Grains/WireContract.Unshipped.txt (they move to Shipped when released):" + Environment.NewLine + string.Join(Environment.NewLine, untracked));
        WireContract.Broken(Unshipped, ThisBuild.Value).Should().BeEmpty("WireContract.Unshipped.txt lists only what this build has");
    }

    [Fact]
    public void ThisBuild_KeepsEveryIdentityOfThePreviousRelease_BuiltFromGitHistory()
    {
        var previous = WireContract.Read(PreviousRelease.HostDirectory);
        previous.Lines.Should().Contain(l => l.StartsWith("method ", StringComparison.Ordinal), "the previous release's grain methods were read");
        WireContract.Broken(previous.Lines, ThisBuild.Value).Should().BeEmpty(
            $"this build must share a cluster with {PreviousRelease.Version} ({PreviousRelease.Commit[..7]}): every wire identity it has is kept");
        foreach (var (name, version) in previous.InterfaceVersions)
        {
            ThisBuild.Value.InterfaceVersions.Should().ContainKey(name).WhoseValue.Should().BeGreaterThanOrEqualTo(version, $"{name}'s [Version] never goes down");
        }

        Shipped.Should().Contain(previous.Lines.Select(WireContract.Identity), "what the previous release shipped is in the shipped list");
    }

    [Fact]
    public void EverySerializedType_HasAnAlias_AndEveryGrainMethodAPinnedId()
    {
        ThisBuild.Value.SerializedTypesWithoutAlias.Should().BeEmpty("a type named by its CLR name breaks the wire when it is renamed or moved: give it [Alias(\"allocator.…\")]");
        foreach (var grainInterface in new[] { typeof(IPoolGrain), typeof(IRegistrationBatcherGrain) })
        {
            grainInterface.GetMethods().Where(m => m.GetCustomAttributes(typeof(AliasAttribute), inherit: false).Length == 0)
                .Select(m => m.Name).Should().BeEmpty($"every method of {grainInterface.Name} pins its wire id with [Alias] (a signature change must not silently change it)");
        }
    }

    /// <summary>
    /// The check fails on a deliberate break of each kind: had the shipped build had the other
    /// line (the code since changed it), this build no longer has what it shipped.
    /// </summary>
    [Theory]
    [InlineData("#B489C659 (System.Guid, System.Int64, System.String, ", "#B489C659 (System.Guid, System.Int64, ")] // an argument removed
    [InlineData("#B489C659 ", "#0BADC0DE ")] // a method id changed (its alias, or its signature without one)
    [InlineData("field allocator.allocation-request 6 System.String", "field allocator.allocation-request 6 System.Int32")] // a field's type changed
    [InlineData("type allocator.allocation-outcome", "type allocator.allocation-result")] // a serialized type's alias renamed
    [InlineData("enum Allocator.AllocationStatus NoCapacity=", "enum Allocator.AllocationStatus NoCapacity=9")] // an enum's number changed
    [InlineData("grain allocator-pool", "grain pool")] // a grain type renamed
    [InlineData("interface Allocator.Grains.IPoolGrain,", "interface Allocator.Grains.Pools.IPoolGrain,")] // a grain interface moved
    public void Broken_ReportsAShippedIdentityThisBuildNoLongerHas(string find, string replaceWith)
    {
        var line = Shipped.Single(l => l.Contains(find, StringComparison.Ordinal));
        var altered = line.Replace(find, replaceWith, StringComparison.Ordinal);
        var shipped = Shipped.Select(l => l == line ? altered : l).ToList();

        WireContract.Broken(shipped, ThisBuild.Value).Should().Equal([altered], "the altered identity is the one break");
        WireContract.Broken(Shipped, ThisBuild.Value).Should().BeEmpty("and without it there is none");
    }
}
