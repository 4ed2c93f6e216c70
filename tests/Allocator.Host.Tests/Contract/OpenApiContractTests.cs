using System.Text.Json.Nodes;

namespace Allocator.Host.Tests.Contract;

/// <summary>
/// The HTTP half of the compatibility contract (issue 38, ADR 0026): this build's OpenAPI document
/// breaks nothing of the previous release's, which its own host (built from git history) serves;
/// and the comparison fails on each kind of break.
/// </summary>
public sealed class OpenApiContractTests
{
    [Fact]
    public async Task ThisBuild_BreaksNothingOfThePreviousReleasesApi()
    {
        var previous = await PreviousDocumentAsync();
        var current = await CurrentDocumentAsync();

        previous["paths"]!.AsObject().Count.Should().BeGreaterThan(5, "the previous release's document was read");
        OpenApiCompatibility.Breaks(previous, current).Should().BeEmpty(
            $"the HTTP API only grows within /v1: a client of {PreviousRelease.Version} keeps working against this build (docs/upgrading.md)");
    }

    [Fact]
    public async Task Breaks_OfADocumentAgainstItself_AreNone()
    {
        var current = await CurrentDocumentAsync();
        OpenApiCompatibility.Breaks(current, current.DeepClone()).Should().BeEmpty();
    }

    public static TheoryData<string, string> DeliberateBreaks() => new()
    {
        { "path removed", "path removed: /v1/pools/{pool}/move" },
        { "operation removed", "operation removed: DELETE /v1/pools/{pool}/allocations/{allocationId}" },
        { "required request field added", "required request field added: POST /v1/pools/{pool}/allocations request 'priority'" },
        { "request field made required", "request field made required: POST /v1/pools/{pool}/allocations request 'units'" },
        { "request field removed", "request field removed (unknown members are refused): POST /v1/pools/{pool}/allocations request 'leaseSeconds'" },
        { "required parameter added", "required parameter added: POST /v1/pools/{pool}/allocations header 'x-tenant'" },
        { "response field removed", "response field removed: POST /v1/pools/{pool}/allocations 201 'epoch'" },
        { "response type changed", "type changed: POST /v1/pools/{pool}/allocations 201.epoch: [integer] -> [string]" },
        { "response may now be null", "type changed: POST /v1/pools/{pool}/allocations 201.workerId: [string] -> [null, string]" },
        { "request accepts fewer types", "type changed: POST /v1/pools/{pool}/allocations request.units: [integer, null] -> [integer]" },
        { "success status removed", "success status removed: POST /v1/pools/{pool}/allocations 201" },
    };

    [Theory]
    [MemberData(nameof(DeliberateBreaks))]
    public async Task Breaks_ReportsEachKindOfBreak(string change, string expected)
    {
        var before = await CurrentDocumentAsync();
        var after = before.DeepClone();
        var schemas = after["components"]!["schemas"]!;
        var allocate = after["paths"]!["/v1/pools/{pool}/allocations"]!["post"]!;
        switch (change)
        {
            case "path removed":
                after["paths"]!.AsObject().Remove("/v1/pools/{pool}/move");
                break;
            case "operation removed":
                after["paths"]!["/v1/pools/{pool}/allocations/{allocationId}"]!.AsObject().Remove("delete");
                break;
            case "required request field added":
                schemas["AllocateBody"]!["properties"]!["priority"] = new JsonObject { ["type"] = "integer" };
                schemas["AllocateBody"]!["required"] = new JsonArray("priority");
                break;
            case "request field made required":
                schemas["AllocateBody"]!["required"] = new JsonArray("units");
                break;
            case "request field removed":
                schemas["AllocateBody"]!["properties"]!.AsObject().Remove("leaseSeconds");
                break;
            case "required parameter added":
                allocate["parameters"]!.AsArray().Add(new JsonObject { ["name"] = "X-Tenant", ["in"] = "header", ["required"] = true, ["schema"] = new JsonObject { ["type"] = "string" } });
                break;
            case "response field removed":
                schemas["AllocationResponse"]!["properties"]!.AsObject().Remove("epoch");
                break;
            case "response type changed":
                schemas["AllocationResponse"]!["properties"]!["epoch"] = new JsonObject { ["type"] = "string" };
                break;
            case "response may now be null":
                schemas["AllocationResponse"]!["properties"]!["workerId"]!["type"] = new JsonArray("null", "string");
                break;
            case "request accepts fewer types":
                schemas["AllocateBody"]!["properties"]!["units"]!["type"] = "integer";
                break;
            case "success status removed":
                allocate["responses"]!.AsObject().Remove("201");
                break;
        }

        OpenApiCompatibility.Breaks(before, after).Should().Contain(expected);
    }

    /// <summary>This build's document, read once from a host of its own (each caller gets a copy to change).</summary>
    private static readonly Lazy<Task<JsonNode>> Current = new(async () =>
    {
        await using var host = await TestHost.StartAsync();
        using var http = host.NewHttp(null);
        return JsonNode.Parse(await http.GetStringAsync("openapi/v1.json"))!;
    });

    private static async Task<JsonNode> CurrentDocumentAsync() => (await Current.Value).DeepClone();

    /// <summary>The previous release's document, from its own host (in-memory store, no keys): the API as its clients saw it.</summary>
    private static Task<JsonNode> PreviousDocumentAsync() =>
        HostBuild.ReadJsonAsync(Path.Combine(PreviousRelease.HostDirectory, "Allocator.Host.dll"), "openapi/v1.json");
}
