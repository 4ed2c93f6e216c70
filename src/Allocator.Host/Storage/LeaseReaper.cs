using Allocator.Host.Options;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Storage;

/// <summary>
/// Ends expired leases every <see cref="AllocatorStorageOptions.ReapInterval"/>. Expiry is
/// decided by the store (database clock), and concurrent reapers on several instances never end
/// one allocation twice, so every instance runs one.
/// </summary>
internal sealed partial class LeaseReaper(IServiceProvider services, IOptions<AllocatorStorageOptions> options, TimeProvider time, ILogger<LeaseReaper> logger) : BackgroundService
{
    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        // Resolved here, not in the constructor: the store is created when the host starts.
        var store = services.GetRequiredService<IWorkerStore>();
        using var timer = new PeriodicTimer(options.Value.ReapInterval, time);
        while (await WaitAsync(timer, stoppingToken))
        {
            try
            {
                // Keep reaping while full batches come back, so a backlog clears quickly.
                while ((await store.ReapExpiredAsync(options.Value.ReapBatchSize, stoppingToken)).Count == options.Value.ReapBatchSize)
                {
                }
            }
            catch (Exception exception) when (exception is not OperationCanceledException)
            {
                LogFailed(logger, exception);
            }
        }
    }

    private static async Task<bool> WaitAsync(PeriodicTimer timer, CancellationToken cancellationToken)
    {
        try
        {
            return await timer.WaitForNextTickAsync(cancellationToken);
        }
        catch (OperationCanceledException)
        {
            return false;
        }
    }

    [LoggerMessage(Level = LogLevel.Warning, Message = "Reaping expired leases failed; retrying at the next interval.")]
    private static partial void LogFailed(ILogger logger, Exception exception);
}
