using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace Allocator.Grains;

/// <summary>
/// Runs actions after short delays (the group-commit gather window, a fraction of a millisecond)
/// on time, from one dedicated thread per silo (and per latency proxy in the load tests, which
/// compile this file in). With a <see cref="TimeProvider"/> other than the
/// system's (a fake clock in tests) the delays go through that provider instead.
/// </summary>
/// <remarks>
/// <para>
/// <c>Task.Delay</c> and <see cref="TimeProvider.CreateTimer"/> are driven by the runtime's timer
/// queue, which counts time on a coarse clock (on Linux <c>CLOCK_MONOTONIC_COARSE</c>: one kernel
/// tick, 4 ms on the CI VM) and rounds sub-millisecond delays down to none. Measured there:
/// <c>Task.Delay(1 ms)</c> ended after 4.3 ms at the median when idle, and a 1 ms gather window
/// held storm-90's requests 2.4 ms at the median. <see cref="Monitor.Wait(object, int)"/> sleeps
/// on the precise clock (1.07 ms for 1 ms), and the last millisecond is slept with
/// <c>usleep</c> (0.37 ms for 0.3 ms) on Linux, or passed with <see cref="Thread.Yield"/>
/// elsewhere.
/// </para>
/// <para>
/// Actions run on the dedicated thread: they must be short and must not block (the pool grain's
/// only action posts a turn to its activation). An action that throws is dropped, not the thread.
/// A delay of zero or less runs the action at once, inline.
/// </para>
/// </remarks>
internal sealed class ShortDelays : IDisposable
{
    private static readonly long TicksPerMs = Stopwatch.Frequency / 1000;
    private static bool s_usleepMissing = !OperatingSystem.IsLinux();

    private readonly PriorityQueue<Action, long> _due = new();
    private readonly object _gate = new();
    private readonly TimeProvider _time;
    private Thread? _thread;
    private bool _disposed;

    public ShortDelays(TimeProvider time)
    {
        _time = time;
    }

    /// <summary>Actions scheduled and not run yet.</summary>
    internal int Pending
    {
        get
        {
            lock (_gate)
            {
                return _due.Count;
            }
        }
    }

    /// <summary>Runs <paramref name="action"/> once <paramref name="delay"/> has passed.</summary>
    /// <exception cref="ObjectDisposedException">Disposed (the silo stopped).</exception>
    public void Schedule(TimeSpan delay, Action action)
    {
        ArgumentNullException.ThrowIfNull(action);
        if (delay <= TimeSpan.Zero)
        {
            action();
            return;
        }

        if (_time != TimeProvider.System)
        {
            // A timer, not Task.Delay, which rounds the delay down to whole milliseconds.
            var timer = new StrongBox<ITimer?>();
            timer.Value = _time.CreateTimer(
                state =>
                {
                    ((StrongBox<ITimer?>)state!).Value?.Dispose();
                    Invoke(action);
                },
                timer,
                delay,
                Timeout.InfiniteTimeSpan);
            return;
        }

        ScheduleAt(Stopwatch.GetTimestamp() + (long)Math.Ceiling(delay.TotalSeconds * Stopwatch.Frequency), action);
    }

    /// <summary>
    /// Runs <paramref name="action"/> at <paramref name="due"/>, a <see cref="Stopwatch"/>
    /// timestamp, on the dedicated thread (real time only: the latency proxy of the load tests
    /// times its chunks this way); at once, inline, when that has passed.
    /// </summary>
    /// <exception cref="ObjectDisposedException">Disposed.</exception>
    public void ScheduleAt(long due, Action action)
    {
        ArgumentNullException.ThrowIfNull(action);
        if (due <= Stopwatch.GetTimestamp())
        {
            action();
            return;
        }

        lock (_gate)
        {
            ObjectDisposedException.ThrowIf(_disposed, this);
            var earliest = !_due.TryPeek(out _, out var first) || due < first;
            _due.Enqueue(action, due);
            if (_thread is null)
            {
                _thread = new Thread(Run) { IsBackground = true, Name = "Allocator short delays" };
                _thread.Start();
            }
            else if (earliest)
            {
                Monitor.Pulse(_gate);
            }
        }
    }

    /// <summary>Stops the thread; actions still waiting run at once (they only trigger work that is waiting anyway).</summary>
    public void Dispose()
    {
        lock (_gate)
        {
            _disposed = true;
            Monitor.Pulse(_gate);
        }
    }

    private void Run()
    {
        while (true)
        {
            Action? action = null;
            long nap = 0;
            lock (_gate)
            {
                while (!_disposed)
                {
                    if (!_due.TryPeek(out _, out var due))
                    {
                        Monitor.Wait(_gate);
                        continue;
                    }

                    var remaining = due - Stopwatch.GetTimestamp();
                    if (remaining <= 0)
                    {
                        action = _due.Dequeue();
                        break;
                    }

                    if (remaining < TicksPerMs)
                    {
                        // Under a millisecond: Monitor.Wait cannot; sleep it off outside the lock.
                        // A new, earlier action meanwhile waits at most this remainder.
                        nap = remaining;
                        break;
                    }

                    // Whole milliseconds, rounded down: the remainder is napped precisely.
                    Monitor.Wait(_gate, (int)Math.Min(int.MaxValue, remaining / TicksPerMs));
                }

                if (_disposed)
                {
                    while (_due.TryDequeue(out var left, out _))
                    {
                        Invoke(left);
                    }

                    return;
                }
            }

            if (action is not null)
            {
                Invoke(action);
            }
            else
            {
                Nap(nap);
            }
        }
    }

    private static void Nap(long ticks)
    {
        if (!s_usleepMissing)
        {
            try
            {
                _ = Usleep((uint)Math.Max(1, ticks * 1_000_000 / Stopwatch.Frequency));
                return;
            }
            catch (Exception e) when (e is DllNotFoundException or EntryPointNotFoundException)
            {
                s_usleepMissing = true;
            }
        }

        // Gives the core to whoever is ready; spins only when nothing else wants it.
        var until = Stopwatch.GetTimestamp() + ticks;
        while (Stopwatch.GetTimestamp() < until)
        {
            Thread.Yield();
        }
    }

    private static void Invoke(Action action)
    {
        try
        {
            action();
        }
        catch (Exception)
        {
            // The owner reports its own failures (the pool grain's posted turns log them); one
            // bad action must not stop the windows of every other grain in the silo.
        }
    }

    // DllImport, not LibraryImport: the latter needs unsafe code in the project; this signature
    // is blittable and needs no marshalling either way. "libc" is the C library on Linux.
    [DllImport("libc", EntryPoint = "usleep")]
    private static extern int Usleep(uint microseconds);
}
