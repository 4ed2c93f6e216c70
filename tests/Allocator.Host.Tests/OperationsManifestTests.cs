using System.Globalization;
using System.Text.RegularExpressions;
using Allocator.Host.Lifecycle;
using Allocator.Host.Options;
using YamlDotNet.RepresentationModel;

namespace Allocator.Host.Tests;

/// <summary>
/// The example Kubernetes manifest in docs/operations.md, parsed and held against the service's
/// own defaults, so that the documentation cannot drift from the code it describes.
/// </summary>
public sealed partial class OperationsManifestTests
{
    private static readonly Manifest Docs = Manifest.Load();

    [Fact]
    public void Probes_UseTheServicesHealthEndpoints_OnTheHttpPort()
    {
        var container = Docs.Container;
        Text(container, "readinessProbe", "httpGet", "path").Should().Be(HealthEndpoints.Ready);
        Text(container, "livenessProbe", "httpGet", "path").Should().Be(HealthEndpoints.Live);
        Text(container, "readinessProbe", "httpGet", "port").Should().Be("http");
        Text(container, "livenessProbe", "httpGet", "port").Should().Be("http");
    }

    [Fact]
    public void ReadinessProbe_WaitsLongerThanTheStoreCheck_AndNoticesAStopWithinTheDrainDelay()
    {
        var container = Docs.Container;
        var timeouts = new AllocatorTimeoutOptions();
        TimeSpan.FromSeconds(Number(container, "readinessProbe", "timeoutSeconds")).Should().BeGreaterThan(timeouts.CommandTimeout,
            "the store check waits up to the command timeout before it answers 503");
        var noticed = TimeSpan.FromSeconds(Number(container, "readinessProbe", "periodSeconds") * Number(container, "readinessProbe", "failureThreshold"));
        noticed.Should().BeLessThanOrEqualTo(Docs.Shutdown.DrainDelay, "a load balancer following readiness takes the instance out before its listener closes");
    }

    [Fact]
    public void TerminationGracePeriod_CoversThePreStopSleepAndTheStopBound()
    {
        var pod = Docs.PodSpec;
        var grace = TimeSpan.FromSeconds(Number(pod, "terminationGracePeriodSeconds"));
        var preStop = TimeSpan.FromSeconds(Number(Docs.Container, "lifecycle", "preStop", "sleep", "seconds"));

        grace.Should().BeGreaterThanOrEqualTo(preStop + Docs.Shutdown.StopBound,
            $"Kubernetes kills the container after the grace period; the stop bound is {Docs.Shutdown.StopBound.TotalSeconds} s");
    }

    [Fact]
    public void Ports_AreTheOnesTheServiceListensOn()
    {
        var container = Docs.Container;
        var ports = ((YamlSequenceNode)container.Children["ports"]).Cast<YamlMappingNode>().ToDictionary(p => Text(p, "name"), p => Number(p, "containerPort"));
        var urls = Docs.Env("ALLOCATOR_URLS");
        UrlPort().Match(urls).Groups[1].Value.Should().Be(ports["http"].ToString(CultureInfo.InvariantCulture), "the container's http port is the one ALLOCATOR_URLS listens on");
        ports["silo"].Should().Be(new AllocatorClusterOptions().SiloPort, "the silo port is the service's default");
        Docs.Env("Allocator__Cluster__SiloPort").Should().Be(ports["silo"].ToString(CultureInfo.InvariantCulture));
        Text(Docs.Service, "spec", "ports", 0, "targetPort").Should().Be("http");
    }

    [Fact]
    public void Cluster_KeepsMembershipInPostgreSql_AdvertisingThePodsAddress()
    {
        Docs.Env("Allocator__Cluster__Membership").Should().Be("postgres");
        Text(Docs.EnvEntry("Allocator__Cluster__AdvertisedAddress"), "valueFrom", "fieldRef", "fieldPath").Should().Be("status.podIP");
        Text(Docs.EnvEntry("ConnectionStrings__Allocator"), "valueFrom", "secretKeyRef", "key").Should().NotBeEmpty("the connection string comes from a Secret");
        Docs.Env("Allocator__Cluster__ClusterId").Should().Be(new AllocatorClusterOptions().ClusterId);
    }

