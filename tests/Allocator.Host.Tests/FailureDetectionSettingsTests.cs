using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Options;
using Orleans.Configuration;

namespace Allocator.Host.Tests;

/// <summary>
/// The failure-detection settings the host gives its silo (ADR 0031): a hung instance is voted
/// dead by direct probes alone, and votes are not held back for Orleans' 4 x the probe timeout.
/// </summary>
public sealed class FailureDetectionSettingsTests
{
    [Fact]
    public async Task Defaults_DirectProbesOnly_AndTheLivenessWindowIsTheProbeTimeout()
    {
        await using var host = await TestHost.StartAsync();

        var options = host.Services.GetRequiredService<IOptions<ClusterMembershipOptions>>().Value;

        options.ProbeTimeout.Should().Be(TimeSpan.FromSeconds(1));
        options.EnableIndirectProbes.Should().BeFalse("an indirect probe of a hung silo fails as 'unknown' and never votes (issue 47)");
        options.MaxProbeTimeout.Should().Be(options.ProbeTimeout, "votes are held back for MaxProbeTimeout x NumMissedProbesLimit after the last message");
        options.NumMissedProbesLimit.Should().Be(3, "one lost probe or one pause must not start a vote");
        options.DeathVoteExpirationTimeout.Should().Be(TimeSpan.FromSeconds(10),
            "a vote by a silo since declared dead must not outlive the next cut by two minutes (silo-partition: a healthy silo was declared dead by it and one more)");
    }

    [Fact]
    public async Task ProbeTimeoutConfigured_TheLivenessWindowFollowsIt_UnlessConfiguredItself()
    {
        await using (var host = await TestHost.StartAsync(["--Allocator:Cluster:Probing:ProbeTimeout=00:00:02"]))
        {
            var options = host.Services.GetRequiredService<IOptions<ClusterMembershipOptions>>().Value;
            options.MaxProbeTimeout.Should().Be(TimeSpan.FromSeconds(2));
            options.DeathVoteExpirationTimeout.Should().Be(TimeSpan.FromSeconds(20));
        }

        await using (var host = await TestHost.StartAsync(["--Allocator:Cluster:Probing:ProbeTimeout=00:00:02", "--Allocator:Cluster:Probing:MaxProbeTimeout=00:00:05", "--Allocator:Cluster:Probing:EnableIndirectProbes=true", "--Allocator:Cluster:Probing:DeathVoteExpirationTimeout=00:01:00"]))
        {
            var options = host.Services.GetRequiredService<IOptions<ClusterMembershipOptions>>().Value;
            options.MaxProbeTimeout.Should().Be(TimeSpan.FromSeconds(5));
            options.DeathVoteExpirationTimeout.Should().Be(TimeSpan.FromMinutes(1));
            options.EnableIndirectProbes.Should().BeTrue();
        }
    }
}
