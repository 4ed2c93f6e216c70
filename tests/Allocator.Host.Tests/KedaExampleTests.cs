using System.Text.Json;
using Allocator.Client;
using Allocator.Host.Auth;
using YamlDotNet.RepresentationModel;

namespace Allocator.Host.Tests;

/// <summary>
/// The KEDA ScaledObject of docs/operations.md ("Scaling the workers with KEDA", issue 49), parsed
/// and held against the service: the URL is the pool route on the manifest's Service, the value
/// location finds the workers wanted in what a live host answers, the key goes in the header the
/// service reads, and the authentication it names exists.
/// </summary>
public sealed class KedaExampleTests
{
    private static readonly List<YamlMappingNode> Documents = Load();

    [Fact]
    public void Trigger_ReadsThePoolRoute_ThroughTheManifestsService_WithTheServicesKeyHeader()
    {
        var metadata = Map(Trigger(), "metadata");
        Text(Trigger(), "type").Should().Be("metrics-api");
        var url = new Uri(Text(metadata, "url"));
        url.Host.Should().Be(ServiceName(), "the Service of the Kubernetes manifest above it");
        url.Port.Should().Be(80, "the Service's http port");
        url.AbsolutePath.Should().MatchRegex("^/v1/pools/[^/]+$", "GET /v1/pools/{pool} answers the demand");
        Text(metadata, "targetValue").Should().Be("1", "one worker replica per worker wanted");
        Text(metadata, "authMode").Should().Be("apiKey");
        Text(metadata, "method").Should().Be("header");
        Text(metadata, "keyParamName").Should().Be(ApiKeyMiddleware.HeaderName);

        var authentication = Documents.Single(d => Text(d, "kind") == "TriggerAuthentication");
        Text(Map(authentication, "metadata"), "name").Should().Be(Text(Map(Trigger(), "authenticationRef"), "name"));
        ((YamlSequenceNode)Map(authentication, "spec").Children["secretTargetRef"]).Cast<YamlMappingNode>()
            .Should().Contain(r => Text(r, "parameter") == "apiKey", "KEDA's apiKey mode reads the key from the parameter apiKey");
    }

    [Fact]
    public async Task ValueLocation_FindsTheWorkersWanted_InWhatTheServiceAnswers()
    {
        await using var host = await TestHost.StartAsync();
        var pool = Unique.Name("keda");
        await host.Admin.PutPoolAsync(pool, new Client.PoolSettings { Placement = "pack" });
        await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 4));
        (await host.Broker.AllocateAsync(pool, new AllocateRequest(), "k-1")).Status.Should().Be(AllocateStatus.Allocated);

        using var answer = JsonDocument.Parse(await host.Http.GetStringAsync($"v1/pools/{pool}"));
        var value = answer.RootElement;
        foreach (var step in Text(Map(Trigger(), "metadata"), "valueLocation").Split('.'))
        {
            value.TryGetProperty(step, out value).Should().BeTrue($"the answer has '{step}' on the way to the value: {answer.RootElement}");
        }

        value.ValueKind.Should().Be(JsonValueKind.Number);
        value.GetInt64().Should().Be(1, "one slot in use, 20% buffer, 4 slots per worker");
    }

    private static YamlMappingNode Trigger() =>
        ((YamlSequenceNode)Map(Documents.Single(d => Text(d, "kind") == "ScaledObject"), "spec").Children["triggers"]).Cast<YamlMappingNode>().Single();

    private static string ServiceName()
    {
        var markdown = File.ReadAllText(Path.Combine(Repository.Root, "docs", "operations.md"));
        var service = Blocks(markdown).SelectMany(Parse).Single(d => Text(d, "kind") == "Service");
        return Text(Map(service, "metadata"), "name");
    }

    private static List<YamlMappingNode> Load()
    {
        var markdown = File.ReadAllText(Path.Combine(Repository.Root, "docs", "operations.md"));
        var blocks = Blocks(markdown).Where(b => b.Contains("kind: ScaledObject\n", StringComparison.Ordinal)).ToList();
        blocks.Should().ContainSingle("docs/operations.md has one yaml block with the KEDA ScaledObject");
        return Parse(blocks[0]);
    }

    private static IEnumerable<string> Blocks(string markdown) =>
        System.Text.RegularExpressions.Regex.Matches(markdown, "```yaml\\n(.*?)```", System.Text.RegularExpressions.RegexOptions.Singleline).Select(m => m.Groups[1].Value);

    private static List<YamlMappingNode> Parse(string block)
    {
        var stream = new YamlStream();
        stream.Load(new StringReader(block));
        return [.. stream.Documents.Select(d => (YamlMappingNode)d.RootNode)];
    }

    private static YamlMappingNode Map(YamlMappingNode node, string key) => (YamlMappingNode)node.Children[key];

    private static string Text(YamlMappingNode node, string key) => ((YamlScalarNode)node.Children[key]).Value!;
}
