namespace Allocator.Testing;

/// <summary>
/// Awaits a task for at most a limit, and a failure names what was awaited. One copy, compiled
/// into each test project that needs it.
/// </summary>
internal static class TaskLimit
{
    public static async Task<T> WithinAsync<T>(Task<T> task, TimeSpan limit, string what)
    {
        await WithinAsync((Task)task, limit, what);
        return await task;
    }

    public static async Task WithinAsync(Task task, TimeSpan limit, string what)
    {
        try
        {
            await task.WaitAsync(limit);
        }
        catch (TimeoutException) when (!task.IsCompleted)
        {
            // Only the limit's own: a task that itself timed out (an Orleans response timeout)
            // keeps its exception, which a test may be asserting.
            throw new TimeoutException($"Timed out after {limit} waiting for {what}.");
        }
    }
}
