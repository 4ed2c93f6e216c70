using System.Globalization;
using Allocator.Reliability.Checking;
using Allocator.Reliability.Workload;
using Npgsql;

namespace Allocator.Reliability.Scenarios;

/// <summary>
/// The price of fast failure detection (issue 21 #3): the instances are starved of CPU and nobody
/// is killed. First every core is kept busy by threads spinning beside a storm (all instances
/// starved alike); then, in addition, one instance runs at the lowest CPU priority (nice 19), so
/// it answers probes late while the others are fine: the case a fast detector mistakes for a
/// dead instance. Probes that failed, suspicion votes and instances declared dead are counted.
/// </summary>
/// <param name="pair">Two instances rather than three: no third silo to probe through, and the survivor's vote alone declares the other dead.</param>
internal sealed class BusyCoresScenario(bool pair = false) : Scenario
{
    private static readonly string VotesSql = Faults.Sql.Load("suspicion-votes.sql");

    public override string Name => pair ? "busy-cores-2" : "busy-cores";

    public override ClusterKind Cluster => pair ? ClusterKind.Pair : ClusterKind.Standard;

    // It starves the machine on purpose, and whether a starved instance is suspected depends on
    // what else runs there: a measurement for eng/faults.sh, not a check for CI.
    public override bool InContinuousIntegration => false;

