using System.Globalization;
using Allocator.Reliability.Cli;
using Allocator.Reliability.Scenarios;

// Runs fault scenarios against real host processes and prints each one's faults, figures and the
// checker's verdict; exits 1 when any invariant was violated. eng/faults.sh is the front door;
// FaultsCommandLine is the grammar (--help prints it).
//
// ALLOCATOR_POSTGRES is the database (eng/postgres.sh); the host must be built (Release).
FaultsCommandLine commandLine;
try
{
    commandLine = FaultsCommandLine.Parse(args);
}
catch (ArgumentException e)
{
    Console.Error.WriteLine(e.Message);
    Console.Error.WriteLine(FaultsCommandLine.Usage);
    return 2;
}

if (commandLine.Help)
{
    Console.WriteLine(FaultsCommandLine.Usage);
    return 0;
}

var quick = commandLine.Quick;
var all = ScenarioCatalogue.All;
if (commandLine.List)
{
    foreach (var scenario in all)
    {
        Console.WriteLine($"{scenario.Name,-22} {scenario.Proves}");
    }

    return 0;
}

var selected = commandLine.Scenarios.Count == 0 ? all : [.. all.Where(s => commandLine.Scenarios.Contains(s.Name))];
var connectionString = Environment.GetEnvironmentVariable("ALLOCATOR_POSTGRES");
if (string.IsNullOrEmpty(connectionString))
{
    Console.Error.WriteLine("ALLOCATOR_POSTGRES is not set: start PostgreSQL with 'source eng/postgres.sh' (eng/faults.sh does).");
    return 2;
}

var artifacts = Path.Combine(Repository.Root, "artifacts", "faults");
using var cancel = new CancellationTokenSource();
Console.CancelKeyPress += (_, e) =>
{
    e.Cancel = true;
    cancel.Cancel();
};

var reports = new List<ScenarioReport>();
await using (var environments = new Environments(connectionString, artifacts))
{
    foreach (var scenario in selected)
    {
        Console.WriteLine($"-- {scenario.Name}: running ({(quick ? "quick" : "full")})");
        var report = await ScenarioRunner.RunAsync(scenario, environments, quick, cancel.Token);
        reports.Add(report);
        Console.WriteLine(report.ToText());
    }
}

var summary = ScenarioCatalogue.Summary(reports);
Console.WriteLine(summary);
Directory.CreateDirectory(artifacts);
await File.WriteAllTextAsync(Path.Combine(artifacts, $"report-{(quick ? "quick" : "full")}.txt"),
    string.Join(Environment.NewLine, reports.Select(r => r.ToText())) + Environment.NewLine + summary);
var violations = reports.Sum(r => r.Violations);
Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"{reports.Count} scenarios, {violations} violations, {reports.Sum(r => r.Check.Allocations):N0} allocations checked"));
return violations == 0 ? 0 : 1;
