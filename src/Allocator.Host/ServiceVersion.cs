using System.Reflection;

namespace Allocator.Host;

/// <summary>
/// The release this build is (the <c>VersionPrefix</c> of Directory.Build.props) and the commit it
/// was built from, read once from the host assembly's informational version
/// (<c>1.0.0+&lt;commit&gt;</c>; the SDK appends the commit when it builds from a git checkout).
/// </summary>
internal static class ServiceVersion
{
    private static readonly (string Version, string? Commit) Parsed = Parse(
        typeof(ServiceVersion).Assembly.GetCustomAttribute<AssemblyInformationalVersionAttribute>()?.InformationalVersion);

    /// <summary>The semantic version, e.g. <c>1.0.0</c>: the <c>service.version</c> resource attribute and <c>/health</c>'s <c>version</c>.</summary>
    public static string Version => Parsed.Version;

    /// <summary>The commit the build came from, when the build knew it.</summary>
    public static string? Commit => Parsed.Commit;

    /// <summary>Splits an informational version into the version and the build metadata after <c>+</c>.</summary>
    internal static (string Version, string? Commit) Parse(string? informational)
    {
        if (string.IsNullOrWhiteSpace(informational))
        {
            return ("0.0.0", null);
        }

        var plus = informational.IndexOf('+', StringComparison.Ordinal);
        return plus < 0
            ? (informational, null)
            : (informational[..plus], informational[(plus + 1)..] is { Length: > 0 } commit ? commit : null);
    }
}
