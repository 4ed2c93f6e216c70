using System.Diagnostics;
using System.Globalization;

namespace Allocator.Testing;

/// <summary>
/// How far this process fell behind while a timed step ran: two probes ask to wake every 10 ms,
/// one on a thread of its own (the machine's run queue) and one on the thread pool (timers and
/// the pool's queue), and add up how much later than asked they woke. One copy, compiled into
/// each test project that needs it.
/// </summary>
/// <remarks>
/// A test that checks a promise made in wall-clock time (a deadline, a bound on an answer) allows
/// the promise plus <see cref="Lost"/>: milliseconds on a quiet machine, more on one whose cores
/// other processes take, as much as the probes themselves were kept waiting. What the code under
/// test does wrong (a hang, a wait for a timeout it should not wait for) adds wall time, not
/// lateness of the probes, so the bound keeps its meaning; <see cref="Bound"/> also refuses a
/// slack that would reach the defect's own signature, so such a test can still fail on a machine
/// too busy to tell the two apart, and says so.
/// </remarks>
internal sealed class SchedulingDelay : IDisposable
{
    private static readonly TimeSpan Tick = TimeSpan.FromMilliseconds(10);
    private readonly CancellationTokenSource _stop = new();
    private readonly Thread _thread;
    private readonly Task _pool;
    private long _threadLateTicks;
    private long _poolLateTicks;
    private long _worstTicks;

    private SchedulingDelay()
    {
        _thread = new Thread(ProbeThread) { IsBackground = true, Name = "scheduling-delay probe" };
        _thread.Start();
        _pool = Task.Run(ProbePoolAsync);
    }

    /// <summary>Starts measuring; dispose (or read <see cref="Lost"/>) when the timed step is over.</summary>
    public static SchedulingDelay Start() => new();

    /// <summary>The larger of the two probes' total lateness so far.</summary>
    public TimeSpan Lost => TimeSpan.FromTicks(Math.Max(Interlocked.Read(ref _threadLateTicks), Interlocked.Read(ref _poolLateTicks)));

    /// <summary>The longest single wake-up delay either probe saw.</summary>
    public TimeSpan Worst => TimeSpan.FromTicks(Interlocked.Read(ref _worstTicks));

    /// <summary>
    /// The bound a timed check allows: <paramref name="promise"/> plus <paramref name="allowance"/>
    /// (what the test always allowed: the test's own steps) plus <see cref="Lost"/>. Throws when
    /// that would reach <paramref name="defect"/>, the wall time the defect the check guards
    /// would take: then this run cannot tell them apart.
    /// </summary>
    public TimeSpan Bound(TimeSpan promise, TimeSpan allowance, TimeSpan defect)
    {
        var bound = promise + allowance + Lost;
        if (bound >= defect)
        {
            throw new TooBusyToJudgeException(string.Create(
                CultureInfo.InvariantCulture,
                $"The machine kept this test {Lost.TotalSeconds:0.00} s behind (worst single delay {Worst.TotalMilliseconds:0} ms): a bound of {bound.TotalSeconds:0.00} s could no longer tell the promise ({promise.TotalSeconds:0.00} s) from the defect it guards ({defect.TotalSeconds:0.00} s)."));
        }

        return bound;
    }

    /// <summary>
    /// Runs a timed check again, up to <paramref name="attempts"/> times in all, while the machine
    /// kept it too far behind to judge (<see cref="Bound"/> threw): a moment of contention passes,
    /// a defect does not, and the first attempt that can be judged decides, pass or fail. Each
    /// attempt (its number is passed, from 1) sets up what it times afresh.
    /// </summary>
    public static async Task JudgeAsync(Func<int, Task> check, int attempts = 3)
    {
        for (var attempt = 1; ; attempt++)
        {
            try
            {
                await check(attempt).ConfigureAwait(false);
                return;
            }
            catch (TooBusyToJudgeException) when (attempt < attempts)
            {
            }
            catch (TooBusyToJudgeException last)
            {
                throw new TooBusyToJudgeException($"None of {attempts} attempts could be judged; the last: {last.Message}");
            }
        }
    }

    /// <summary>For a failure message: what was lost, and the worst single delay.</summary>
    public override string ToString() => string.Create(CultureInfo.InvariantCulture, $"{Lost.TotalSeconds:0.000} s lost to scheduling (worst single delay {Worst.TotalMilliseconds:0} ms)");

    public void Dispose()
    {
        _stop.Cancel();
        _thread.Join();
        try
        {
            _pool.Wait();
        }
        catch (AggregateException)
        {
            // Canceled: the probe's own way to stop.
        }

        _stop.Dispose();
    }

    private void ProbeThread()
    {
        while (!_stop.IsCancellationRequested)
        {
            var asked = Stopwatch.GetTimestamp();
            Thread.Sleep(Tick);
            Record(ref _threadLateTicks, Stopwatch.GetElapsedTime(asked) - Tick);
        }
    }

    private async Task ProbePoolAsync()
    {
        while (!_stop.IsCancellationRequested)
        {
            var asked = Stopwatch.GetTimestamp();
            await Task.Delay(Tick, _stop.Token).ConfigureAwait(false);
            Record(ref _poolLateTicks, Stopwatch.GetElapsedTime(asked) - Tick);
        }
    }

    private void Record(ref long total, TimeSpan late)
    {
        // Timers on Linux fire up to about a millisecond late on an idle machine: that is not lost time.
        var lost = late - TimeSpan.FromMilliseconds(1);
        if (lost <= TimeSpan.Zero)
        {
            return;
        }

        Interlocked.Add(ref total, lost.Ticks);
        long worst;
        while (lost.Ticks > (worst = Interlocked.Read(ref _worstTicks)) && Interlocked.CompareExchange(ref _worstTicks, lost.Ticks, worst) != worst)
        {
        }
    }
}

/// <summary>A timed check whose run was kept too far behind to tell the promise from the defect it guards.</summary>
internal sealed class TooBusyToJudgeException(string message) : Exception(message);
