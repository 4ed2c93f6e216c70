using System.Diagnostics;

namespace Allocator.Grains.Tests;

public sealed class SerializationTests
{
    [Fact]
    public async Task SiloStart_GrainSignatureWithATypeWithoutSerializer_FailsNamingTheType()
    {
        // A separate process: a silo with Allocator's grains and one grain whose method takes a
        // type with no serializer (tests/Allocator.Grains.Tests.Unserializable).
        var (exitCode, output) = await RunAsync();

        exitCode.Should().Be(3, $"the silo must refuse to start; it printed: {output}");
        output.Should().Contain("NotSerializable").And.Contain("TakeAsync",
            "AddAllocatorGrains turns on Orleans' serializer analysis, so the silo names the type and method at start instead of failing a call in production");
    }

    private static async Task<(int ExitCode, string Output)> RunAsync()
    {
        // This test's folder is tests/Allocator.Grains.Tests/bin/<configuration>/<tfm>/; the silo's
        // is the same under tests/Allocator.Grains.Tests.Unserializable/.
        var here = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd(Path.DirectorySeparatorChar));
        var tfm = here.Name;
        var configuration = here.Parent!.Name;
        var project = here.Parent.Parent!.Parent!;
        var dll = Path.Combine(project.Parent!.FullName, "Allocator.Grains.Tests.Unserializable", "bin", configuration, tfm, "Allocator.Grains.Tests.Unserializable.dll");
        File.Exists(dll).Should().BeTrue($"the test project builds {dll} first");
        using var process = Process.Start(new ProcessStartInfo("dotnet", [dll]) { RedirectStandardOutput = true, RedirectStandardError = true })!;
        var output = process.StandardOutput.ReadToEndAsync();
        var error = process.StandardError.ReadToEndAsync();
        await process.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(60));
        return (process.ExitCode, await output + await error);
    }
}
