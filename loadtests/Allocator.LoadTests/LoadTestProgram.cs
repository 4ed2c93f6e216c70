using Allocator.Storage.InMemory;
using Allocator.LoadTests.Audit;
using Allocator.LoadTests.Cli;
using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Integration;
using Allocator.LoadTests.Reports;
using Allocator.LoadTests.Scenarios;
using Allocator.LoadTests.Store;
using Allocator.LoadTests.Workloads;

namespace Allocator.LoadTests;

internal static class ExitCodes
{
    public const int Ok = 0;
    public const int AuditFailed = 1;
    public const int Usage = 2;
    public const int NotRun = 3;
}

/// <summary>The commands of the load-test program.</summary>
internal static class LoadTestProgram
{
    /// <param name="display">How a running strategy's progress is shown; null: a line a second on <paramref name="progress"/>.</param>
    public static async Task<int> RunAsync(CommandLine commandLine, IReadOnlyList<string> rawArgs, TextWriter output, TextWriter progress, CancellationToken cancellationToken, IProgressDisplay? display = null)
    {
        if (commandLine.Help)
        {
            output.WriteLine(commandLine.Command.Length == 0 ? CommandLine.Usage : CommandLine.UsageOf(commandLine.Command));
            return commandLine.Command.Length == 0 && !rawArgs.Any(a => a is "-h" or "--help" or "-?" or "help") ? ExitCodes.Usage : ExitCodes.Ok;
        }

        if (commandLine.Command == Scale.ScaleWorkload.Name)
        {
            // Its own PostgreSQL servers and host processes: their CPU is what it measures.
            return await Scale.ScaleWorkload.RunAsync(commandLine.Quick, commandLine.Output ?? DefaultReportRoot(), output, progress, cancellationToken);
        }

        var time = TimeProvider.System;
        var connection = commandLine.Connection ?? Environment.GetEnvironmentVariable("ALLOCATOR_POSTGRES");

        // No connection string and the in-memory store not asked for: start the repository's
        // throwaway PostgreSQL (eng/postgres.sh), as eng/run.sh does, so every strategy runs on a
        // real database. `list` needs none.
        await using var localPostgres = string.IsNullOrEmpty(connection) && commandLine.Store != "memory" && commandLine.Command != "list"
            && LocalPostgres.FindScript() is { } script
                ? await LocalPostgres.StartAsync(script, progress, cancellationToken)
                : null;
        connection = localPostgres?.ConnectionString ?? connection;
        var storeName = commandLine.Store ?? (string.IsNullOrEmpty(connection) ? "memory" : "postgres");
        if (storeName == "postgres" && string.IsNullOrEmpty(connection))
        {
            progress.WriteLine("--store postgres needs --connection or ALLOCATOR_POSTGRES (source eng/postgres.sh sets it).");
            return ExitCodes.Usage;
        }

        switch (commandLine.Command)
        {
            case "list":
                WriteCatalogue(output);
                return ExitCodes.Ok;
            case "audit":
                return await RunAuditAsync(commandLine, connection, output, progress, cancellationToken);
            case "store":
                return await RunStoreBenchmarkAsync(commandLine, storeName, connection, output, progress, cancellationToken);
        }

        var workloads = commandLine.Command == "all"
            ? WorkloadCatalogue.All
            : WorkloadCatalogue.Find(commandLine.Command) is { } one ? [one] : null;
        if (workloads is null)
        {
            progress.WriteLine($"Unknown command '{commandLine.Command}'.");
            progress.WriteLine(CommandLine.Usage);
            return ExitCodes.Usage;
        }

        StoreProvider stores = storeName == "postgres" ? new PostgresStoreProvider(connection!, keepSchemas: commandLine.KeepSchemas, log: progress) : new MemoryStoreProvider(time);
        if (storeName == "memory")
        {
            progress.WriteLine("note: running on the in-memory store (RTT emulated by waiting per call); these are not database figures.");
        }

        var started = time.GetUtcNow();
        var environment = new RunEnvironment(
            "dotnet run -c Release --project loadtests/Allocator.LoadTests -- " + string.Join(' ', rawArgs.Select(a => a.Contains(' ', StringComparison.Ordinal) ? $"\"{a}\"" : a)),
            storeName == "postgres" ? "postgres (Allocator.Storage.PostgreSql), latency through the TCP proxy" : "memory (reference store, emulated RTT)",
            started,
            commandLine.Quick,
            // The in-process host and the pool-grain silo enable Orleans' dashboard from the same
            // setting as the service; its grain-call profiling is then part of every figure.
            bool.TryParse(Environment.GetEnvironmentVariable("Allocator__OrleansDashboard__Enabled"), out var orleansDashboard) && orleansDashboard
                ? "Orleans dashboard on (Allocator__OrleansDashboard__Enabled=true)"
                : null);
        var root = commandLine.Output ?? DefaultReportRoot();
        var stamp = started.ToString("yyyyMMdd-HHmmss", System.Globalization.CultureInfo.InvariantCulture);
        var runner = new WorkloadRunner(stores, time, output, progress, TimeSpan.FromMilliseconds(commandLine.JitterMs),
            commandLine.Minutes is { } minutes ? TimeSpan.FromMinutes(minutes) : null, display);
        var all = new List<RunResult>();
        foreach (var workload in workloads)
        {
            var results = await runner.RunAsync(workload, commandLine.Quick, commandLine.Strategies, cancellationToken);
            all.AddRange(results);
            var report = ReportWriter.Write(Path.Combine(root, $"{stamp}-{workload.Name}"), workload.Name, workload.Question, environment, results);
            output.WriteLine();
            output.WriteLine($"## {workload.Name}");
            output.Write(MarkdownReport.Table(WorkloadReport.SummaryHeader, WorkloadReport.SummaryRows(results)));
            foreach (var target in Targets.For(workload.Name, results))
            {
                output.WriteLine($"target: {target.Target}: {target.Measured} ({target.Verdict})");
            }

            output.WriteLine($"report: {report}");
            output.WriteLine();
        }

        if (workloads.Count > 1)
        {
            var summary = SummaryWriter.Write(Path.Combine(root, $"{stamp}-all"), environment, all);
            output.WriteLine($"summary of all workloads: {summary}");
        }

        var failedAudits = all.Where(r => r.Audit is { Passed: false }).ToList();
        var notRun = all.Where(r => r.Failure is not null).ToList();
        foreach (var r in failedAudits)
        {
            progress.WriteLine($"INVARIANT AUDIT FAILED: {r.Workload} / {r.Scenario}");
        }

        foreach (var r in notRun)
        {
            progress.WriteLine($"not run: {r.Workload} / {r.Scenario}: {r.Failure}");
        }

        return failedAudits.Count > 0 ? ExitCodes.AuditFailed : notRun.Count > 0 ? ExitCodes.NotRun : ExitCodes.Ok;
    }

