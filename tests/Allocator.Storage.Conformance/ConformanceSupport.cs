namespace Allocator.Storage.Conformance;

/// <summary>The starting gate the conformance suites share.</summary>
internal static class ConformanceSupport
{
    /// <summary>
    /// Runs <paramref name="count"/> callers on the thread pool and lets them go at once: each
    /// checks in at a gate, the gate opens when all have checked in, and the result is awaited
    /// with a bound.
    /// </summary>
    public static async Task<T[]> RunTogetherAsync<T>(int count, Func<int, Task<T>> caller, TimeSpan bound)
    {
        var gate = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var allReady = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var ready = 0;
        var tasks = Enumerable.Range(0, count).Select(i => Task.Run(async () =>
        {
            if (Interlocked.Increment(ref ready) == count)
            {
                allReady.SetResult();
            }

            await gate.Task;
            return await caller(i);
        })).ToList();

        await TaskLimit.WithinAsync(allReady.Task, bound, $"all {count} callers to reach the starting gate");
        gate.SetResult();
        return await TaskLimit.WithinAsync(Task.WhenAll(tasks), bound, $"{count} concurrent callers to finish");
    }
}