    public override string Proves =>
        $"{(pair ? "Two" : "Three")} instances under a storm while twice as many threads as cores spin (quick: 10 s, full: 1 min), then the same with one instance at nice 19 (starved while the others are not), nobody killed: counts, with the failure-detection settings in use, probes that failed, suspicion votes and live instances declared dead. A death with all instances starved alike is a violation; one of the instance at nice 19 is the trade-off the figures document.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, "{}", workers: 10, capacity: 20);
        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions { Clients = 24, Pools = [pool], LeaselessShare = 0.2 });
        var duration = context.Pick(TimeSpan.FromSeconds(10), TimeSpan.FromMinutes(1));
        context.Figure("failure-detection settings", Environment.GetEnvironmentVariable("ALLOCATOR_FAULTS_PROBING") is { Length: > 0 } probing ? probing : "the host's defaults");
        using var stop = new CancellationTokenSource();
        var storm = brokers.RunAsync(stop.Token);

        var alike = await PhaseAsync(context, "all cores busy", duration, starved: null);
        foreach (var port in alike)
        {
            context.ScenarioViolations.Add($"the live instance with silo port {port} was declared dead while all instances were starved alike");
        }

        var starved = await PhaseAsync(context, "all cores busy, instance 0 at nice 19", duration, starved: 0);
        context.Figure("all cores busy, instance 0 at nice 19: it was declared dead", starved.Count > 0 ? "yes" : "no");

        await stop.CancelAsync();
        await storm;
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions:N0} ({brokers.Allocated:N0} / {brokers.NoCapacity:N0})");
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = op => op.Pool == pool });
    }

    /// <returns>The silo ports of the live instances declared dead during the phase.</returns>
    private static async Task<List<int>> PhaseAsync(ScenarioContext context, string name, TimeSpan duration, int? starved)
    {
        var instances = context.Cluster.Urls.Count;
        var logStart = Enumerable.Range(0, instances).Select(i => new FileInfo(context.Cluster.LogFile(i)).Length).ToArray();
        var since = TimeProvider.System.GetUtcNow();
        var before = await IncarnationsAsync(context, since);
        if (starved is { } slow)
        {
            await NiceAsync(context.Cluster.ProcessId(slow), 19);
        }

        using var stop = new CancellationTokenSource(duration);
        var spinners = Environment.ProcessorCount * 2;
        var hogs = Enumerable.Range(0, spinners).Select(_ => new Thread(() => Spin(stop.Token)) { IsBackground = true, Name = "busy-core" }).ToList();
        hogs.ForEach(t => t.Start());
        context.Fault($"{name}: {spinners} threads spin on {Environment.ProcessorCount} cores for {duration.TotalSeconds:0} s beside 24 brokers");
        await Task.Run(() => hogs.ForEach(t => t.Join()));
        if (starved is { } restored)
        {
            await NiceAsync(context.Cluster.ProcessId(restored), 0);
        }

        await context.Delay(TimeSpan.FromSeconds(2));
        var after = await IncarnationsAsync(context, since);
        var live = after.Where(a => before.Any(b => b.Port == a.Port && b.Generation == a.Generation && b.Status == 3)).ToList();
        var deaths = live.Where(a => a.Status == 6).Select(a => a.Port).ToList();

        // Orleans' own warnings: a direct probe not answered in time, an indirect one that failed,
        // a failed probe it set aside because the prober itself had stalled.
        var missed = Enumerable.Range(0, instances).Sum(i => CountSince(context.Cluster.LogFile(i), logStart[i],
            line => line.Contains("Did not get response for probe", StringComparison.Ordinal) || (line.Contains("probe", StringComparison.OrdinalIgnoreCase) && line.Contains("failed after", StringComparison.Ordinal))));
        var inconclusive = Enumerable.Range(0, instances).Sum(i => CountSince(context.Cluster.LogFile(i), logStart[i], line => line.Contains("Treating as inconclusive", StringComparison.Ordinal)));
        context.Figure($"{name}: probes failed (of which set aside: the prober had stalled) / suspicion votes / live instances declared dead",
            string.Create(CultureInfo.InvariantCulture, $"{missed} ({inconclusive}) / {live.Sum(a => a.Votes)} / {deaths.Count}"));

        // An instance declared dead stops itself: start it again.
        for (var i = 0; i < instances; i++)
        {
            if (!context.Cluster.IsRunning(i))
            {
                await context.Cluster.StartAsync(i, context.Cancellation);
                context.Fault($"{name}: instance {i} had stopped (declared dead); started again");
            }
        }

        return deaths;
    }

    /// <summary>Sets the nice value of every thread of a process (on Linux a nice value is per thread).</summary>
    private static async Task NiceAsync(int? pid, int nice)
    {
        if (pid is not { } id || !Directory.Exists($"/proc/{id}/task"))
        {
            return;
        }

        var threads = Directory.GetDirectories($"/proc/{id}/task").Select(Path.GetFileName).OfType<string>().ToList();
        using var renice = System.Diagnostics.Process.Start("renice", ["-n", nice.ToString(CultureInfo.InvariantCulture), "-p", .. threads]);
        await renice.WaitForExitAsync();
    }

    private static void Spin(CancellationToken stop)
    {
        var x = 0UL;
        while (!stop.IsCancellationRequested)
        {
            for (var i = 0; i < 100_000; i++)
            {
                x = (x * 6364136223846793005UL) + 1442695040888963407UL;
            }
        }

        GC.KeepAlive(x);
    }

    private static int CountSince(string file, long offset, Func<string, bool> matches)
    {
        using var stream = new FileStream(file, FileMode.Open, FileAccess.Read, FileShare.ReadWrite);
        stream.Seek(Math.Min(offset, stream.Length), SeekOrigin.Begin);
        using var reader = new StreamReader(stream);
        var count = 0;
        while (reader.ReadLine() is { } line)
        {
            if (matches(line))
            {
                count++;
            }
        }

        return count;
    }

    private static async Task<List<(int Port, int Generation, int Status, int Votes)>> IncarnationsAsync(ScenarioContext context, DateTimeOffset since)
    {
        await using var connection = new NpgsqlConnection(context.DirectConnectionString);
        await connection.OpenAsync(context.Cancellation);
        await using var command = new NpgsqlCommand(VotesSql, connection);
        command.Parameters.AddWithValue("cluster", context.Cluster.Id);
        command.Parameters.AddWithValue("since", since);
        await using var reader = await command.ExecuteReaderAsync(context.Cancellation);
        List<(int, int, int, int)> rows = [];
        while (await reader.ReadAsync(context.Cancellation))
        {
            rows.Add((reader.GetInt32(0), reader.GetInt32(1), reader.GetInt32(2), reader.GetInt32(3)));
        }

        return rows;
    }
}