    private static async Task<int> RunStoreBenchmarkAsync(CommandLine commandLine, string storeName, string? connection, TextWriter output, TextWriter progress, CancellationToken cancellationToken)
    {
        Func<string, Task<IWorkerStore>> createStore;
        if (storeName == "memory")
        {
            createStore = _ => Task.FromResult<IWorkerStore>(new InMemoryWorkerStore());
        }
        else if (IntegrationHooks.PostgresStore is { } factory)
        {
            createStore = schema => factory(new PostgresStoreTarget(connection!, schema, MaxConnections: 100, Multiplexing: false));
        }
        else
        {
            progress.WriteLine("error: the PostgreSQL store is not wired yet: IntegrationHooks.PostgresStore (loadtests/Allocator.LoadTests/Integration/IntegrationHooks.cs) is empty.");
            return ExitCodes.NotRun;
        }

        output.WriteLine($"store: {storeName}");
        var options = new StoreBenchmarkOptions(
            Runs: commandLine.Runs ?? (commandLine.Quick ? 3 : 5),
            RunLength: TimeSpan.FromSeconds(commandLine.Seconds ?? (commandLine.Quick ? 1 : 3)),
            Callers: commandLine.Callers ?? 1);
        // No audit to fail here: each run's schema goes once the run is measured.
        await using var dataSource = storeName == "memory" || commandLine.KeepSchemas ? null : Npgsql.NpgsqlDataSource.Create(connection!);
        Func<string, Task>? removeStore = dataSource is null ? null : async schema =>
        {
            if (await PostgresStoreProvider.DropSchemaAsync(dataSource, schema) is { } failure)
            {
                progress.WriteLine($"schema {schema} could not be dropped ({failure}): DROP SCHEMA {schema} CASCADE removes it");
            }
        };
        await new StoreBenchmark(createStore, options, output, removeStore).RunAsync(cancellationToken);
        return ExitCodes.Ok;
    }

