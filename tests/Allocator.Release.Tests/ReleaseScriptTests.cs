using System.Diagnostics;
using System.Formats.Tar;
using System.IO.Compression;
using System.Text.Json.Nodes;
using System.Xml.Linq;

namespace Allocator.Release.Tests;

/// <summary>
/// eng/release.sh from this repository's HEAD, as a release manager runs it: the client package
/// (README, license, symbols with Source Link, validated against the previous release's package) and
/// the service's linux-x64 archive, which starts and says its version.
/// </summary>
public sealed class ReleaseScriptTests
{
    private const string SourceUrl = "https://raw.githubusercontent.com/example/allocator/{commit}/*";

    private static readonly string Version = Repository.ReleaseVersion;

    [Fact]
    public async Task Release_WritesTheClientPackageAndTheServiceArchive_ValidatedAgainstThePreviousRelease()
    {
        var run = await RunAsync("--source-url", SourceUrl);
        run.ExitCode.Should().Be(0, run.Output);
        run.Output.Should().Contain($"validated against Allocator.Client {PreviousRelease.Version}");
        var commit = (await GitAsync("rev-parse", "HEAD")).Trim();
        var directory = Path.Combine(Repository.Root, "artifacts", "release", Version);

        using (var package = ZipFile.OpenRead(Path.Combine(directory, $"Allocator.Client.{Version}.nupkg")))
        {
            package.Entries.Select(e => e.FullName).Should().Contain(["README.md", "LICENSE", "lib/net10.0/Allocator.Client.dll"]);
            var nuspec = XDocument.Load(package.Entries.Single(e => e.FullName.EndsWith(".nuspec", StringComparison.Ordinal)).Open());
            string Element(string name) => nuspec.Descendants().Single(e => e.Name.LocalName == name).Value;
            Element("version").Should().Be(Version);
            Element("readme").Should().Be("README.md");
            Element("license").Should().Be("LICENSE");
            nuspec.Descendants().Single(e => e.Name.LocalName == "repository").Attribute("commit")!.Value.Should().Be(commit);
        }

        using (var symbols = ZipFile.OpenRead(Path.Combine(directory, $"Allocator.Client.{Version}.snupkg")))
        {
            using var pdb = new MemoryStream();
            await symbols.Entries.Single(e => e.FullName == "lib/net10.0/Allocator.Client.pdb").Open().CopyToAsync(pdb);
            var text = System.Text.Encoding.UTF8.GetString(pdb.ToArray());
            text.Should().Contain(SourceUrl.Replace("{commit}", commit, StringComparison.Ordinal).Replace("*", "", StringComparison.Ordinal), "the PDB maps the sources to the release commit (Source Link)");
        }

        File.ReadAllLines(Path.Combine(directory, "SHA256SUMS")).Should().HaveCount(3);

        // The archive is what an operator unpacks and runs: it starts and says its version.
        var unpacked = Directory.CreateTempSubdirectory("allocator-release-").FullName;
        try
        {
            await TarFile.ExtractToDirectoryAsync(new GZipStream(File.OpenRead(Path.Combine(directory, $"allocator-{Version}-linux-x64.tar.gz")), CompressionMode.Decompress), unpacked, overwriteFiles: false);
            var service = Path.Combine(unpacked, $"allocator-{Version}-linux-x64");
            File.Exists(Path.Combine(service, "CHANGELOG.md")).Should().BeTrue();
            (await HostBuild.ReadJsonAsync(Path.Combine(service, "Allocator.Host.dll"), "health"))["version"]!.GetValue<string>().Should().Be(Version);
        }
        finally
        {
            Directory.Delete(unpacked, recursive: true);
        }
    }

    [Fact]
    public async Task Release_FailsPackageValidation_WhenTheBaselineHasAnApiThisClientLacks()
    {
        // A deliberate break: a baseline whose Allocator.Client has a public type this one does not.
        var baseline = await PackageWithExtraApiAsync();

        var run = await RunAsync("--source-url", SourceUrl, "--baseline-package", baseline);

        run.ExitCode.Should().NotBe(0, run.Output);
        run.Output.Should().Contain("CP0001").And.Contain("Allocator.Client.RemovedInThisRelease", "package validation names what the new release removed");
    }

    private static async Task<(int ExitCode, string Output)> RunAsync(params string[] args)
    {
        var start = new ProcessStartInfo("bash", [Path.Combine(Repository.Root, "eng", "release.sh"), .. args])
        {
            WorkingDirectory = Repository.Root,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        using var process = Process.Start(start)!;
        var output = process.StandardOutput.ReadToEndAsync();
        var error = process.StandardError.ReadToEndAsync();
        await process.WaitForExitAsync();
        return (process.ExitCode, await output + await error);
    }

    private static async Task<string> GitAsync(params string[] args)
    {
        var start = new ProcessStartInfo("git", args) { WorkingDirectory = Repository.Root, RedirectStandardOutput = true };
        using var process = Process.Start(start)!;
        var output = await process.StandardOutput.ReadToEndAsync();
        await process.WaitForExitAsync();
        return output;
    }

    /// <summary>A package named Allocator.Client with one public type only, built outside the repository's build files.</summary>
    private static async Task<string> PackageWithExtraApiAsync()
    {
        var project = Directory.CreateTempSubdirectory("allocator-baseline-").FullName;
        await File.WriteAllTextAsync(Path.Combine(project, "Allocator.Client.csproj"), """
            <Project Sdk="Microsoft.NET.Sdk">
              <PropertyGroup>
                <TargetFramework>net10.0</TargetFramework>
                <PackageId>Allocator.Client</PackageId>
                <Version>0.0.1</Version>
              </PropertyGroup>
            </Project>
            """);
        await File.WriteAllTextAsync(Path.Combine(project, "Removed.cs"), "namespace Allocator.Client { public static class RemovedInThisRelease { public static int Answer() => 42; } }");
        var start = new ProcessStartInfo("dotnet", ["pack", "-c", "Release", "-o", Path.Combine(project, "out"), "-nologo"]) { WorkingDirectory = project, RedirectStandardOutput = true, RedirectStandardError = true };
        using var process = Process.Start(start)!;
        var output = await process.StandardOutput.ReadToEndAsync();
        await process.WaitForExitAsync();
        process.ExitCode.Should().Be(0, output);
        return Path.Combine(project, "out", "Allocator.Client.0.0.1.nupkg");
    }
}
