namespace Allocator.Host.Tests;

/// <summary>The machine-wide test turn: one holder at a time, across processes (a file lock), and a wait that ends.</summary>
public sealed class MachineTurnTests
{
    [Fact]
    public async Task SecondTaker_WaitsUntilTheFirstLetsGo_AndGoesOnWithoutItPastItsLimit()
    {
        var first = await MachineTurn.TakeAsync(TimeSpan.FromSeconds(30));
        string? said = null;
        var second = MachineTurn.TakeAsync(TimeSpan.FromSeconds(30));
        await Task.Delay(600);
        second.IsCompleted.Should().BeFalse("the first holds the turn");

        var clock = System.Diagnostics.Stopwatch.StartNew();
        using (await MachineTurn.TakeAsync(TimeSpan.FromMilliseconds(300), s => said = s))
        {
            said.Should().Contain("not free", "a taker whose limit runs out goes on, and says so");
        }

        first.Dispose();
        using (await second.WaitAsync(TimeSpan.FromSeconds(10)))
        {
            clock.Elapsed.Should().BeLessThan(TimeSpan.FromSeconds(10));
        }
    }
}
