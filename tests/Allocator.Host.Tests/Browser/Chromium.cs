using System.Collections.Concurrent;
using Microsoft.Playwright;

namespace Allocator.Host.Tests.Browser;

/// <summary>
/// Debian's headless <c>chromium</c> (which eng/test.sh installs when missing) driven by
/// Playwright for .NET through its executable path: Playwright's own browser download is neither
/// used nor reachable. Fails, never skips, when chromium is not there.
/// </summary>
/// <remarks>
/// Only loopback names resolve in it, so a page has to render from what this machine serves: a
/// request to a CDN, a font host or a telemetry service fails, and the page's requests
/// (<see cref="RecordRequests"/>) show it.
/// </remarks>
internal sealed class Chromium : IAsyncDisposable
{
    private readonly IPlaywright _playwright;

    private Chromium(IPlaywright playwright, IBrowser browser)
    {
        _playwright = playwright;
        Browser = browser;
    }

    public IBrowser Browser { get; }

    /// <summary>The chromium executable: <c>ALLOCATOR_CHROMIUM</c>, else Debian's.</summary>
    /// <exception cref="InvalidOperationException">None found (the test fails with the reason).</exception>
    public static string ExecutablePath() =>
        new[] { Environment.GetEnvironmentVariable("ALLOCATOR_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser" }
            .FirstOrDefault(p => !string.IsNullOrEmpty(p) && File.Exists(p))
        ?? throw new InvalidOperationException("Chromium not found (/usr/bin/chromium): install Debian's chromium package (eng/test.sh does) or set ALLOCATOR_CHROMIUM.");

    public static async Task<Chromium> LaunchAsync()
    {
        var executable = ExecutablePath();
        var playwright = await Playwright.CreateAsync();
        try
        {
            var browser = await playwright.Chromium.LaunchAsync(new BrowserTypeLaunchOptions
            {
                ExecutablePath = executable,
                Headless = true,
                Timeout = 60_000,
                Args =
                [
                    "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                ],
            });
            return new Chromium(playwright, browser);
        }
        catch
        {
            playwright.Dispose();
            throw;
        }
    }

    /// <summary>A page in a context of its own (no state shared between tests), 1600×1000.</summary>
    public async Task<IPage> NewPageAsync(BrowserNewContextOptions? options = null)
    {
        options ??= new BrowserNewContextOptions();
        options.ViewportSize ??= new ViewportSize { Width = 1600, Height = 1000 };
        var context = await Browser.NewContextAsync(options);
        context.SetDefaultTimeout(30_000);
        return await context.NewPageAsync();
    }

    /// <summary>Every URL the page requests from now on (navigation, scripts, styles, fonts, fetches).</summary>
    public static ConcurrentQueue<Uri> RecordRequests(IPage page)
    {
        var requests = new ConcurrentQueue<Uri>();
        page.Request += (_, request) => requests.Enqueue(new Uri(request.Url));
        return requests;
    }

    /// <summary>Saves a screenshot of the viewport as <c>artifacts/browser/NAME.png</c> and returns its path.</summary>
    public static async Task<string> ScreenshotAsync(IPage page, string name)
    {
        var path = Path.Combine(Repository.Artifacts("browser"), name + ".png");
        await page.ScreenshotAsync(new PageScreenshotOptions { Path = path });
        return path;
    }

    public async ValueTask DisposeAsync()
    {
        await Browser.DisposeAsync();
        _playwright.Dispose();
    }
}
