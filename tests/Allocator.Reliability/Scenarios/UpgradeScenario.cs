using System.Diagnostics;
using System.Globalization;
using System.Text.Json.Nodes;
using Allocator.Reliability.Checking;
using Allocator.Reliability.Cluster;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>
/// A release upgraded in place and rolled back (issue 38): three instances of the previous
/// release, built from git history, are stopped one at a time and started on this build, then
/// rolled back the same way, under brokers of two tenants that use the same session keys: raw HTTP
/// brokers and brokers on the .NET client, some waiting in a full pool's queue.
/// </summary>
internal sealed class UpgradeScenario : Scenario
{
    public override string Name => "upgrade";

    public override string Proves =>
        "Three instances of the previous release (eng/previous-release.txt, built from git history) are upgraded to this build one at a time with SIGTERM and a start, then rolled back the same way, while brokers of two tenants with the same session keys allocate, wait, renew and release through raw HTTP and through the .NET client: no 5xx (503 included), no reset connection, no failed client call, every allocation stored with its tenant, no key of a tenant holding two allocations, the invariants kept across both releases.";

    public override ClusterKind Cluster => ClusterKind.Upgrade;

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("p");
        var tight = context.Pool("t");
        await context.SetUpPoolAsync(pool, "{}", workers: 10, capacity: 20);
        await context.SetUpPoolAsync(tight, """{"maxWaitMs":3000}""", workers: 2, capacity: 3);

        // Both tenants use one prefix: every session key of tenant A is also one of tenant B's.
        var keys = context.Pool("k");
        var waitKeys = context.Pool("w");
        Brokers Raw(int tenant, string prefix, BrokerOptions options) =>
            new((name, timeout) => context.NewBrokerClient(tenant, $"{(tenant == 0 ? "a" : "b")}-{name}", timeout), prefix, options);
        var brokerOptions = new BrokerOptions { Clients = context.Pick(6, 12), Pools = [pool], LeaselessShare = 0.3, RenewShare = 0.2 };
        var waiterOptions = new BrokerOptions { Clients = context.Pick(4, 6), Pools = [tight], MaxWait = TimeSpan.FromSeconds(2), MaxHold = TimeSpan.FromMilliseconds(300), LeaselessShare = 0.3 };
        Brokers[] raw = [Raw(0, keys, brokerOptions), Raw(1, keys, brokerOptions), Raw(0, waitKeys, waiterOptions), Raw(1, waitKeys, waiterOptions)];
        var clientKeys = context.Pool("c");
        var clientWaitKeys = context.Pool("cw");
        ClientBrokers Client(int tenant, string prefix, int clients, TimeSpan? maxWait) =>
            new(context.History, context.Cluster.Urls, HostCluster.BrokerKeys[tenant].Key, prefix, clients, HostCluster.BrokerKeys[tenant].Tenant, maxWait, context.Pace);
        using var clientA = Client(0, clientKeys, context.Pick(4, 8), null);
        using var clientB = Client(1, clientKeys, context.Pick(4, 8), null);
        using var clientWaitA = Client(0, clientWaitKeys, 2, TimeSpan.FromSeconds(2));
        using var clientWaitB = Client(1, clientWaitKeys, 2, TimeSpan.FromSeconds(2));
        ClientBrokers[] clients = [clientA, clientB, clientWaitA, clientWaitB];
        context.Fault($"tenants A and B send the same session keys: raw HTTP brokers and waiters, and .NET-client brokers and waiters (AddAllocatorClient)");

        using var stop = new CancellationTokenSource();
        var load = Task.WhenAll(
            raw.Select(b => b.RunAsync(stop.Token))
                .Concat([clientA.RunAsync(pool, stop.Token), clientB.RunAsync(pool, stop.Token), clientWaitA.RunAsync(tight, stop.Token), clientWaitB.RunAsync(tight, stop.Token)]));

        var previous = Path.Combine(PreviousRelease.HostDirectory, "Allocator.Host.dll");
        var current = HostCluster.HostDll();
        var steps = new List<Step>();
        var settle = context.Pick(TimeSpan.FromSeconds(2), TimeSpan.FromSeconds(5));
        var clock = TimeProvider.System.GetUtcNow();
        await context.Delay(settle);
        steps.Add(new Step($"all on {PreviousRelease.Version}", clock, TimeProvider.System.GetUtcNow(), Failed(clients)));

