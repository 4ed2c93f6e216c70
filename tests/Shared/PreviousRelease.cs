using System.Diagnostics;

namespace Allocator.Testing;

/// <summary>
/// The previous release (eng/previous-release.txt), built from git history by
/// eng/previous-release.sh into <c>artifacts/previous/&lt;version&gt;/</c>: what the compatibility
/// checks compare this build with (ADR 0026). Built on first use when missing (about a minute).
/// </summary>
internal static class PreviousRelease
{
    private static readonly Lazy<string> BuiltDirectory = new(Build, LazyThreadSafetyMode.ExecutionAndPublication);

    /// <summary>The previous release's version, e.g. <c>1.0.0</c>.</summary>
    public static string Version { get; } = Field("version");

    /// <summary>The commit the previous release is.</summary>
    public static string Commit { get; } = Field("commit");

    /// <summary><c>artifacts/previous/&lt;version&gt;/</c>, built.</summary>
    public static string Directory => BuiltDirectory.Value;

    /// <summary>Its host, published: <c>host/Allocator.Host.dll</c>.</summary>
    public static string HostDirectory => Path.Combine(Directory, "host");

    /// <summary>Its source tree (a detached worktree of the release commit).</summary>
    public static string SourceDirectory => Path.Combine(Directory, "src");

    private static string Field(string name) =>
        File.ReadLines(Path.Combine(Repository.Root, "eng", "previous-release.txt"))
            .Where(line => line.StartsWith(name + "=", StringComparison.Ordinal))
            .Select(line => line[(name.Length + 1)..].Trim())
            .SingleOrDefault() is { Length: > 0 } value
            ? value
            : throw new InvalidOperationException($"eng/previous-release.txt has no {name}=.");

    private static string Build()
    {
        var start = new ProcessStartInfo("bash", [Path.Combine(Repository.Root, "eng", "previous-release.sh"), "--print"])
        {
            WorkingDirectory = Repository.Root,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        using var process = Process.Start(start) ?? throw new InvalidOperationException("bash did not start.");
        var error = process.StandardError.ReadToEndAsync();
        var output = process.StandardOutput.ReadToEnd();
        process.WaitForExit();
        if (process.ExitCode != 0)
        {
            throw new InvalidOperationException($"eng/previous-release.sh failed with exit code {process.ExitCode}: {error.Result}");
        }

        return output.Trim();
    }
}
