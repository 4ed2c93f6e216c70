using System.Globalization;

namespace Allocator.LoadTests.Scale;

/// <summary>
/// CPU time from <c>/proc</c> (Linux): of a process, of a PostgreSQL server (its postmaster, every
/// backend and helper it started, and those that already exited: the postmaster's reaped-children
/// time), and of the whole machine. Ticks of <c>CLK_TCK</c> (100 per second on Linux).
/// </summary>
internal static class CpuTime
{
    /// <summary>Linux's USER_HZ, fixed at 100 for the <c>/proc</c> interface on every architecture.</summary>
    public const double TicksPerSecond = 100;

    /// <summary>utime + stime of one process (its own threads); 0 when it is gone.</summary>
    public static long OfProcess(int pid) => Read(pid) is { } stat ? stat.UTime + stat.STime : 0;

    /// <summary>
    /// A PostgreSQL server's CPU: the postmaster's own and its waited-for children's (every backend
    /// that exited, e.g. a closed connection), plus every live child's (backends, WAL writer,
    /// checkpointer, autovacuum launcher and workers).
    /// </summary>
    public static long OfPostgres(int postmasterPid)
    {
        if (Read(postmasterPid) is not { } postmaster)
        {
            return 0;
        }

        var total = postmaster.UTime + postmaster.STime + postmaster.CUTime + postmaster.CSTime;
        foreach (var dir in Directory.EnumerateDirectories("/proc"))
        {
            if (int.TryParse(Path.GetFileName(dir), NumberStyles.None, CultureInfo.InvariantCulture, out var pid)
                && pid != postmasterPid && Read(pid) is { } child && child.ParentPid == postmasterPid)
            {
                total += child.UTime + child.STime + child.CUTime + child.CSTime;
            }
        }

        return total;
    }

    /// <summary>The postmaster of the PostgreSQL server whose data directory is <paramref name="dataDirectory"/> (first line of postmaster.pid).</summary>
    public static int PostmasterOf(string dataDirectory) =>
        int.Parse(File.ReadLines(Path.Combine(dataDirectory, "postmaster.pid")).First().Trim(), CultureInfo.InvariantCulture);

    /// <summary>Busy ticks of the whole machine (all CPUs: user, nice, system, irq, softirq, steal) and the number of CPUs.</summary>
    public static (long Busy, int Cpus) OfMachine()
    {
        var lines = File.ReadAllLines("/proc/stat");
        var fields = lines[0].Split(' ', StringSplitOptions.RemoveEmptyEntries).Skip(1).Select(f => long.Parse(f, CultureInfo.InvariantCulture)).ToArray();
        // user nice system idle iowait irq softirq steal guest guest_nice (guest time is inside user)
        var busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + (fields.Length > 7 ? fields[7] : 0);
        return (busy, lines.Count(l => l.StartsWith("cpu", StringComparison.Ordinal) && char.IsDigit(l[3])));
    }

    private static Stat? Read(int pid)
    {
        string text;
        try
        {
            text = File.ReadAllText($"/proc/{pid}/stat");
        }
        catch (IOException)
        {
            return null; // gone
        }
        catch (UnauthorizedAccessException)
        {
            return null;
        }

        // The command name is in parentheses and may hold spaces: fields count from after the last ')'.
        var rest = text[(text.LastIndexOf(')') + 2)..].Split(' ');
        // rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15, cutime 16, cstime 17.
        long Field(int number) => long.Parse(rest[number - 3], CultureInfo.InvariantCulture);
        return new Stat((int)Field(4), Field(14), Field(15), Field(16), Field(17));
    }

    private readonly record struct Stat(int ParentPid, long UTime, long STime, long CUTime, long CSTime);
}