        using var probe = context.NewClient("probe", TimeSpan.FromSeconds(10));
        foreach (var (to, build, label) in new[] { (ThisVersion, current, "upgrade"), (PreviousRelease.Version, previous, "rollback") })
        {
            for (var instance = 0; instance < context.Cluster.Urls.Count; instance++)
            {
                clock = TimeProvider.System.GetUtcNow();

                // The .NET-client brokers sit behind a load balancer: it takes the instance out of
                // rotation when its readiness turns 503 (at SIGTERM, for the drain delay) and back
                // once it is ready. The raw brokers pick instances themselves and meet the closed port.
                foreach (var client in clients)
                {
                    client.Avoid = instance;
                }

                var (took, exitCode) = await context.Cluster.StopAsync(instance, context.Cancellation);
                if (exitCode != 0)
                {
                    context.ScenarioViolations.Add($"instance {instance} exited with code {exitCode} after SIGTERM, not 0");
                }

                context.Cluster.UseBuild(instance, build);
                var start = Stopwatch.StartNew();
                await context.Cluster.StartAsync(instance, context.Cancellation);
                var ready = start.Elapsed;
                foreach (var client in clients)
                {
                    client.Avoid = -1;
                }

                var says = await VersionAsync(context.Cluster.Urls[instance]);
                // Every release since 1.0.0 says its version in /health (0.9.0, the first, said none).
                if (says != to)
                {
                    context.ScenarioViolations.Add($"instance {instance} started on {to} but /health says version {says ?? "(none)"}");
                }

                context.Fault(string.Create(CultureInfo.InvariantCulture, $"{label}: instance {instance} stopped with SIGTERM (exited in {took.TotalSeconds:0.0} s) and started on {to}, ready {ready.TotalSeconds:0.0} s later (/health: {says ?? "no version"})"));
                await context.Delay(settle);
                steps.Add(new Step($"{label}: instance {instance} on {to}", clock, TimeProvider.System.GetUtcNow(), Failed(clients)));
            }
        }

        await stop.CancelAsync();
        await load;

        // Per step: what brokers saw while that instance went over, and the cluster ran mixed.
        var operations = context.History.Operations;
        var failedBefore = 0L;
        foreach (var (step, index) in steps.Select((s, i) => (s, i)))
        {
            var inStep = operations.Where(o => o.InvokedAt >= step.From && o.InvokedAt < step.To).ToList();
            var ok = inStep.Where(o => o is { Kind: OperationKind.Allocate, Outcome: Outcome.Ok }).Select(o => o.Duration.TotalMilliseconds).Order().ToList();
            context.Figure(
                string.Create(CultureInfo.InvariantCulture, $"step {index}: {step.Name}"),
                string.Create(CultureInfo.InvariantCulture,
                    $"{(step.To - step.From).TotalSeconds:0.0} s, {inStep.Count:N0} calls, {ok.Count:N0} allocations (p50 {Percentile(ok, 0.5):0} ms, p99 {Percentile(ok, 0.99):0} ms), 5xx {inStep.Count(o => o.Status >= 500)}, resets {inStep.Count(IsBroken)}, refused {inStep.Count(o => o.Problem == ApiClient.Refused)}, failed client calls {step.ClientFailuresSoFar - failedBefore}"));
            failedBefore = step.ClientFailuresSoFar;
        }

        var fiveHundreds = operations.Where(o => o.Status >= 500).ToList();
        var broken = operations.Where(IsBroken).ToList();
        var failed = clients.Sum(c => c.Failed);
        context.Figure("sessions (raw brokers A / B, raw waiters A / B)", string.Join(" / ", raw.Select(b => $"{b.Sessions:N0}")));
        context.Figure(".NET-client allocations (A / B, waiters A / B)", string.Join(" / ", clients.Select(c => $"{c.Allocated:N0}")));
        context.Figure("5xx during upgrade and rollback", fiveHundreds.Count, "0");
        context.Figure("connections reset or left without an answer", broken.Count, "0");
        context.Figure("failed .NET-client calls", failed, "0");
        if (fiveHundreds.Count > 0)
        {
            context.ScenarioViolations.Add($"{fiveHundreds.Count} answers with a 5xx while two releases shared the cluster: {string.Join(", ", fiveHundreds.GroupBy(o => $"{o.Status} {o.Problem}").Select(g => $"{g.Key} x{g.Count()}"))}; first: {fiveHundreds[0]} {fiveHundreds[0].Detail}");
        }

        if (broken.Count > 0)
        {
            context.ScenarioViolations.Add($"{broken.Count} calls whose connection was reset or that got no answer; first: {broken[0]} {broken[0].Detail}");
        }

        if (failed > 0)
        {
            context.ScenarioViolations.Add($"{failed} .NET-client calls failed: {string.Join("; ", clients.SelectMany(c => c.Failures).Take(5))}");
        }

        return new ScenarioResult([pool, tight], new Expectations { NoCapacityImpossible = op => op.Pool == pool });
    }

    /// <summary>This build's version, from the one place it is set.</summary>
    private static string ThisVersion => Repository.ReleaseVersion;

    private static bool IsBroken(Operation o) => o.Status == 0 && o.Problem != ApiClient.Refused && o.Outcome != Outcome.Pending;

    private static long Failed(ClientBrokers[] clients) => clients.Sum(c => c.Failed);

    private static double Percentile(List<double> sorted, double q) =>
        sorted.Count == 0 ? 0 : sorted[Math.Clamp((int)Math.Ceiling(q * sorted.Count) - 1, 0, sorted.Count - 1)];

    /// <summary>The version an instance's /health reports (null when it reports none).</summary>
    private static async Task<string?> VersionAsync(Uri instance)
    {
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(5) };
        var health = JsonNode.Parse(await http.GetStringAsync(new Uri(instance, "health")));
        return health?["version"]?.GetValue<string>();
    }

    private sealed record Step(string Name, DateTimeOffset From, DateTimeOffset To, long ClientFailuresSoFar);
}
