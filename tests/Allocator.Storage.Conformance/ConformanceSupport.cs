namespace Allocator.Storage.Conformance;

/// <summary>Bounded waits and starting gates the conformance suites share.</summary>
internal static class ConformanceSupport
{
    /// <summary>Awaits <paramref name="task"/> for at most <paramref name="timeout"/>; the failure names what was awaited.</summary>
    public static async Task<T> WithinAsync<T>(Task<T> task, TimeSpan timeout, string awaited)
    {
        await WithinAsync((Task)task, timeout, awaited);
        return await task;
    }

    /// <inheritdoc cref="WithinAsync{T}(Task{T}, TimeSpan, string)"/>
    public static async Task WithinAsync(Task task, TimeSpan timeout, string awaited)
    {
        try
        {
            await task.WaitAsync(timeout);
        }
        catch (TimeoutException) when (!task.IsCompleted) // the limit passed; a task that itself timed out keeps its own exception
        {
            throw new TimeoutException($"Timed out after {timeout.TotalSeconds:0.#} s waiting for {awaited}.");
        }
    }

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

        await WithinAsync(allReady.Task, bound, $"all {count} callers to reach the starting gate");
        gate.SetResult();
        return await WithinAsync(Task.WhenAll(tasks), bound, $"{count} concurrent callers to finish");
    }
}
