using System.Diagnostics;
using System.Globalization;
using Allocator.Networking;

namespace Allocator.LoadTests.Integration;

/// <summary>
/// One <c>Allocator.Host.dll</c> process as deployed (the build output next to the load tests'),
/// on a free HTTP port, with an <see cref="HttpClient"/> for it. Disposing sends SIGTERM (a
/// graceful stop) and kills it after 30 s.
/// </summary>
internal sealed class HostProcess : IAsyncDisposable
{
    private HostProcess(Process process, HttpClient http)
    {
        Process = process;
        Http = http;
    }

    public Process Process { get; }

    /// <summary>The host's base address, with connections enough for a storm.</summary>
    public HttpClient Http { get; }

    /// <param name="args">Arguments after the assembly and the URL (configuration as <c>--Key=value</c>).</param>
    /// <param name="environment">Extra environment variables.</param>
    public static HostProcess Start(IEnumerable<string> args, IReadOnlyDictionary<string, string>? environment = null)
    {
        var host = HostAssembly();
        var httpPort = FreePort.Next();
        var start = new ProcessStartInfo("dotnet")
        {
            WorkingDirectory = Path.GetDirectoryName(host)!,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        foreach (var arg in (string[])[host, "--urls", $"http://127.0.0.1:{httpPort}", "--environment", "Production", "--Logging:LogLevel:Default", "Warning", .. args])
        {
            start.ArgumentList.Add(arg);
        }

        foreach (var (name, value) in environment ?? new Dictionary<string, string>())
        {
            start.Environment[name] = value;
        }

        var process = Process.Start(start) ?? throw new InvalidOperationException("Could not start a host process.");
        _ = DrainAsync(process.StandardOutput);
        _ = DrainAsync(process.StandardError);
        var http = new HttpClient(new SocketsHttpHandler { MaxConnectionsPerServer = 2_048, PooledConnectionLifetime = Timeout.InfiniteTimeSpan, UseProxy = false })
        {
            BaseAddress = new Uri($"http://127.0.0.1:{httpPort}/"),
            Timeout = TimeSpan.FromSeconds(60),
        };
        return new HostProcess(process, http);
    }

    /// <summary>Ready means the stores are migrated and the silo has joined its cluster.</summary>
    public async Task WaitReadyAsync(CancellationToken cancellationToken)
    {
        var watch = Stopwatch.StartNew();
        while (watch.Elapsed < TimeSpan.FromSeconds(90))
        {
            if (Process.HasExited)
            {
                throw new InvalidOperationException($"A host process exited during start-up (exit code {Process.ExitCode}).");
            }

            try
            {
                using var response = await Http.GetAsync("health/ready", cancellationToken);
                if (response.IsSuccessStatusCode)
                {
                    return;
                }
            }
            catch (HttpRequestException)
            {
                // not listening yet
            }

            await Task.Delay(200, cancellationToken);
        }

        throw new TimeoutException("A host process was not ready within 90 s.");
    }

    /// <summary>Sends SIGTERM (a graceful stop: the silo leaves its cluster, batches in flight finish).</summary>
    public async Task TerminateAsync()
    {
        Http.Dispose();
        if (!Process.HasExited)
        {
            using var term = Process.Start("kill", ["-TERM", Process.Id.ToString(CultureInfo.InvariantCulture)]);
            await term.WaitForExitAsync();
        }
    }

    public async ValueTask DisposeAsync()
    {
        await TerminateAsync();
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        try
        {
            await Process.WaitForExitAsync(timeout.Token);
        }
        catch (OperationCanceledException)
        {
            Process.Kill(entireProcessTree: true);
        }

        Process.Dispose();
    }

    /// <summary>Stops many at once (SIGTERM to all, then waits for each).</summary>
    public static async Task StopAllAsync(IEnumerable<HostProcess> hosts)
    {
        var all = hosts.ToList();
        foreach (var host in all)
        {
            await host.TerminateAsync();
        }

        foreach (var host in all)
        {
            await host.DisposeAsync();
        }
    }

    private static async Task DrainAsync(StreamReader reader)
    {
        while (await reader.ReadLineAsync() is not null)
        {
        }
    }

    /// <summary>src/Allocator.Host/bin/&lt;configuration&gt;/&lt;tfm&gt;/Allocator.Host.dll, built with the load tests.</summary>
    private static string HostAssembly()
    {
        var here = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd(Path.DirectorySeparatorChar));
        var (tfm, configuration) = (here.Name, here.Parent!.Name);
        var dll = Path.Combine(Allocator.Testing.Repository.Root, "src", "Allocator.Host", "bin", configuration, tfm, "Allocator.Host.dll");
        return File.Exists(dll) ? dll : throw new FileNotFoundException($"Build the host first ({dll}).", dll);
    }
}
