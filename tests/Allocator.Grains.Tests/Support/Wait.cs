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

    public static Task<T> ForAsync<T>(Task<T> task, string what) => TaskLimit.WithinAsync(task, Limit, what);

    public static Task ForAsync(Task task, string what) => TaskLimit.WithinAsync(task, Limit, what);
}