    private static async Task<int> RunAuditAsync(CommandLine commandLine, string? connection, TextWriter output, TextWriter progress, CancellationToken cancellationToken)
    {
        if (string.IsNullOrEmpty(connection) || commandLine.Schema is null)
        {
            progress.WriteLine("audit needs --schema and a connection string (--connection or ALLOCATOR_POSTGRES).");
            return ExitCodes.Usage;
        }

        await using var dataSource = Npgsql.NpgsqlDataSource.Create(connection);
        var result = await PostgresInvariantAudit.AuditAsync(dataSource, commandLine.Schema, commandLine.Pool, [], cancellationToken);
        result.WriteTo(output);
        return result.Passed ? ExitCodes.Ok : ExitCodes.AuditFailed;
    }

    private static void WriteCatalogue(TextWriter output)
    {
        string Size(WorkloadSize s) =>
            $"{s.Workers:N0}×{s.Capacity}, {(s.Rate is { } r ? $"open {r:N0}/s ≤ {s.Callers:N0}" : $"{s.Callers} callers")}, "
            + (s.Allocations is { } n ? $"{n:N0} allocations or {s.Duration.TotalSeconds:0} s" : $"{s.Duration.TotalSeconds:0} s");
        var rows = WorkloadCatalogue.All.Select(w => new[]
        {
            w.Name,
            w.Rtt > TimeSpan.Zero ? $"{w.Rtt.TotalMilliseconds:0} ms" : "none",
            w.MaxConnections.ToString(System.Globalization.CultureInfo.InvariantCulture),
            Size(w.Full),
            Size(w.Quick),
            string.Join("; ", w.Strategies.Select(s => s.Label)),
            w.Question,
        }).ToList();
        var scale = Scale.ScaleSize.Full;
        var scaleQuick = Scale.ScaleSize.Quick;
        rows.Add(
        [
            Scale.ScaleWorkload.Name, "none", "40 per host and database",
            $"{scale.Pools} pools × {scale.WorkersPerPool}×{scale.Capacity}, {scale.Callers} callers, {scale.Measure.TotalSeconds:0} s × {scale.Rounds} rounds",
            $"{scaleQuick.Pools} pools, {scaleQuick.Callers} callers, {scaleQuick.Measure.TotalSeconds:0} s × {scaleQuick.Rounds} round",
            string.Join("; ", Scale.ScaleWorkload.Configurations),
            Scale.ScaleWorkload.Question,
        ]);
        output.Write(MarkdownReport.Table(["workload", "RTT", "DB connections", "full", "quick", "strategies", "answers"], rows));
    }

    /// <summary><c>loadtests/Allocator.LoadTests/reports</c>, found from the build output; the current folder's <c>reports</c> otherwise.</summary>
    private static string DefaultReportRoot()
    {
        for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
        {
            if (File.Exists(Path.Combine(dir.FullName, "Allocator.LoadTests.csproj")))
            {
                return Path.Combine(dir.FullName, "reports");
            }
        }

        return Path.Combine(Environment.CurrentDirectory, "reports");
    }
}
