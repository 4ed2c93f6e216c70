using Allocator.Host.Options;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Storage;

/// <summary>
/// Ends expired leases every <see cref="AllocatorStorageOptions.ReapInterval"/>, one loop per
/// database (issue 23): a database that is down or not started yet fails only its own loop,
/// which retries at the next interval, while the others keep reaping. Expiry is decided by the
/// store (database clock), and concurrent reapers on several instances never end one allocation
/// twice, so every instance runs them.
/// </summary>
internal sealed partial class LeaseReaper(IServiceProvider services, IOptions<AllocatorStorageOptions> options, TimeProvider time, ILogger<LeaseReaper> logger) : BackgroundService
{
    protected override Task ExecuteAsync(CancellationToken stoppingToken)
    {
        // Resolved here, not in the constructor: the stores are created when the host starts.
        var databases = services.GetRequiredService<Databases>();
        return Task.WhenAll(databases.All.Select(d => Task.Run(() => ReapAsync(d, stoppingToken), CancellationToken.None)));
    }

    private async Task ReapAsync(Database database, CancellationToken stoppingToken)
    {
        using var timer = new PeriodicTimer(options.Value.ReapInterval, time);
        var failing = false;
        while (await WaitAsync(timer, stoppingToken))
        {
            if (database.NotStarted is not null)
            {
                continue; // DatabaseStartup is still trying; its migrations come first.
            }

            try
            {
                // Keep reaping while full batches come back, so a backlog clears quickly.
                while ((await database.Store.ReapExpiredAsync(options.Value.ReapBatchSize, stoppingToken)).Count == options.Value.ReapBatchSize)
                {
                }

                failing = false;
            }
            catch (Exception exception) when (exception is not OperationCanceledException)
            {
                // Once per outage, not once per interval: a database down for minutes would
                // otherwise log a line a second.
                if (!failing)
                {
                    LogFailed(logger, database.Name, exception);
                }

                failing = true;
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

    [LoggerMessage(Level = LogLevel.Warning, Message = "Reaping expired leases on database '{Database}' failed; retrying at every interval (logged again once it has worked).")]
    private static partial void LogFailed(ILogger logger, string database, Exception exception);
}
