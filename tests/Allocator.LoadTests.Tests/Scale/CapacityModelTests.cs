using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Scale;

namespace Allocator.LoadTests.Tests.Scale;

public sealed class CapacityModelTests
{
    // The medians of the full scale run of 2026-11-25 15:23 UTC (docs/capacity.md): allocations/s,
    // µs per allocation of each host, each PostgreSQL server and the load generator, batch size.
    private static readonly ScaleMeasurement ManyPools = Measurement(new(1, 1), 181, [2107], [2237], 242, 1.0);
    private static readonly ScaleMeasurement ThreeHosts = Measurement(new(3, 1), 158, [1599, 1513, 1788], [3143], 210, 1.0);
    private static readonly ScaleMeasurement OnePool = Measurement(new(1, 1, Pools: 1), 940, [344], [348], 66, 15.9);

    [Fact]
    public void Calibrate_TwoBatchSizes_ReproducesTheCostOfBothOneHostRuns()
    {
        var model = CapacityModel.Calibrate(ManyPools, ThreeHosts, OnePool);

        model.MicrosPerAllocation(ManyPools.Configuration, 1.0).Should().BeApproximately(2107 + 2237 + 242, 0.5);
        model.MicrosPerAllocation(OnePool.Configuration, 15.9).Should().BeApproximately(344 + 348 + 66, 0.5);
    }

    [Fact]
    public void Calibrate_ThreeHosts_ChargesTheHostsRiseToTheRemoteCall()
    {
        var model = CapacityModel.Calibrate(ManyPools, ThreeHosts, OnePool);

        // Hosts: 4,900 µs over three against 2,107 over one, at the same batch size; (N−1)/N = 2/3.
        model.RemoteMicros.Should().BeApproximately((1599 + 1513 + 1788 - 2107) / (2.0 / 3.0), 0.5);
        model.MicrosPerAllocation(ThreeHosts.Configuration, 1.0).Should().BeApproximately(4900 + 2237 + 242, 0.5, "PostgreSQL's rise with three hosts is charged to nobody");
    }

    [Fact]
    public void Predict_IsTheFreeCoresOverTheCostPerAllocation()
    {
        var model = CapacityModel.Calibrate(ManyPools, ThreeHosts, OnePool);

        var predicted = model.Predict(new ScaleConfiguration(1, 2), cores: 2 - 0.81, batch: 1.0);

        predicted.Should().BeApproximately(1.19e6 / 4586, 0.5, "a second database adds no CPU per allocation at the same batch size");
    }

    [Fact]
    public void Calibrate_NoSpreadInBatchSize_PutsEverythingPerCall()
    {
        var sameBatches = Measurement(new(1, 1, Pools: 1), 300, [1000], [1000], 100, 1.02);

        var model = CapacityModel.Calibrate(ManyPools, ThreeHosts, sameBatches);

        model.HostPerBatch.Should().Be(0);
        model.DatabasePerBatch.Should().Be(0);
        model.HostPerCall.Should().BeApproximately(2107, 0.5);
    }

    private static ScaleMeasurement Measurement(ScaleConfiguration configuration, double throughput, double[] hosts, double[] databases, double client, double batch)
    {
        const double seconds = 10;
        var allocations = (long)(throughput * seconds);
        double Cpu(double micros) => micros * allocations / 1e6;
        List<ProcessCpu> processes =
        [
            .. hosts.Select((h, i) => new ProcessCpu($"host-{i}", Cpu(h))),
            .. databases.Select((d, i) => new ProcessCpu($"pg-{(char)('a' + i)}", Cpu(d))),
            new ProcessCpu("load generator", Cpu(client)),
        ];
        return new ScaleMeasurement(
            configuration,
            1,
            allocations,
            seconds,
            LatencyStatistics.FromSorted([1.0]),
            processes,
            OthersCores: 1,
            Cpus: 2,
            BatchSizes: databases.Select((_, i) => ((char)('a' + i)).ToString()).ToDictionary(d => d, _ => batch),
            Audits: new Dictionary<string, AuditResult>(),
            Errors: 0);
    }
}
