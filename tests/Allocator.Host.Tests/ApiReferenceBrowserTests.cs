using System.Diagnostics;
using System.Text.RegularExpressions;

namespace Allocator.Host.Tests;

/// <summary>
/// The API reference page as a person sees it: loaded by a real headless Chromium (Debian's
/// <c>chromium</c>, which eng/test.sh installs when missing) from the host on loopback, rendered,
/// and read back as DOM. Fails, never skips, when Chromium is not there.
/// </summary>
public sealed partial class ApiReferenceBrowserTests
{
    [Fact]
    public async Task ApiReferencePage_RendersInChromium_ListsAllocate_FetchesNothingOffTheMachine()
    {
        await using var host = await TestHost.StartAsync();
        var page = new Uri(host.BaseAddress, "scalar/v1");
        using var profile = new TemporaryFolder();
        var netLog = Path.Combine(profile.Path, "netlog.json");

        var (exitCode, dom, errors) = await RunChromiumAsync(
        [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            $"--user-data-dir={Path.Combine(profile.Path, "profile")}",
            $"--log-net-log={netLog}",
            // No name but loopback resolves, so the page has to render from what the host serves.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--virtual-time-budget=20000",
            "--dump-dom",
            page.AbsoluteUri,
        ]);

        exitCode.Should().Be(0, $"chromium should render the page; stderr: {errors}");

        // Scalar renders each operation's summary in the sidebar and the operation list.
        dom.Should().Contain("Allocator API");
        // (The sidebar breaks "least-loaded" at its hyphen: the text after it is another node.)
        dom.Should().Contain("Allocate slots on the least", "the allocate operation is listed on the rendered page");
        dom.Should().Contain("Release an allocation");

        // Offline: every request the page made (navigation and Blink's resource loader: scripts,
        // styles, fonts, fetches) went to this host. Chromium's own background requests carry
        // other traffic annotations and are not the page's doing.
        var urls = PageRequestInNetLog().Matches(await File.ReadAllTextAsync(netLog)).Select(m => new Uri(m.Groups[2].Value)).ToList();
        urls.Should().Contain(u => u.AbsolutePath == "/openapi/v1.json", "the page loads the document from the host");
        urls.Where(u => u.Host != host.BaseAddress.Host).Select(u => u.AbsoluteUri).Should().BeEmpty("the page must work without a network: no CDN, fonts or telemetry");
    }

    private static async Task<(int ExitCode, string Stdout, string Stderr)> RunChromiumAsync(IReadOnlyList<string> args)
    {
        var executable = new[] { Environment.GetEnvironmentVariable("ALLOCATOR_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser" }
            .FirstOrDefault(p => !string.IsNullOrEmpty(p) && File.Exists(p))
            ?? throw new InvalidOperationException("Chromium not found (/usr/bin/chromium): install Debian's chromium package (eng/test.sh does) or set ALLOCATOR_CHROMIUM.");
        var start = new ProcessStartInfo(executable) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (var arg in args)
        {
            start.ArgumentList.Add(arg);
        }

        using var process = Process.Start(start)!;
        var stdout = process.StandardOutput.ReadToEndAsync();
        var stderr = process.StandardError.ReadToEndAsync();
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(90));
        try
        {
            await process.WaitForExitAsync(timeout.Token);
        }
        catch (OperationCanceledException)
        {
            process.Kill(entireProcessTree: true);
            throw new TimeoutException("Waited 90 s for headless Chromium to render the API reference page and exit.");
        }

        return (process.ExitCode, await stdout, await stderr);
    }

    /// <summary>A URL request's parameters in a net log, for the traffic annotations of navigation (63171670) and Blink's resource loader (101845102).</summary>
    [GeneratedRegex("\"traffic_annotation\":(63171670|101845102),\"url\":\"(https?://[^\"]+)\"")]
    private static partial Regex PageRequestInNetLog();

    private sealed class TemporaryFolder : IDisposable
    {
        public string Path { get; } = Directory.CreateTempSubdirectory("allocator-chromium-").FullName;

        public void Dispose()
        {
            try
            {
                Directory.Delete(Path, recursive: true);
            }
            catch (IOException)
            {
                // Chromium may still be closing files; the temp folder is cleaned by the system.
            }
        }
    }
}