    [Fact]
    public void RollingUpdate_ReplacesOnePodAtATime_AmongSeveral()
    {
        var deployment = Docs.Deployment;
        Number(deployment, "spec", "replicas").Should().BeGreaterThanOrEqualTo(3, "two instances left can still out-vote a dead one");
        Text(deployment, "spec", "strategy", "rollingUpdate", "maxUnavailable").Should().Be("0");
        Text(Docs.Service, "spec", "selector", "app").Should().Be(Text(deployment, "spec", "template", "metadata", "labels", "app"));
    }

    private static string Text(YamlNode node, params object[] path)
    {
        foreach (var step in path)
        {
            node = step switch
            {
                string key => ((YamlMappingNode)node).Children[new YamlScalarNode(key)],
                int index => ((YamlSequenceNode)node).Children[index],
                _ => throw new ArgumentException($"Bad path step {step}."),
            };
        }

        return ((YamlScalarNode)node).Value ?? "";
    }

    private static int Number(YamlNode node, params object[] path) => int.Parse(Text(node, path), CultureInfo.InvariantCulture);

    [GeneratedRegex(@":(\d+)/?$")]
    private static partial Regex UrlPort();

    /// <summary>The manifest: the <c>yaml</c> block of docs/operations.md, a Service and a Deployment.</summary>
    private sealed class Manifest
    {
        private Manifest(YamlMappingNode service, YamlMappingNode deployment)
        {
            Service = service;
            Deployment = deployment;
            PodSpec = (YamlMappingNode)((YamlMappingNode)((YamlMappingNode)deployment.Children["spec"]).Children["template"]).Children["spec"];
            Container = (YamlMappingNode)((YamlSequenceNode)PodSpec.Children["containers"]).Single();

            // The stop bound with the defaults, and whatever the manifest sets instead.
            Shutdown = new AllocatorShutdownOptions();
            if (TryEnv("Allocator__Shutdown__DrainDelay") is { } drain)
            {
                Shutdown.DrainDelay = TimeSpan.Parse(drain, CultureInfo.InvariantCulture);
            }

            if (TryEnv("Allocator__Shutdown__RequestDrainTimeout") is { } requests)
            {
                Shutdown.RequestDrainTimeout = TimeSpan.Parse(requests, CultureInfo.InvariantCulture);
            }

            if (TryEnv("Allocator__Shutdown__SiloStopTimeout") is { } silo)
            {
                Shutdown.SiloStopTimeout = TimeSpan.Parse(silo, CultureInfo.InvariantCulture);
            }
        }

        public YamlMappingNode Service { get; }

        public YamlMappingNode Deployment { get; }

        public YamlMappingNode PodSpec { get; }

        public YamlMappingNode Container { get; }

        public AllocatorShutdownOptions Shutdown { get; }

        public static Manifest Load()
        {
            var markdown = File.ReadAllText(Path.Combine(Repository.Root, "docs", "operations.md"));
            var documents = Documents(markdown, "Deployment");
            YamlMappingNode Of(string kind) => documents.Single(d => Text(d, "kind") == kind);
            return new Manifest(Of("Service"), Of("Deployment"));
        }

        public YamlMappingNode EnvEntry(string name) =>
            ((YamlSequenceNode)Container.Children["env"]).Cast<YamlMappingNode>().Single(e => Text(e, "name") == name);

        public string Env(string name) => Text(EnvEntry(name), "value");

        private string? TryEnv(string name) =>
            ((YamlSequenceNode)Container.Children["env"]).Cast<YamlMappingNode>().Any(e => Text(e, "name") == name) ? Env(name) : null;
    }

    /// <summary>The documents of the one <c>yaml</c> block of docs/operations.md that holds a <paramref name="kind"/>.</summary>
    private static List<YamlMappingNode> Documents(string markdown, string kind)
    {
        var blocks = YamlBlock().Matches(markdown).Select(m => m.Groups[1].Value).Where(b => b.Contains($"kind: {kind}\n", StringComparison.Ordinal)).ToList();
        blocks.Should().ContainSingle($"docs/operations.md has one yaml block with a {kind}");
        var stream = new YamlStream();
        stream.Load(new StringReader(blocks[0]));
        return [.. stream.Documents.Select(d => (YamlMappingNode)d.RootNode)];
    }

    [GeneratedRegex("```yaml\\n(.*?)```", RegexOptions.Singleline)]
    private static partial Regex YamlBlock();
}
