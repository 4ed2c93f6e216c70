using Allocator.Host.Cluster;
using Allocator.Host.Lifecycle;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging.Abstractions;

namespace Allocator.Host.Tests;

public sealed class ExitWhenFatalTests
{
    [Fact]
    public void ToldItIsDead_ReadinessGoesDown_ThenItExitsWithTheReason_WithinItsGrace()
    {
        using var draining = new Draining();
        string? exitedWith = null;
        var readyAtExit = true;
        var handler = new ExitWhenFatal(draining, NullLogger<ExitWhenFatal>.Instance, (message, _) =>
        {
            exitedWith = message;
            readyAtExit = !draining.IsDraining;
        });

        var clock = System.Diagnostics.Stopwatch.StartNew();
        handler.OnFatalException(this, "I have been told I am dead, so this silo will stop!", null);

        exitedWith.Should().Contain("I have been told I am dead");
        readyAtExit.Should().BeFalse("readiness goes down before the process exits");
        clock.Elapsed.Should().BeGreaterThanOrEqualTo(ExitWhenFatal.Grace - TimeSpan.FromMilliseconds(20));
        ExitWhenFatal.Grace.Should().BeLessThan(TimeSpan.FromSeconds(1), "Orleans' own handler waits two seconds; this one is meant to exit sooner");
    }

    [Fact]
    public void TheSilo_UsesIt_InsteadOfOrleans()
    {
        var builder = Microsoft.AspNetCore.Builder.WebApplication.CreateBuilder(new Microsoft.AspNetCore.Builder.WebApplicationOptions { EnvironmentName = "Testing" });
        builder.Configuration["Allocator:Cluster:Membership"] = "localhost";
        builder.Services.AddSingleton<Draining>();
        builder.AddAllocatorSilo();
        using var services = builder.Services.BuildServiceProvider();

        services.GetRequiredService<Orleans.Runtime.IFatalErrorHandler>().Should().BeOfType<ExitWhenFatal>();
    }
}
