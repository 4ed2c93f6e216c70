using System.Diagnostics;

namespace Allocator.Testing;

/// <summary>
/// A turn shared by the test processes of one checkout, for work that must not overlap another
/// test's: Chromium starting (seconds of both cores) beside a fault scenario that promises no 5xx
/// through a rolling restart. Two clean-clone runs failed that way (issue 46): each time a browser
/// test started within seconds of the stall that turned a rolling restart's answers into 503s,
/// and in the runs where the two did not meet, the scenario passed. An exclusive lock on a file
/// under <c>artifacts/</c> (.NET takes <c>flock</c> for <see cref="FileShare.None"/> on Linux),
/// so it holds across test assemblies run side by side, and a process that dies lets it go.
/// </summary>
internal static class MachineTurn
{
    /// <summary>Waits for the turn (up to <paramref name="limit"/>; then goes on without it, saying so) and holds it until disposed.</summary>
    public static async Task<IDisposable> TakeAsync(TimeSpan limit, Action<string>? log = null)
    {
        var path = Path.Combine(Repository.Artifacts("test-turns"), "heavy.lock");
        var clock = Stopwatch.StartNew();
        while (true)
        {
            try
            {
                return new FileStream(path, FileMode.OpenOrCreate, FileAccess.ReadWrite, FileShare.None);
            }
            catch (IOException) when (clock.Elapsed < limit)
            {
                await Task.Delay(250);
            }
            catch (IOException)
            {
                log?.Invoke($"The machine-wide test turn ({path}) was not free within {limit.TotalMinutes:0} minutes; going on without it.");
                return new Nothing();
            }
        }
    }

    private sealed class Nothing : IDisposable
    {
        public void Dispose()
        {
        }
    }
}
