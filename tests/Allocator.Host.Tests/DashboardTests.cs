using System.Diagnostics.Metrics;
using System.Text.Json.Nodes;
using System.Text.RegularExpressions;
using Allocator.Client;

namespace Allocator.Host.Tests;

/// <summary>
/// The Grafana dashboard (eng/observability) queries metrics by their Prometheus names. Every
/// <c>allocator_*</c> name it uses must be the translation of an instrument the host publishes,
/// so a renamed instrument cannot leave a panel silently empty.
/// </summary>
public sealed partial class DashboardTests
{
    [Fact]
    public async Task EveryAllocatorMetricTheDashboardQueries_IsPublishedByTheHost()
    {
        var published = new HashSet<string>(StringComparer.Ordinal);
        using var listener = new MeterListener
        {
            InstrumentPublished = (instrument, l) =>
            {
                if (instrument.Meter.Name == "Allocator")
                {
                    lock (published)
                    {
                        published.UnionWith(PrometheusNames(instrument));
                    }
                }
            },
        };
        listener.Start();
        await using (var host = await TestHost.StartAsync())
        {
            // Touch the grain's and the host's instruments (created on first use).
            var pool = Unique.Name("dash");
            await host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
            await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 1));
            await host.Broker.AllocateAsync(pool, new AllocateRequest(), "d-1");
            await host.Broker.GetPoolAsync(pool);
        }

        var dashboard = JsonNode.Parse(await File.ReadAllTextAsync(Path.Combine(Repository.Root, "eng", "observability", "grafana", "dashboards", "allocator.json")))!;
        var queried = dashboard["panels"]!.AsArray()
            .SelectMany(p => p!["targets"]?.AsArray() ?? [])
            .SelectMany(t => AllocatorMetric().Matches(t!["expr"]!.GetValue<string>()).Select(m => m.Value))
            .Distinct()
            .ToList();

        queried.Should().NotBeEmpty();
        queried.Should().OnlyContain(name => published.Contains(name), $"the host publishes {string.Join(", ", published.Order())}");
    }

    /// <summary>Prometheus' OTLP translation: dots to underscores, the unit as a suffix (s: _seconds; 1 on a gauge: _ratio), _total on counters, _bucket/_sum/_count on histograms.</summary>
    private static IEnumerable<string> PrometheusNames(Instrument instrument)
    {
        var name = instrument.Name.Replace('.', '_');
        var type = instrument.GetType().GetGenericTypeDefinition();
        name += instrument.Unit switch
        {
            "s" => "_seconds",
            "1" when type == typeof(ObservableGauge<>) => "_ratio",
            _ => "",
        };
        if (type == typeof(Counter<>) || type == typeof(ObservableCounter<>))
        {
            return [name + "_total"];
        }

        return type == typeof(Histogram<>) ? [name + "_bucket", name + "_sum", name + "_count"] : [name];
    }


    /// <summary>A metric name in a query: every panel selects by pool, so a name is followed by its selector (labels such as allocator_pool are not).</summary>
    [GeneratedRegex(@"\ballocator_[a-z0-9_]+(?=\{)")]
    private static partial Regex AllocatorMetric();
}
