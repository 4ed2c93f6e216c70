using System.Globalization;
using System.Text.RegularExpressions;
using Xunit.Abstractions;

namespace Allocator.Host.Tests.Browser;

/// <summary>
/// What a newcomer does with <c>eng/run.sh --dashboard</c>: allocate with the printed key, open
/// the trace viewer (the standalone Aspire dashboard) in a browser, find the allocation's trace
/// and read its span tree, from the HTTP request through the grain call down to the SQL statement.
/// </summary>
public sealed partial class TraceViewerBrowserTests(ITestOutputHelper output)
{
    [Fact]
    public async Task RunWithDashboard_Allocate_TheTracesPageShowsHttpGrainCallAndStatementInOneTree()
    {
        await using var run = await RunScript.StartAsync(instances: 1, output, dashboard: true);
        run.Dashboard.Should().NotBeNull("eng/run.sh --dashboard prints the trace viewer's address");

        // The allocation, as the printed curl line sends it, with a trace id of our choosing so
        // that its trace can be told from the demo set-up's.
        var traceId = Convert.ToHexStringLower(Guid.NewGuid().ToByteArray());
        using var http = new HttpClient { BaseAddress = run.Urls[0], Timeout = TimeSpan.FromSeconds(30) };
        using var request = new HttpRequestMessage(HttpMethod.Post, "v1/pools/demo/allocations") { Content = System.Net.Http.Json.JsonContent.Create(new { units = 1 }) };
        request.Headers.Add("X-Api-Key", run.Key);
        request.Headers.Add("Idempotency-Key", "trace-viewer-" + traceId);
        request.Headers.Add("traceparent", $"00-{traceId}-{traceId[..16]}-01");
        using (var response = await http.SendAsync(request))
        {
            response.StatusCode.Should().Be(System.Net.HttpStatusCode.Created);
        }

        await using var chromium = await Chromium.LaunchAsync();
        var page = await chromium.NewPageAsync();
        var requests = Chromium.RecordRequests(page);

        // The traces page updates itself as spans arrive (they are exported within a second), but
        // only once its Blazor circuit is connected: on a busy machine the first render may come
        // before the trace and never update (seen in a full suite), so load the page again.
        var row = page.Locator($"td[title*='Trace Id: {traceId}']");
        for (var attempt = 1; ; attempt++)
        {
            await page.GotoAsync(new Uri(run.Dashboard!, "traces").AbsoluteUri);
            try
            {
                await row.First.WaitForAsync(new() { Timeout = 15_000 });
                break;
            }
            catch (TimeoutException) when (attempt < 4)
            {
            }
        }

        (await row.First.InnerTextAsync()).Should().Contain("POST /v1/pools/{pool}/allocations");
        await Chromium.ScreenshotAsync(page, "trace-viewer-traces");
        // The dashboard is a Blazor Server app: a click that lands before its circuit is connected
        // (a busy machine) does nothing, so click again until the page goes to the trace; a click
        // that did navigate, only later than the wait, leaves no row to click again.
        var detail = new Regex($"/traces/detail/{traceId}");
        for (var attempt = 1; !detail.IsMatch(page.Url); attempt++)
        {
            try
            {
                if (await row.First.IsVisibleAsync())
                {
                    await row.First.ClickAsync(new() { Timeout = 10_000 });
                }

                await page.WaitForURLAsync(detail, new() { Timeout = 10_000, WaitUntil = Microsoft.Playwright.WaitUntilState.Commit });
            }
            catch (TimeoutException) when (attempt < 6)
            {
            }
        }

        // The span tree: one row per span, indented by depth.
        var spanRows = page.Locator("tr.fluent-data-grid-row td.expand-col[title^='allocator: ']");
        await spanRows.Filter(new() { HasText = "postgresql" }).First.WaitForAsync(new() { Timeout = 60_000 });
        List<(string Name, int Depth)> tree = [];
        foreach (var cell in await spanRows.AllAsync())
        {
            var name = (await cell.GetAttributeAsync("title"))!["allocator: ".Length..].Split('\n')[0].Trim();
            var indent = await cell.EvaluateAsync<string>("c => getComputedStyle(c.querySelector('.span-overview-container > span')).marginLeft");
            tree.Add((name, (int)double.Parse(indent.Replace("px", "", StringComparison.Ordinal), CultureInfo.InvariantCulture)));
        }

        output.WriteLine(string.Join(Environment.NewLine, tree.Select(s => $"{new string(' ', s.Depth / 5)}{s.Name}")));
        await Chromium.ScreenshotAsync(page, "trace-viewer-allocation");

        var statement = tree.FindLastIndex(s => s.Name == "postgresql");
        statement.Should().BeGreaterThan(0, "the PostgreSQL statement is a span of the trace");
        var ancestors = Ancestors(tree, statement).Select(i => tree[i].Name).ToList();
        ancestors.Should().ContainInOrder(
            ["allocator.store.allocate", "allocator.batch", "allocator.grain.allocate", "IPoolGrain/AllocateAsync", "allocator.allocate", "POST /v1/pools/{pool}/allocations"],
            "the statement sits below the store call, the batch, the pool grain, the Orleans grain call and the HTTP server span");
        tree[0].Name.Should().Be("POST /v1/pools/{pool}/allocations", "the HTTP server span is the root");
        requests.Where(u => u.Authority != run.Dashboard!.Authority).Should().BeEmpty("the dashboard serves everything it shows");
    }

    [Theory]
    [InlineData("http://0.0.0.0:18888", "http://127.0.0.1:4317")]
    [InlineData("http://127.0.0.1:18888", "http://192.0.2.1:4317")]
    public async Task RunWithDashboard_OffLoopbackWithoutAToken_RefusesBeforeStartingAnything(string page, string otlp)
    {
        var start = new System.Diagnostics.ProcessStartInfo("bash", ["eng/run.sh", "--dashboard"])
        {
            WorkingDirectory = Repository.Root,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        start.Environment["ALLOCATOR_DASHBOARD_URL"] = page;
        start.Environment["ALLOCATOR_DASHBOARD_OTLP_URL"] = otlp;
        start.Environment.Remove("ALLOCATOR_DASHBOARD_TOKEN");
        start.Environment["ALLOCATOR_NO_BUILD"] = "1";
        using var script = System.Diagnostics.Process.Start(start)!;
        var stdout = script.StandardOutput.ReadToEndAsync();
        var stderr = await script.StandardError.ReadToEndAsync();
        await script.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(30));

        script.ExitCode.Should().Be(2, stderr);
        stderr.Should().Contain("refusing to serve").And.Contain("ALLOCATOR_DASHBOARD_TOKEN");
        (await stdout).Should().NotContain("Allocator is running");
    }

    /// <summary>The rows above <paramref name="index"/> in its branch, nearest first: each the closest earlier row one level up.</summary>
    private static IEnumerable<int> Ancestors(List<(string Name, int Depth)> rows, int index)
    {
        var depth = rows[index].Depth;
        for (var i = index - 1; i >= 0; i--)
        {
            if (rows[i].Depth < depth)
            {
                depth = rows[i].Depth;
                yield return i;
            }
        }
    }
}
