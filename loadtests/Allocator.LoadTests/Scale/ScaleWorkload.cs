using System.Globalization;
using System.Text;
using Allocator.LoadTests.Cli;
using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Reports;

namespace Allocator.LoadTests.Scale;

/// <summary>
/// <c>eng/storm.sh scale</c> (issue 23): 1 and 3 host processes × 1 and 2 PostgreSQL servers, which
/// the harness starts (.pg/scale-a/, .pg/scale-b/), many pools placed over the databases by the
/// service, callers spread over the instances, the invariant audit on every database. Reports
/// throughput, p50/p99 and the CPU per allocation of every process (each host, each PostgreSQL
/// server with all its backends, the load generator) from /proc, per configuration, with the
/// capacity model's prediction beside each (<see cref="CapacityModel"/>, docs/capacity.md).
/// Configurations run interleaved, round after round; the table gives medians.
/// </summary>
internal static class ScaleWorkload
{
    public const string Name = "scale";

    public const string Question = "CPU per allocation of every process over 1 and 3 hosts × 1 and 2 PostgreSQL servers; the capacity model's inputs and its check";

    /// <summary>The four of the issue, then the model's batch-size probe (1 × 1 with one pool: every caller in one grain).</summary>
    public static readonly IReadOnlyList<ScaleConfiguration> Configurations = [new(1, 1), new(1, 2), new(3, 1), new(3, 2), new(1, 1, Pools: 1)];

    public static async Task<int> RunAsync(bool quick, string reportRoot, TextWriter output, TextWriter progress, CancellationToken cancellationToken)
    {
        var script = LocalPostgres.FindScript() ?? throw new InvalidOperationException("eng/postgres.sh not found: run the scale workload from a clone (eng/storm.sh scale).");
        var size = quick ? ScaleSize.Quick : ScaleSize.Full;
        var started = TimeProvider.System.GetUtcNow();
        var clusters = new List<ScaleCluster>();
        var measurements = new List<ScaleMeasurement>();
        try
        {
            for (var i = 0; i < Configurations.Max(c => c.Databases); i++)
            {
                clusters.Add(await ScaleCluster.StartAsync(script, i, progress, cancellationToken));
            }

            for (var round = 1; round <= size.Rounds; round++)
            {
                foreach (var configuration in Configurations)
                {
                    var measurement = await new ScaleRun(configuration, size, clusters, progress).RunAsync(round, cancellationToken);
                    measurements.Add(measurement);
                    output.WriteLine(string.Create(CultureInfo.InvariantCulture,
                        $"  {configuration}, round {round}: {measurement.Throughput:0} allocations/s, p50 {measurement.Allocate.P50Ms:0.0} ms, p99 {measurement.Allocate.P99Ms:0.0} ms, CPU {measurement.OursCores:0.00} cores (others {measurement.OthersCores:0.00}), audit {(measurement.Audits.Values.All(a => a.Passed) ? "passed" : "FAILED")}"));
                }
            }
        }
        finally
        {
            foreach (var cluster in clusters)
            {
                await cluster.DisposeAsync();
            }
        }

        var medians = Configurations.Select(c => Median([.. measurements.Where(m => m.Configuration == c)])).ToList();
        var model = CapacityModel.Calibrate(medians[0], medians[2], medians[4]);
        var report = Render(size, quick, started, medians, model, measurements);
        var folder = Path.Combine(reportRoot, $"{started.ToString("yyyyMMdd-HHmmss", CultureInfo.InvariantCulture)}-{Name}");
        Directory.CreateDirectory(folder);
        var file = Path.Combine(folder, "report.md");
        await File.WriteAllTextAsync(file, report, cancellationToken);
        output.WriteLine();
        output.Write(report);
        output.WriteLine($"report: {file}");

        var failed = measurements.Where(m => m.Audits.Values.Any(a => !a.Passed)).ToList();
        foreach (var m in failed)
        {
            foreach (var (database, audit) in m.Audits.Where(a => !a.Value.Passed))
            {
                progress.WriteLine($"INVARIANT AUDIT FAILED: scale / {m.Configuration}, round {m.Round}, database {database}");
                audit.WriteTo(progress);
            }
        }

        return failed.Count > 0 ? ExitCodes.AuditFailed : ExitCodes.Ok;
    }

    /// <summary>Each figure's median over the rounds (rounds are interleaved, so each configuration saw the machine at several moments).</summary>
    private static ScaleMeasurement Median(IReadOnlyList<ScaleMeasurement> rounds)
    {
        var first = rounds[0];
        double M(Func<ScaleMeasurement, double> figure) => MedianOf(rounds.Select(figure));
        var seconds = M(r => r.Seconds);
        return first with
        {
            Round = 0,
            Allocations = (long)Math.Round(M(r => r.Throughput) * seconds),
            Seconds = seconds,
            Allocate = first.Allocate with { P50Ms = M(r => r.Allocate.P50Ms), P99Ms = M(r => r.Allocate.P99Ms) },
            // CPU scaled to the median allocations, so that µs per allocation is the median of each process's.
            Processes = [.. first.Processes.Select(p => p with
            {
                Seconds = M(r => r.MicrosPerAllocation(r.Processes.Single(q => q.Name == p.Name))) * M(r => r.Throughput) * seconds / 1e6,
            })],
            OthersCores = M(r => r.OthersCores),
            BatchSizes = first.BatchSizes.Keys.ToDictionary(k => k, k => M(r => r.BatchSizes[k])),
            Audits = first.Audits.Keys.ToDictionary(k => k, k => AuditResult.Merge(k, [.. rounds.Select(r => r.Audits[k])])),
            Errors = rounds.Sum(r => r.Errors),
        };
    }

