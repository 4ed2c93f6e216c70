using System.Diagnostics;

namespace Allocator.Grains.Tests.Support;

/// <summary>Condition waits for tests: no timing assertions, only a generous limit that names what was awaited.</summary>
internal static class Wait
{
    public static readonly TimeSpan Limit = TimeSpan.FromSeconds(30);

    public static async Task UntilAsync(Func<bool> condition, string what)
    {
        var watch = Stopwatch.StartNew();
        while (!condition())
        {
            if (watch.Elapsed > Limit)
            {
                throw new TimeoutException($"Timed out after {Limit} waiting until {what}.");
            }

            await Task.Delay(5);
        }
    }

    public static async Task UntilAsync(Func<Task<bool>> condition, string what)
    {
        var watch = Stopwatch.StartNew();
        while (!await condition())
        {
            if (watch.Elapsed > Limit)
            {
                throw new TimeoutException($"Timed out after {Limit} waiting until {what}.");
            }

            await Task.Delay(5);
        }
    }

    public static async Task<T> ForAsync<T>(Task<T> task, string what)
    {
        try
        {
            return await task.WaitAsync(Limit);
        }
        catch (TimeoutException) when (!task.IsCompleted) // the limit passed; a task that itself timed out keeps its own exception
        {
            throw new TimeoutException($"Timed out after {Limit} waiting for {what}.");
        }
    }

    public static async Task ForAsync(Task task, string what)
    {
        try
        {
            await task.WaitAsync(Limit);
        }
        catch (TimeoutException) when (!task.IsCompleted) // the limit passed; a task that itself timed out keeps its own exception
        {
            throw new TimeoutException($"Timed out after {Limit} waiting for {what}.");
        }
    }
}
