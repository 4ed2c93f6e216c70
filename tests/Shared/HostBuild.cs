using System.Diagnostics;
using System.Text.Json.Nodes;
using Allocator.Networking;

namespace Allocator.Testing;

/// <summary>A build's host (another release's, or a release archive's), run for one read.</summary>
internal static class HostBuild
{
    /// <summary>
    /// Starts <paramref name="hostDll"/> on a free loopback port (in-memory store, no keys, silo port
    /// chosen by the system), reads the JSON document at <paramref name="path"/> once it answers,
    /// and stops it.
    /// </summary>
    public static async Task<JsonNode> ReadJsonAsync(string hostDll, string path)
    {
        var port = FreePort.Next();
        var start = new ProcessStartInfo("dotnet", [hostDll, "--urls", $"http://127.0.0.1:{port}", "--Allocator:Cluster:SiloPort=0"])
        {
            WorkingDirectory = Path.GetDirectoryName(hostDll)!,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        start.Environment.Remove("ConnectionStrings__Allocator");
        start.Environment["Logging__LogLevel__Default"] = "Warning";
        using var process = Process.Start(start) ?? throw new InvalidOperationException("dotnet did not start.");
        var output = process.StandardOutput.ReadToEndAsync();
        var error = process.StandardError.ReadToEndAsync();
        try
        {
            using var http = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{port}/"), Timeout = TimeSpan.FromSeconds(5) };
            var clock = Stopwatch.StartNew();
            while (true)
            {
                try
                {
                    return JsonNode.Parse(await http.GetStringAsync(path))!;
                }
                catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException && !process.HasExited && clock.Elapsed < TimeSpan.FromSeconds(60))
                {
                    await Task.Delay(200);
                }
            }
        }
        catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException)
        {
            throw new InvalidOperationException($"The host {hostDll} did not serve {path}: {(process.HasExited ? $"exited {process.ExitCode}" : "no answer")}.", ex);
        }
        finally
        {
            if (!process.HasExited)
            {
                process.Kill(entireProcessTree: true);
            }

            await process.WaitForExitAsync();
            _ = await output;
            _ = await error;
        }
    }
}
