using System.Text.Json;
using Allocator.Host.Lifecycle;
using Allocator.Host.Options;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Storage;

/// <summary>
/// Readiness of every database (issue 23): each must answer a read (a pool lookup on a probe id
/// that need not exist) within a command timeout, all probed at once. Healthy when all answer;
/// <b>degraded</b> (still 200: the instance keeps its place behind the load balancer) when some do
/// not, since the others' pools are served; unhealthy (503) when none does. The report names
/// every database (<see cref="WriteAsync"/>). The wait is bounded here, not only by cancelling the
/// read: on a black-holed connection a cancelled read kept the probe waiting for seconds after
/// its token fired (the db-partition fault scenario), and readiness stayed green through a whole
/// partition.
/// </summary>
internal sealed class StoreHealthCheck(IServiceProvider services, IOptions<AllocatorTimeoutOptions> timeouts, TimeProvider time) : IHealthCheck
{
    public async Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, CancellationToken cancellationToken = default)
    {
        var databases = services.GetRequiredService<Databases>();
        var results = await Task.WhenAll(databases.All.Select(d => ProbeAsync(d, cancellationToken)));
        var data = new Dictionary<string, object>(StringComparer.Ordinal);
        for (var i = 0; i < results.Length; i++)
        {
            data[databases.All[i].Name] = results[i].Error ?? "answers";
        }

        var down = results.Count(r => r.Error is not null);
        if (databases.All.Count == 1)
        {
            // One database: as before issue 23, the store's answer is the readiness.
            var store = databases.Default.Store.Name;
            return down == 0
                ? HealthCheckResult.Healthy($"The {store} store answers.", data: data)
                : HealthCheckResult.Unhealthy($"The {store} store {results[0].Error}.", results[0].Exception, data);
        }

        var summary = string.Join("; ", databases.All.Select((d, i) => $"{d.Name}: {results[i].Error ?? "answers"}"));
        return down == 0 ? HealthCheckResult.Healthy(summary, data)
            : down < results.Length ? HealthCheckResult.Degraded(summary, results.FirstOrDefault(r => r.Exception is not null).Exception, data)
            : HealthCheckResult.Unhealthy(summary, results[0].Exception, data);
    }

    private async Task<(string? Error, Exception? Exception)> ProbeAsync(Database database, CancellationToken cancellationToken)
    {
        if (database.NotStarted is { } why)
        {
            return ($"is not started ({why})", null);
        }

        var limit = timeouts.Value.CommandTimeout;
        try
        {
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            timeout.CancelAfter(limit);
            _ = await database.Store.GetPoolAsync("health-probe", timeout.Token).WaitAsync(limit, time, cancellationToken);
            return (null, null);
        }
        catch (TimeoutException exception)
        {
            return ($"did not answer within {limit.TotalSeconds:0.###} s", exception);
        }
        catch (Exception exception) when (exception is not OperationCanceledException || !cancellationToken.IsCancellationRequested)
        {
            return ("does not answer", exception);
        }
    }

    /// <summary>
    /// The body of <c>/health</c> and <c>/health/ready</c>: the overall status and each database's,
    /// by name (never a connection string), e.g.
    /// <c>{"status":"Degraded","version":"1.0.0","databases":{"a":"answers","b":"does not answer"},"replication":{"a":"synchronous","b":"none"}}</c>
    /// (the version this instance runs: during a rolling upgrade, which instances are on which release).
    /// </summary>
    public static Task WriteAsync(HttpContext context, HealthReport report)
    {
        context.Response.ContentType = "application/json";
        var databases = report.Entries.TryGetValue(Name, out var entry) ? entry.Data : new Dictionary<string, object>();
        var body = new Dictionary<string, object>
        {
            ["status"] = report.Status.ToString(),
            ["version"] = ServiceVersion.Version,
            ["databases"] = databases,
        };
        if (context.RequestServices.GetService<ReplicationWatch>() is { Latest.Count: > 0 } replication)
        {
            // How each database replicates its commits, as it last said (issue 48): synchronous,
            // asynchronous or none.
            body["replication"] = replication.Latest.ToDictionary(r => r.Key, r => r.Value.Name, StringComparer.Ordinal);
        }

        if (report.Entries.TryGetValue(DrainingHealthCheck.Name, out var stopping) && stopping.Status != HealthStatus.Healthy)
        {
            // Unready because the instance is stopping (issue 21), whatever its databases say.
            body["stopping"] = true;
        }

        return context.Response.WriteAsync(JsonSerializer.Serialize(body));
    }

    /// <summary>The check's name in the health report.</summary>
    public const string Name = "databases";
}
