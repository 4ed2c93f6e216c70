using Allocator.Grains;
using Allocator.Host.Auth;
using Allocator.Host.Telemetry;
using Microsoft.AspNetCore.Http.HttpResults;

namespace Allocator.Host.Api;

internal static class PoolEndpoints
{
    public static void MapPoolEndpoints(this RouteGroupBuilder v1)
    {
        v1.MapPut("/pools/{pool}", UpsertPoolAsync).RequireScopes(ApiScopes.Admin)
            .WithName("PutPool")
            .WithSummary("Create or update a pool's settings (201 when created, 200 when updated).")
            .WithExamples("""{"strategy":"skip-locked","defaultLeaseSeconds":3600,"maxWaitMs":5000}""",
                (StatusCodes.Status201Created, """{"poolId":"demo","strategy":"skip-locked","defaultLeaseSeconds":3600,"maxWaitMs":5000,"heartbeatTimeoutSeconds":null,"serializeRegistrations":false}"""));
        v1.MapGet("/pools/{pool}", GetPoolAsync).RequireScopes(ApiScopes.Broker)
            .WithName("GetPool")
            .WithSummary("Pool statistics: workers, capacity, load, spread, waiters, strategy.")
            .WithExamples(null, (StatusCodes.Status200OK, """{"poolId":"demo","strategy":"skip-locked","defaultLeaseSeconds":3600,"maxWaitMs":5000,"workers":4,"availableWorkers":4,"capacity":20,"load":3,"freeSlots":17,"activeAllocations":3,"minLoad":0,"maxLoad":1,"loadSpread":1,"utilization":0.15,"waiters":0}"""));
    }

    private static async Task<Results<Created<PoolResponse>, Ok<PoolResponse>, ProblemHttpResult>> UpsertPoolAsync(
        string pool, PoolSettingsBody body, IWorkerStore store, CancellationToken cancellationToken)
    {
        var errors = new Dictionary<string, string[]>();
        Check(errors, "pool", AllocatorValidation.CheckId(pool, "pool"));
        var strategy = AllocationStrategy.SkipLocked;
        if (body.Strategy is not null && !AllocationStrategyNames.TryParse(body.Strategy, out strategy))
        {
            errors["strategy"] = [$"strategy must be '{AllocationStrategyNames.SkipLocked}' or '{AllocationStrategyNames.Strict}'."];
        }

        var lease = body.DefaultLeaseSeconds is { } l ? TimeSpan.FromSeconds(l) : (TimeSpan?)null;
        Check(errors, "defaultLeaseSeconds", AllocatorValidation.CheckLease(lease, "defaultLeaseSeconds"));
        if (body.MaxWaitMs is < 0 || body.MaxWaitMs > AllocatorLimits.MaxWait.TotalMilliseconds)
        {
            errors["maxWaitMs"] = [$"maxWaitMs must be between 0 and {AllocatorLimits.MaxWait.TotalMilliseconds:0}."];
        }

        if (body.HeartbeatTimeoutSeconds is < 1 or > 86_400)
        {
            errors["heartbeatTimeoutSeconds"] = ["heartbeatTimeoutSeconds must be between 1 and 86400."];
        }

        if (errors.Count > 0)
        {
            return Problems.Invalid(errors);
        }

        var settings = new PoolSettings
        {
            Strategy = strategy,
            DefaultLease = lease,
            MaxWait = TimeSpan.FromMilliseconds(body.MaxWaitMs ?? 0),
            HeartbeatTimeout = body.HeartbeatTimeoutSeconds is { } h ? TimeSpan.FromSeconds(h) : null,
            SerializeRegistrations = body.SerializeRegistrations ?? false,
        };
        var result = await store.UpsertPoolAsync(pool, settings, cancellationToken);
        return result.Created
            ? TypedResults.Created($"/v1/pools/{pool}", result.Pool.ToResponse())
            : TypedResults.Ok(result.Pool.ToResponse());
    }

    private static async Task<Results<Ok<PoolStatisticsResponse>, ProblemHttpResult>> GetPoolAsync(
        string pool, IWorkerStore store, IGrainFactory grains, PoolGauges gauges, CancellationToken cancellationToken)
    {
        if (AllocatorValidation.CheckId(pool, "pool") is { } error)
        {
            return Problems.Invalid("pool", error);
        }

        var statistics = await store.GetPoolStatisticsAsync(pool, cancellationToken);
        gauges.Record(statistics);
        var grain = await grains.GetPoolGrain(pool).GetStatusAsync();
        return TypedResults.Ok(statistics.ToResponse(grain.Waiters, grain.Silo));
    }

    internal static void Check(Dictionary<string, string[]> errors, string field, string? error)
    {
        if (error is not null)
        {
            errors[field] = [error];
        }
    }
}
