namespace Allocator.Testing;

/// <summary>
/// The repository's root folder (where <c>Allocator.sln</c> is), found above the running
/// assembly's folder: the tests, the fault scenarios and the load tests read scripts, docs and
/// build outputs from it. One copy, compiled into each project that needs it.
/// </summary>
internal static class Repository
{
    public static string Root { get; } = Find(AppContext.BaseDirectory);

    /// <summary>This build's release version: <c>VersionPrefix</c> in Directory.Build.props, the one place it is set.</summary>
    public static string ReleaseVersion { get; } =
        System.Xml.Linq.XDocument.Load(Path.Combine(Root, "Directory.Build.props")).Descendants("VersionPrefix").Single().Value;

    /// <summary><c>artifacts/NAME</c> at the root, created.</summary>
    public static string Artifacts(string name) => Directory.CreateDirectory(Path.Combine(Root, "artifacts", name)).FullName;

    /// <summary>The first folder at or above <paramref name="start"/> holding <c>Allocator.sln</c>.</summary>
    internal static string Find(string start) =>
        TryFind(start) ?? throw new InvalidOperationException($"Allocator.sln not found at or above {start}.");

    /// <summary>As <see cref="Find"/>, or null outside a repository (a build copied elsewhere).</summary>
    internal static string? TryFind(string start)
    {
        for (var dir = new DirectoryInfo(start); dir is not null; dir = dir.Parent)
        {
            if (File.Exists(Path.Combine(dir.FullName, "Allocator.sln")))
            {
                return dir.FullName;
            }
        }

        return null;
    }
}
