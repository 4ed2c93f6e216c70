using System.Diagnostics;

namespace Allocator.Reliability.Workload;

/// <summary>
/// How often a scenario's brokers may open a session: each takes a turn first, and turns come at
/// most <see cref="PerSecond"/> a second, shared by every broker of the scenario (no burst: a
/// turn not taken is not saved up).
/// </summary>
/// <remarks>
/// The quick variants keep to one (ADR 0030). Closed-loop brokers alone take every core a machine
/// has: an instance starting under them became ready in 10–16 s instead of 3, the upgrade's quick
/// run took 125 s and 259 core-seconds, and whatever ran beside the scenarios starved. Paced, the
/// load is the same on any machine that can carry it, and the machine keeps room for the faults'
/// own work (starts, stops, restarts) and for the checks.
/// </remarks>
internal sealed class SessionPace(double perSecond)
{
    private readonly long _interval = (long)(Stopwatch.Frequency / perSecond);
    private long _next = Stopwatch.GetTimestamp();

    public double PerSecond => perSecond;

    /// <summary>Waits for the next turn; false when <paramref name="stop"/> came first.</summary>
    public async Task<bool> WaitTurnAsync(CancellationToken stop)
    {
        var now = Stopwatch.GetTimestamp();
        long previous, turn;
        do
        {
            previous = Interlocked.Read(ref _next);
            turn = Math.Max(previous, now);
        }
        while (Interlocked.CompareExchange(ref _next, turn + _interval, previous) != previous);

        var wait = Stopwatch.GetElapsedTime(now, turn);
        if (wait <= TimeSpan.Zero)
        {
            return !stop.IsCancellationRequested;
        }

        try
        {
            await Task.Delay(wait, stop);
            return true;
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
            return false;
        }
    }
}
