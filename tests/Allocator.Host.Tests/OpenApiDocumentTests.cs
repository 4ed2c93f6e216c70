using System.Text.Json.Nodes;

namespace Allocator.Host.Tests;

/// <summary>What a reader of /openapi/v1.json (and of the reference page built from it) gets: summaries, examples, problem types.</summary>
[Collection(SharedHostCollection.Name)]
public sealed class OpenApiDocumentTests(SharedHostFixture fixture)
{
    [Fact]
    public async Task Allocate_HasSummaryExamplesAndItsProblemTypes()
    {
        var document = await LoadAsync();
        var allocate = document["paths"]!["/v1/pools/{pool}/allocations"]!["post"]!;

        allocate["operationId"]!.GetValue<string>().Should().Be("Allocate");
        allocate["summary"]!.GetValue<string>().Should().StartWith("Allocate slots on the least-loaded eligible worker");
        allocate["tags"]!.AsArray().Select(t => t!.GetValue<string>()).Should().Equal("Allocations");
        allocate["requestBody"]!["content"]!["application/json"]!["example"]!["units"]!.GetValue<int>().Should().Be(1);
        allocate["responses"]!["201"]!["content"]!["application/json"]!["example"]!["workerId"]!.GetValue<string>().Should().NotBeEmpty();

        var conflict = allocate["responses"]!["409"]!;
        conflict["description"]!.GetValue<string>().Should().Contain("https://allocator.dev/problems/no-capacity").And.Contain("https://allocator.dev/problems/conflict");
        var example = conflict["content"]!["application/problem+json"]!["example"]!;
        example["type"]!.GetValue<string>().Should().Be("https://allocator.dev/problems/no-capacity");
        example["status"]!.GetValue<int>().Should().Be(409);
        allocate["responses"]!["503"]!["description"]!.GetValue<string>().Should().Contain("https://allocator.dev/problems/unavailable");
    }

    [Fact]
    public async Task EveryV1Operation_HasASummary_AndEveryErrorResponseNamesItsProblemTypes()
    {
        var document = await LoadAsync();
        var operations = document["paths"]!.AsObject()
            .Where(p => p.Key.StartsWith("/v1/", StringComparison.Ordinal))
            .SelectMany(p => p.Value!.AsObject().Select(o => (Name: $"{o.Key.ToUpperInvariant()} {p.Key}", Operation: o.Value!)))
            .ToList();
        operations.Should().HaveCountGreaterThan(10);
        foreach (var (name, operation) in operations)
        {
            operation["summary"]?.GetValue<string>().Should().NotBeNullOrWhiteSpace($"{name} has a summary");
            foreach (var (status, response) in operation["responses"]!.AsObject().Where(r => int.Parse(r.Key) >= 400))
            {
                response!["description"]!.GetValue<string>().Should().Contain("https://allocator.dev/problems/", $"{name} {status} names its problem types");
                response["content"]!["application/problem+json"].Should().NotBeNull($"{name} {status} is a problem response");
            }
        }

        document["info"]!["description"]!.GetValue<string>().Should().Contain("`stale-epoch`");
    }

    private async Task<JsonNode> LoadAsync()
    {
        using var http = new HttpClient { BaseAddress = fixture.Host.BaseAddress };
        return JsonNode.Parse(await http.GetStringAsync("openapi/v1.json"))!;
    }
}
