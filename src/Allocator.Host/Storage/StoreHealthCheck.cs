using Microsoft.Extensions.Diagnostics.HealthChecks;

namespace Allocator.Host.Storage;

/// <summary>Ready when the store answers a read (a pool lookup on a probe id that need not exist).</summary>
internal sealed class StoreHealthCheck(IWorkerStore store) : IHealthCheck
{
    public async Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, CancellationToken cancellationToken = default)
    {
        try
        {
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            timeout.CancelAfter(TimeSpan.FromSeconds(5));
            _ = await store.GetPoolAsync("health-probe", timeout.Token);
            return HealthCheckResult.Healthy($"The {store.Name} store answers.");
        }
        catch (Exception exception) when (exception is not OperationCanceledException || !cancellationToken.IsCancellationRequested)
        {
            return HealthCheckResult.Unhealthy($"The {store.Name} store does not answer.", exception);
        }
    }
}
