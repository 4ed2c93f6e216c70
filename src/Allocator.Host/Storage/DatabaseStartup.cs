using Allocator.Host.Options;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Storage;

/// <summary>
/// Starts every database of a host with several (issue 23), in the host's starting step, before
/// Kestrel and the silo: migrations (with the stores' own locking and checksums) and the LISTEN
/// connection, per database. The default database holds the pool directory and the cluster's
/// membership, so a default that cannot be started stops the start, as a single database does.
/// Any other database that cannot be reached is started in the background, every
/// <see cref="RetryInterval"/>, while its pools answer 503 and the others are served: an outage of
/// one database must not keep instances from (re)starting.
/// </summary>
internal sealed partial class DatabaseStartup(Databases databases, IOptions<AllocatorTimeoutOptions> timeouts, TimeProvider time, ILogger<DatabaseStartup> logger)
    : IHostedLifecycleService, IAsyncDisposable
{
    public static readonly TimeSpan RetryInterval = TimeSpan.FromSeconds(2);

    private readonly CancellationTokenSource _stop = new();
    private readonly List<Task> _background = [];

    /// <summary>How long one attempt may take: a connection attempt and the LISTEN wait end well before this.</summary>
    private TimeSpan Bound => timeouts.Value.CommandTimeout * 2 + TimeSpan.FromSeconds(5);

    public async Task StartingAsync(CancellationToken cancellationToken)
    {
        var first = databases.Default;
        try
        {
            await first.Placement!.InitializeAsync(cancellationToken);
            first.NotStarted = null;
        }
        catch (Exception ex) when (ex is not OperationCanceledException)
        {
            // Names the setting, never the connection string (it may hold a password).
            throw new InvalidOperationException(
                $"Cannot start the default database '{first.Name}' ({Setting(first.Name)}), which holds the pool directory: {ex.Message}", ex);
        }

        await Task.WhenAll(databases.All.Skip(1).Select(d => StartAsync(d, cancellationToken)));
    }

    private async Task StartAsync(Database database, CancellationToken cancellationToken)
    {
        if (await TryStartAsync(database, cancellationToken) is { } failure)
        {
            LogNotStarted(logger, database.Name, Setting(database.Name), RetryInterval.TotalSeconds, failure);
            lock (_background)
            {
                _background.Add(Task.Run(() => RetryAsync(database, _stop.Token), CancellationToken.None));
            }
        }
    }

    /// <returns>Null when started; the failure otherwise.</returns>
    private async Task<Exception?> TryStartAsync(Database database, CancellationToken cancellationToken)
    {
        try
        {
            await database.Placement!.InitializeAsync(cancellationToken).WaitAsync(Bound, time, cancellationToken);
            database.NotStarted = null;
            return null;
        }
        catch (Exception ex) when (ex is not OperationCanceledException || !cancellationToken.IsCancellationRequested)
        {
            database.NotStarted = "it could not be reached when this instance started";
            return ex;
        }
    }

    private async Task RetryAsync(Database database, CancellationToken stop)
    {
        while (!stop.IsCancellationRequested)
        {
            try
            {
                await Task.Delay(RetryInterval, time, stop);
            }
            catch (OperationCanceledException)
            {
                return;
            }

            if (await TryStartAsync(database, stop) is null)
            {
                LogStartedLate(logger, database.Name);
                return;
            }
        }
    }

    private static string Setting(string name) =>
        name == ConfiguredDatabases.DefaultName ? "ConnectionStrings:Allocator" : $"{ConfiguredDatabases.Section}:{name}";

    public Task StartAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StartedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StoppingAsync(CancellationToken cancellationToken) => _stop.CancelAsync();

    public Task StopAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StoppedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public async ValueTask DisposeAsync()
    {
        await _stop.CancelAsync();
        Task[] background;
        lock (_background)
        {
            background = [.. _background];
        }

        await Task.WhenAll(background);
        _stop.Dispose();
    }

    [LoggerMessage(Level = LogLevel.Error, Message = "Database '{Database}' ({Setting}) could not be started; its pools answer 503 until it is. Trying again every {Seconds} s; the other databases serve their pools.")]
    private static partial void LogNotStarted(ILogger logger, string database, string setting, double seconds, Exception exception);

    [LoggerMessage(Level = LogLevel.Information, Message = "Database '{Database}' started (migrated, listening); its pools are served.")]
    private static partial void LogStartedLate(ILogger logger, string database);
}
