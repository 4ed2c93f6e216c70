using Allocator.Host.Options;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Storage;

/// <summary>
/// Ready when the store answers a read (a pool lookup on a probe id that need not exist) within a
/// command timeout. The wait is bounded here, not only by cancelling the read: on a black-holed
/// connection a cancelled read kept the probe waiting for seconds after its token fired (the
/// db-partition fault scenario), and readiness stayed green through a whole partition.
/// </summary>
internal sealed class StoreHealthCheck(IWorkerStore store, IOptions<AllocatorTimeoutOptions> timeouts, TimeProvider time) : IHealthCheck
{
    public async Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, CancellationToken cancellationToken = default)
    {
        var limit = timeouts.Value.CommandTimeout;
        try
        {
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            timeout.CancelAfter(limit);
            _ = await store.GetPoolAsync("health-probe", timeout.Token).WaitAsync(limit, time, cancellationToken);
            return HealthCheckResult.Healthy($"The {store.Name} store answers.");
        }
        catch (TimeoutException exception)
        {
            return HealthCheckResult.Unhealthy($"The {store.Name} store did not answer within {limit.TotalSeconds:0.###} s.", exception);
        }
        catch (Exception exception) when (exception is not OperationCanceledException || !cancellationToken.IsCancellationRequested)
        {
            return HealthCheckResult.Unhealthy($"The {store.Name} store does not answer.", exception);
        }
    }
}
