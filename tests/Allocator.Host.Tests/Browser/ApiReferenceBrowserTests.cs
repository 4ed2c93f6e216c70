namespace Allocator.Host.Tests.Browser;

/// <summary>
/// The API reference page as a person sees it: loaded by headless Chromium from the host on
/// loopback, rendered, and read back; the page's own requests, as Playwright reports them, never
/// leave the host.
/// </summary>
public sealed class ApiReferenceBrowserTests
{
    [Fact]
    public async Task ApiReferencePage_RendersInChromium_ListsAllocate_FetchesNothingOffTheMachine()
    {
        await using var host = await TestHost.StartAsync();
        await using var chromium = await Chromium.LaunchAsync();
        var page = await chromium.NewPageAsync();
        var requests = Chromium.RecordRequests(page);

        await page.GotoAsync(new Uri(host.BaseAddress, "scalar/v1").AbsoluteUri);

        // Scalar renders each operation's summary in the sidebar and the operation list.
        // (The sidebar breaks "least-loaded" at its hyphen: the text after it is another node.)
        await page.GetByText("Allocate slots on the least").First.WaitForAsync();
        await page.GetByText("Release an allocation").First.WaitForAsync();
        (await page.TitleAsync()).Should().Contain("Allocator API");
        await Chromium.ScreenshotAsync(page, "api-reference");

        // Offline: every request the page made (navigation, scripts, styles, fonts, fetches) went
        // to this host; anything else would have failed to resolve, and is listed here.
        requests.Should().Contain(u => u.AbsolutePath == "/openapi/v1.json", "the page loads the document from the host");
        requests.Where(u => u.Authority != host.BaseAddress.Authority).Select(u => u.AbsoluteUri)
            .Should().BeEmpty("the page must work without a network: no CDN, fonts or telemetry");
    }
}
