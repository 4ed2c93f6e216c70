namespace Allocator.LoadTests.Scale;

/// <summary>
/// The capacity model of docs/capacity.md, on the machine the scale workload runs on, where every
/// process shares the same cores. An allocation (allocate + release) costs CPU in every process:
/// <code>
/// c(N, b) = c_host(b) + c_remote·(N−1)/N + c_db(b) + c_client(b)   µs per allocation
/// c_host(b) = h_batch/b + h_call,   c_db(b) = d_batch/b + d_call,   c_client(b) = l_batch/b + l_call
/// X(N, D, b) = cores / c(N, b)                                      allocations per second
/// </code>
/// N host instances, D PostgreSQL servers, b allocations per batch (group commit: a batch's
/// statement, commit and grain turn are shared by its allocations). A call reaches the pool's
/// grain on another silo with probability (N−1)/N and then pays serialization and a loopback hop on
/// both sides (c_remote). The costs are all of a process's CPU in the measured window, its own
/// background work included (timers, membership, autovacuum), spread over the allocations: the
/// per-batch parts also carry that fixed work, since throughput grows with the batch size (the
/// load generator batches nothing, yet costs 3–4 times more per allocation at batches of 1 than
/// at 16; all three processes are split alike).
/// Calibrated on three configurations of the run: 1 host × 1 database with many pools and with
/// one pool (two batch sizes: the per-batch and per-call parts of c_host, c_db and c_client),
/// and 3 hosts × 1 database (c_remote). The other configurations are predictions: a second
/// database adds no CPU per allocation (same pools, same batch sizes); on one machine it cannot
/// add cores.
/// </summary>
internal sealed record CapacityModel(
    double HostPerBatch,
    double HostPerCall,
    double RemoteMicros,
    double DatabasePerBatch,
    double DatabasePerCall,
    double ClientPerBatch,
    double ClientPerCall)
{
    /// <param name="manyPools">1 host × 1 database, many pools (small batches).</param>
    /// <param name="threeHosts">3 hosts × 1 database, many pools.</param>
    /// <param name="onePool">1 host × 1 database, one pool (large batches).</param>
    public static CapacityModel Calibrate(ScaleMeasurement manyPools, ScaleMeasurement threeHosts, ScaleMeasurement onePool)
    {
        var (b1, b2) = (BatchSize(manyPools), BatchSize(onePool));
        var (hostBatch, hostCall) = Split(CostOf(manyPools, "host-"), b1, CostOf(onePool, "host-"), b2);
        var (databaseBatch, databaseCall) = Split(CostOf(manyPools, "pg-"), b1, CostOf(onePool, "pg-"), b2);
        var (clientBatch, clientCall) = Split(CostOf(manyPools, "load generator"), b1, CostOf(onePool, "load generator"), b2);
        var host3 = hostBatch / BatchSize(threeHosts) + hostCall;
        return new CapacityModel(
            hostBatch,
            hostCall,
            Math.Max(0, (CostOf(threeHosts, "host-") - host3) / (2.0 / 3.0)),
            databaseBatch,
            databaseCall,
            clientBatch,
            clientCall);
    }

    /// <summary>CPU µs one allocation costs in all processes of a configuration at batch size <paramref name="batch"/>.</summary>
    public double MicrosPerAllocation(ScaleConfiguration configuration, double batch) =>
        HostPerBatch / batch + HostPerCall + RemoteMicros * (configuration.Hosts - 1) / configuration.Hosts + DatabasePerBatch / batch + DatabasePerCall + ClientPerBatch / batch + ClientPerCall;

    /// <summary>Allocations per second with <paramref name="cores"/> cores for all of the configuration's processes.</summary>
    public double Predict(ScaleConfiguration configuration, double cores, double batch) =>
        cores * 1e6 / MicrosPerAllocation(configuration, batch);

    /// <summary>The mean allocations per batch over a measurement's databases (at least 1).</summary>
    public static double BatchSize(ScaleMeasurement measurement) =>
        Math.Max(1, measurement.BatchSizes.Values.DefaultIfEmpty(1).Average());

    /// <summary>Per-batch and per-call parts of a cost seen at two batch sizes: c = batch/b + call.</summary>
    private static (double PerBatch, double PerCall) Split(double cost1, double b1, double cost2, double b2)
    {
        var spread = 1 / b1 - 1 / b2;
        var perBatch = spread > 0.05 ? Math.Max(0, (cost1 - cost2) / spread) : 0; // no batch-size spread: all per call
        return (perBatch, Math.Max(0, cost1 - perBatch / b1));
    }

    /// <summary>CPU µs per allocation of the processes whose name starts with <paramref name="prefix"/>, together.</summary>
    private static double CostOf(ScaleMeasurement measurement, string prefix) =>
        measurement.Processes.Where(p => p.Name.StartsWith(prefix, StringComparison.Ordinal)).Sum(p => p.Seconds) * 1e6 / Math.Max(1, measurement.Allocations);
}
