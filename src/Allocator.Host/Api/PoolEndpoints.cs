using Allocator.Grains;
using Allocator.Host.Auth;
using Allocator.Host.Demand;
using Allocator.Host.Options;
using Allocator.Host.Storage;
using Allocator.Host.Telemetry;
using Microsoft.AspNetCore.Http.HttpResults;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Api;

internal static class PoolEndpoints
{
    public static void MapPoolEndpoints(this RouteGroupBuilder v1)
    {
        v1.MapPut("/pools/{pool}", UpsertPoolAsync).RequireScopes(ApiScopes.Admin)
            .WithName("PutPool")
            .WithSummary("Create or update a pool's settings (201 when created, 200 when updated).")
            .WithDescription("With several databases, a new pool is placed on `database` when given, else on the database with the fewest pools; an existing pool stays where it is (409 if another database is named). `503` while the pool is being moved.")
            .WithProblems(StatusCodes.Status409Conflict, Problems.Conflict)
            .WithExamples("""{"strategy":"skip-locked","defaultLeaseSeconds":3600,"maxWaitMs":5000}""",
                (StatusCodes.Status201Created, """{"poolId":"demo","strategy":"skip-locked","defaultLeaseSeconds":3600,"maxWaitMs":5000,"heartbeatTimeoutSeconds":null,"serializeRegistrations":false,"database":"default","placement":"spread"}"""));
        v1.MapGet("/pools/{pool}", GetPoolAsync).RequireScopes(ApiScopes.Broker)
            .WithName("GetPool")
            .WithSummary("Pool statistics: workers, capacity, load, spread, waiters, strategy, placement, and the demand an autoscaler reads (workers wanted).")
            .WithExamples(null, (StatusCodes.Status200OK, """{"poolId":"demo","strategy":"skip-locked","defaultLeaseSeconds":3600,"maxWaitMs":5000,"workers":4,"availableWorkers":4,"capacity":20,"load":3,"freeSlots":17,"activeAllocations":3,"minLoad":0,"maxLoad":1,"loadSpread":1,"utilization":0.15,"waiters":0,"database":"default"}"""));
        v1.MapPost("/pools/{pool}/move", MovePoolAsync).RequireScopes(ApiScopes.Admin)
            .WithName("MovePool")
            .WithSummary("Move a drained, empty pool to another database (200; moved false when it is there already).")
            .WithDescription("Only a pool with no worker and no active allocation moves: drain its workers, let their allocations end, deregister them, move it, then register the workers again (any instance). The pool answers `503` for the moment of the move. Allocations that ended before the move stay in the old database's history (docs/postgresql.md, \"Moving a pool\"). Moving a pool whose move was interrupted to the same database finishes it; to the database it came from cancels it.")
            .WithProblems(StatusCodes.Status409Conflict, Problems.Conflict)
            .WithExamples("""{"database":"second"}""", (StatusCodes.Status200OK, """{"poolId":"demo","database":"second","previousDatabase":"default","moved":true}"""));
    }

    private static async Task<Results<Created<PoolResponse>, Ok<PoolResponse>, ProblemHttpResult>> UpsertPoolAsync(
        string pool, PoolSettingsBody body, IPoolPlacement placement, Databases databases, CancellationToken cancellationToken)
    {
        var errors = new Dictionary<string, string[]>();
        Check(errors, "pool", AllocatorValidation.CheckId(pool, "pool"));
        Check(errors, "database", CheckDatabase(body.Database, databases));
        var strategy = AllocationStrategy.SkipLocked;
        if (body.Strategy is not null && !AllocationStrategyNames.TryParse(body.Strategy, out strategy))
        {
            errors["strategy"] = [$"strategy must be '{AllocationStrategyNames.SkipLocked}' or '{AllocationStrategyNames.Strict}'."];
        }

        var workerPlacement = Placement.Spread;
        if (body.Placement is not null && !PlacementNames.TryParse(body.Placement, out workerPlacement))
        {
            errors["placement"] = [$"placement must be '{PlacementNames.Spread}' or '{PlacementNames.Pack}'."];
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
            Placement = workerPlacement,
        };
        var (result, database) = await placement.UpsertPoolAsync(pool, settings, body.Database?.ToLowerInvariant(), cancellationToken);
        return result.Created
            ? TypedResults.Created($"/v1/pools/{pool}", result.Pool.ToResponse(database))
            : TypedResults.Ok(result.Pool.ToResponse(database));
    }

    private static async Task<Results<Ok<PoolStatisticsResponse>, ProblemHttpResult>> GetPoolAsync(
        string pool, IWorkerStore store, IPoolPlacement placement, IGrainFactory grains, PoolGauges gauges, IOptions<AllocatorDemandOptions> demandOptions, CancellationToken cancellationToken)
    {
        if (AllocatorValidation.CheckId(pool, "pool") is { } error)
        {
            return Problems.Invalid("pool", error);
        }

        var statistics = await store.GetPoolStatisticsAsync(pool, cancellationToken);
        var grain = await grains.GetPoolGrain(pool).GetStatusAsync();
        var demand = DemandEstimate.From(statistics, grain.Demand, demandOptions.Value);
        gauges.Record(statistics, demand);
        return TypedResults.Ok(statistics.ToResponse(grain.Waiters, grain.Silo, await placement.DatabaseOfAsync(pool, cancellationToken), demand));
    }

    private static async Task<Results<Ok<PoolMoveResponse>, ProblemHttpResult>> MovePoolAsync(
        string pool, MovePoolBody body, IPoolPlacement placement, Databases databases, CancellationToken cancellationToken)
    {
        var errors = new Dictionary<string, string[]>();
        Check(errors, "pool", AllocatorValidation.CheckId(pool, "pool"));
        Check(errors, "database", CheckDatabase(body.Database, databases));
        if (errors.Count > 0)
        {
            return Problems.Invalid(errors);
        }

        var move = await placement.MoveAsync(pool, body.Database.ToLowerInvariant(), cancellationToken);
        return TypedResults.Ok(new PoolMoveResponse(move.PoolId, move.To, move.From, move.Moved));
    }

    /// <summary>A database named in a request must be one of this instance's (names are case-insensitive, as configuration keys).</summary>
    private static string? CheckDatabase(string? database, Databases databases) =>
        database is null || databases.Find(database.ToLowerInvariant()) is not null
            ? null
            : $"database '{database}' is not one of this service's databases ({string.Join(", ", databases.All.Select(d => d.Name))}).";

    internal static void Check(Dictionary<string, string[]> errors, string field, string? error)
    {
        if (error is not null)
        {
            errors[field] = [error];
        }
    }
}