    private static double MedianOf(IEnumerable<double> values)
    {
        var sorted = values.Order().ToList();
        return sorted.Count % 2 == 1 ? sorted[sorted.Count / 2] : (sorted[(sorted.Count / 2) - 1] + sorted[sorted.Count / 2]) / 2;
    }

    private static string Render(ScaleSize size, bool quick, DateTimeOffset started, IReadOnlyList<ScaleMeasurement> medians, CapacityModel model, IReadOnlyList<ScaleMeasurement> all)
    {
        string F(double value, string format = "0") => value.ToString(format, CultureInfo.InvariantCulture);
        var text = new StringBuilder();
        text.AppendLine($"# {Name}").AppendLine();
        text.AppendLine($"{Question}.").AppendLine();
        text.AppendLine(CultureInfo.InvariantCulture, $"- started: {started:u}; {(quick ? "quick" : "full")}: {size.Rounds} round(s) of every configuration, interleaved; medians");
        text.AppendLine(CultureInfo.InvariantCulture, $"- {size.Pools} pools × {size.WorkersPerPool} workers × {size.Capacity} slots, placed by the service (the database with the fewest pools); {size.Callers} callers, closed loop (allocate, then release), round-robin over the instances; no injected latency");
        text.AppendLine(CultureInfo.InvariantCulture, $"- warm-up {size.WarmUp.TotalSeconds:0} s, measured {size.Measure.TotalSeconds:0} s; CPU from /proc (a PostgreSQL server: its postmaster and every backend and helper, live or exited)");
        text.AppendLine(CultureInfo.InvariantCulture, $"- machine: {medians[0].Cpus} CPUs, shared: 'others' is what everything else on it used meanwhile");
        text.AppendLine().AppendLine("## Measured, and the model's prediction").AppendLine();
        var rows = medians.Select((m, i) =>
        {
            var free = m.Cpus - m.OthersCores;
            var predicted = model.Predict(m.Configuration, free, CapacityModel.BatchSize(m));
            return (string[])
            [
                m.Configuration.ToString(),
                F(m.Throughput),
                F(predicted),
                F(100 * (predicted - m.Throughput) / m.Throughput, "+0;-0") + "%",
                F(m.Allocate.P50Ms, "0.0"),
                F(m.Allocate.P99Ms, "0.0"),
                string.Join(" + ", m.Processes.Where(p => p.Name.StartsWith("host-", StringComparison.Ordinal)).Select(p => F(m.MicrosPerAllocation(p)))),
                string.Join(" + ", m.Processes.Where(p => p.Name.StartsWith("pg-", StringComparison.Ordinal)).Select(p => F(m.MicrosPerAllocation(p)))),
                F(m.MicrosPerAllocation(m.Processes.Single(p => p.Name == "load generator"))),
                F(m.Processes.Sum(p => m.MicrosPerAllocation(p))),
                string.Join(" / ", m.BatchSizes.Values.Select(b => F(b, "0.0"))),
                F(m.OthersCores, "0.00"),
                i is 0 or 2 or 4 ? "calibration" : "prediction",
                m.Audits.Values.All(a => a.Passed) ? "passed" : "FAILED",
            ];
        }).ToList();
        text.Append(MarkdownReport.Table(
            ["configuration", "allocations/s", "model", "model vs measured", "p50 ms", "p99 ms", "host CPU µs/alloc (each)", "PostgreSQL CPU µs/alloc (each)", "load generator µs/alloc", "total µs/alloc", "batch size (each database)", "others' cores", "model row", "audit (every database)"],
            rows));
        text.AppendLine();
        text.AppendLine(CultureInfo.InvariantCulture,
            $"Model (docs/capacity.md): X = cores / ({F(model.HostPerBatch)}/b + {F(model.HostPerCall)} + {F(model.RemoteMicros)}·(N−1)/N + {F(model.DatabasePerBatch)}/b + {F(model.DatabasePerCall)} + {F(model.ClientPerBatch)}/b + {F(model.ClientPerCall)}) µs per allocation (host, remote call, PostgreSQL, load generator), cores = CPUs − others, b = the measured batch size.");
        text.AppendLine();
        text.AppendLine("Costs are all the CPU of each process in the measured window (background work included: the per-batch parts carry it too). Calibration: 1 host × 1 PostgreSQL with many pools and with one pool (the per-batch and per-call parts of the host's, PostgreSQL's and the load generator's cost), 3 hosts × 1 PostgreSQL (the remote grain call); the other rows are predictions.");
        text.AppendLine().AppendLine("## Every run").AppendLine();
        text.Append(MarkdownReport.Table(
            ["configuration", "round", "allocations/s", "p50 ms", "p99 ms", "our cores", "others' cores", "errors", "audit"],
            [.. all.Select(m => new[]
            {
                m.Configuration.ToString(), F(m.Round), F(m.Throughput), F(m.Allocate.P50Ms, "0.0"), F(m.Allocate.P99Ms, "0.0"), F(m.OursCores, "0.00"), F(m.OthersCores, "0.00"), F(m.Errors),
                string.Join("; ", m.Audits.Select(a => $"{a.Key}: {(a.Value.Passed ? "passed" : "FAILED")}")),
            })]));
        return text.ToString();
    }
}
