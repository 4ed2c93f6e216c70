using System.Diagnostics;
using Allocator.Grains;
using Allocator.Host.Auth;
using Allocator.Host.Lifecycle;
using Allocator.Host.Options;
using Allocator.Host.Telemetry;
using Allocator.Telemetry;
using Microsoft.AspNetCore.Http.HttpResults;
using Microsoft.AspNetCore.Mvc;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Api;

internal static class AllocationEndpoints
{
    public const string IdempotencyKeyHeader = "Idempotency-Key";

    public static void MapAllocationEndpoints(this RouteGroupBuilder v1)
    {
        // The allocate call manages its own deadline (maxWaitMs + request timeout), so the
        // request-wide timeout policy does not apply to it. The grain's own call timeout
        // (maxWaitMs + grain call timeout) is shorter and fires first: 503 unavailable.
        v1.MapPost("/pools/{pool}/allocations", AllocateAsync).RequireScopes(ApiScopes.Broker).DisableRequestTimeout()
            .WithName("Allocate")
            .WithSummary("Allocate slots on the least-loaded eligible worker (201 new, 200 existing for the same idempotency key, 409 no-capacity).")
            .WithDescription("Send the caller's session key as the `Idempotency-Key` header (or `sessionKey` in the body): a retry with the same key returns the allocation that committed, never a second one. `maxWaitMs` waits in memory for capacity. A `503` means the outcome is unknown: retry with the same key.")
            .WithProblems(StatusCodes.Status409Conflict, Problems.NoCapacity, Problems.Conflict)
            .WithProblems(StatusCodes.Status504GatewayTimeout, Problems.Timeout)
            .WithExamples("""{"units":1,"tags":["gpu"],"maxWaitMs":5000,"leaseSeconds":3600}""", (StatusCodes.Status201Created, Example.Allocation), (StatusCodes.Status200OK, Example.Allocation));
        v1.MapGet("/pools/{pool}/allocations/{allocationId}", GetAsync).RequireScopes(ApiScopes.Broker)
            .WithName("GetAllocation")
            .WithSummary("One allocation, active or ended.")
            .WithExamples(null, (StatusCodes.Status200OK, Example.Allocation));
        v1.MapDelete("/pools/{pool}/allocations/{allocationId}", ReleaseAsync).RequireScopes(ApiScopes.Broker)
            .WithName("Release")
            .WithSummary("Release an allocation; ?epoch= must be its current epoch.")
            .WithProblems(StatusCodes.Status409Conflict, Problems.StaleEpoch, Problems.Conflict);
        v1.MapPost("/pools/{pool}/allocations/{allocationId}/renew", RenewAsync).RequireScopes(ApiScopes.Broker)
            .WithName("Renew")
            .WithSummary("Extend the lease from now and advance the epoch.")
            .WithProblems(StatusCodes.Status409Conflict, Problems.StaleEpoch, Problems.Conflict)
            .WithExamples("""{"epoch":17,"leaseSeconds":3600}""", (StatusCodes.Status200OK, Example.Allocation.Replace("\"epoch\":17", "\"epoch\":18", StringComparison.Ordinal)));
    }

    /// <summary>Example bodies for the OpenAPI document.</summary>
    /// <summary>What a settled allocation keeps of the backstop to be answered before it.</summary>
    internal static readonly TimeSpan SettleAnswerTime = TimeSpan.FromMilliseconds(500);

    private static class Example
    {
        public const string Allocation = """{"allocationId":"0193a5c2-7d41-7c3e-9a0b-5f1e2d3c4b5a","poolId":"demo","workerId":"host-2","address":"10.0.0.2:3389","sessionKey":"session-1","units":1,"epoch":17,"createdAt":"2026-11-23T10:15:00+00:00","expiresAt":"2026-11-23T11:15:00+00:00","endedAt":null,"active":true}""";
    }

    private static async Task<Results<Created<AllocationResponse>, Ok<AllocationResponse>, ProblemHttpResult>> AllocateAsync(
        string pool,
        [FromHeader(Name = IdempotencyKeyHeader)] string? idempotencyKey,
        AllocateBody body,
        HttpContext context,
        PoolGrainCaller poolGrains,
        IWorkerStore store,
        IPoolSettingsCache pools,
        Draining draining,
        IOptions<AllocatorTimeoutOptions> timeouts,
        ApiMetrics metrics,
        TimeProvider time,
        CancellationToken cancellationToken)
    {
        var started = time.GetTimestamp();
        var errors = new Dictionary<string, string[]>();
        PoolEndpoints.Check(errors, "pool", AllocatorValidation.CheckId(pool, "pool"));
        if (ReadRequest(errors, idempotencyKey, body, context.GetCaller().Tenant, out var maxWait) is not { } request)
        {
            return Problems.Invalid(errors);
        }

        // The deadline covers the whole call from here: a read of the pool's settings that misses
        // the cache while the database is slow spends the call's own time (issue 39, #5).
        using var deadline = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken, draining.RequestsCutOff);
        deadline.CancelAfter(maxWait + timeouts.Value.GrainCallTimeout);
        try
        {
            // A warm cache answers at once; a read that goes to the database is also waited for
            // only until the deadline (on a connection that stopped answering it may not heed it).
            var read = pools.GetAsync(pool, deadline.Token);
            if ((read.IsCompletedSuccessfully ? read.Result : await read.AsTask().WaitAsync(deadline.Token)) is null)
            {
                // Answered from the settings cache (warm for a pool that exists): no pool grain is
                // activated for a name anyone may send (issue 22, #2).
                return Problems.PoolNotFound(pool);
            }
        }
        catch (OperationCanceledException) when (!cancellationToken.IsCancellationRequested)
        {
            metrics.RecordAllocation(pool, AllocatorTelemetry.Outcomes.Timeout, time.GetElapsedTime(started));
            return Problems.ServiceUnavailable(
                "The pool's settings could not be read in time; nothing is held for this request. Retry with the same idempotency key.",
                outcomeUnknown: false);
        }

        // Child of the HTTP server span (Activity.Current); the grain, batch and SQL spans nest below it.
        using var activity = AllocatorTelemetry.ActivitySource.StartActivity("allocator.allocate");
        activity?.SetTag(AllocatorTelemetry.Tags.Pool, pool);
        activity?.SetTag(AllocatorTelemetry.Tags.Units, request.Units);

        // The grain call gives up after the wait plus the grain call timeout: Orleans then asks the
        // grain to cancel and waits for its answer, so the answer is either the outcome (committed)
        // or a cancellation the grain took responsibility for (nothing written, or released). Only
        // a grain that does not answer even that by the HTTP timeout leaves the outcome unknown.
        // While the pool's grain moves between instances (a graceful stop hands it over; a killed
        // instance's grain is activated again elsewhere) the call is sent again within the same
        // deadline (PoolGrainCaller), so callers see a slower answer, not a 503.
        // A client that goes away (RequestAborted) cancels the grain call the same way, and this
        // waits for the grain's answer to that too: waiting on RequestAborted here as well let this
        // method end inside the token's callbacks, disposing the linked source before its own
        // callback ran, so the grain never heard of the abort and kept an allocation nobody held
        // (issue 20, #1: a broker that closed its connection while its batch was in the store).
        // A wait for capacity also ends when this instance stops and its request drain runs out.
        AllocationOutcome outcome;
        try
        {
            // The grain call's backstop, counted from the start of the request like its deadline.
            // An outcome a departed silo left unknown may be settled past the deadline, within
            // the backstop (less a moment to answer), unless the caller leaves or this instance stops.
            var backstop = maxWait + timeouts.Value.RequestTimeout - time.GetElapsedTime(started);
            using var settleCancellation = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken, draining.RequestsCutOff);
            var settling = new Settling(backstop - SettleAnswerTime, settleCancellation.Token);
            outcome = await poolGrains.AllocateAsync(pool, request, maxWait, deadline.Token, settling)
                .WaitAsync(backstop > TimeSpan.Zero ? backstop : TimeSpan.Zero, time, CancellationToken.None);
        }
        catch (Exception ex) when (ex is OperationCanceledException or TimeoutException && !cancellationToken.IsCancellationRequested)
        {
            var unknown = ex is TimeoutException;
            activity?.SetStatus(ActivityStatusCode.Error, unknown ? "grain did not answer" : "grain call timed out");
            metrics.RecordAllocation(pool, AllocatorTelemetry.Outcomes.Timeout, time.GetElapsedTime(started));
            return Problems.ServiceUnavailable(
                unknown
                    ? "The allocation did not finish in time and its outcome is unknown; retry with the same idempotency key."
                    : draining.RequestsCutOff.IsCancellationRequested
                        ? "This instance is stopping and the wait for capacity outlasted its shutdown; nothing is held for it. Retry on another instance with the same idempotency key."
                        : "The allocation did not finish in time; nothing is held for it. Retry with the same idempotency key.",
                outcomeUnknown: unknown);
        }

        Tag(activity, outcome);
        var outcomeName = AllocatorTelemetry.Outcomes.Of(outcome.Status);
        activity?.SetTag(AllocatorTelemetry.Tags.Outcome, outcomeName);
        metrics.RecordAllocation(pool, outcomeName, time.GetElapsedTime(started));

        switch (outcome.Status)
        {
            case AllocationStatus.Allocated:
                var created = outcome.Allocation!;
                if (cancellationToken.IsCancellationRequested)
                {
                    // The broker closed its connection after the grain answered and before this
                    // answer could be written: it never learns of the allocation, so it goes back
                    // (the grain keeps it if a retry of the key was answered it meanwhile).
                    activity?.SetTag(AllocatorTelemetry.Tags.Outcome, "caller_left");
                    await poolGrains.AbandonAsync(pool, request, created);
                }

                return TypedResults.Created($"/v1/pools/{pool}/allocations/{created.AllocationId}", created.ToResponse());
            case AllocationStatus.Existing:
                return await CheckSameRequestAsync(outcome.Allocation!, request, store, cancellationToken) is { } conflict
                    ? Problems.ConflictWith(conflict)
                    : TypedResults.Ok(outcome.Allocation!.ToResponse());
            case AllocationStatus.NoCapacity:
                return Problems.NoCapacityIn(pool, maxWait);
            default:
                // A store that could not serve this one request: nothing was allocated for it, or
                // (outcome unknown) its statement may have committed. Either way the caller retries
                // with the same idempotency key, which returns the allocation if one was made.
                // ProblemMiddleware answers 503 with Retry-After and the matching problem type.
                throw new AllocatorException(AllocatorErrorKind.Unavailable, outcome.OutcomeUnknown
                    ? "The store failed while deciding this allocation; it may have been made. Retry with the same idempotency key."
                    : "The store could not complete this allocation; nothing was allocated for it. Retry with the same idempotency key.", outcome.OutcomeUnknown, innerException: null);
        }
    }

    /// <summary>
    /// The allocation a body asks for (its key the caller's tenant's, issue 22: another tenant's
    /// request with it is another key), with each bad field added to <paramref name="errors"/>;
    /// null when any is bad. Shared by the one-pool and the preferred-pools calls.
    /// </summary>
    internal static AllocationRequest? ReadRequest(Dictionary<string, string[]> errors, string? idempotencyKey, AllocateBody body, string tenant, out TimeSpan maxWait)
    {
        string? sessionKey = null;
        if (idempotencyKey is not null && body.SessionKey is not null && !string.Equals(idempotencyKey, body.SessionKey, StringComparison.Ordinal))
        {
            errors["sessionKey"] = [$"The {IdempotencyKeyHeader} header and sessionKey differ; send one of them, or the same value in both."];
        }
        else if ((sessionKey = idempotencyKey ?? body.SessionKey) is null)
        {
            errors["sessionKey"] = [$"An {IdempotencyKeyHeader} header or a sessionKey is required, so that a retry cannot allocate twice."];
        }
        else
        {
            PoolEndpoints.Check(errors, "sessionKey", AllocatorValidation.CheckSessionKey(sessionKey));
        }

        var units = body.Units ?? 1;
        PoolEndpoints.Check(errors, "units", AllocatorValidation.CheckUnits(units));
        PoolEndpoints.Check(errors, "tags", AllocatorValidation.CheckTags(body.Tags, "tags"));
        var lease = body.LeaseSeconds is { } seconds ? TimeSpan.FromSeconds(seconds) : (TimeSpan?)null;
        PoolEndpoints.Check(errors, "leaseSeconds", AllocatorValidation.CheckLease(lease, "leaseSeconds"));
        if (body.MaxWaitMs is < 0 || body.MaxWaitMs > AllocatorLimits.MaxWait.TotalMilliseconds)
        {
            errors["maxWaitMs"] = [$"maxWaitMs must be between 0 and {AllocatorLimits.MaxWait.TotalMilliseconds:0}."];
        }

        maxWait = TimeSpan.FromMilliseconds(body.MaxWaitMs is >= 0 and var ms && ms <= AllocatorLimits.MaxWait.TotalMilliseconds ? ms : 0);
        return errors.Count > 0 ? null : new AllocationRequest(sessionKey!, units, body.Tags, lease) { Owner = tenant };
    }

    /// <summary>
    /// A reused idempotency key must carry the same request: the units must match and the
    /// existing allocation's worker must carry every tag asked for. The lease is not compared
    /// (renew changes it). Nothing is written either way.
    /// </summary>
    internal static async Task<string?> CheckSameRequestAsync(Allocation existing, AllocationRequest request, IWorkerStore store, CancellationToken cancellationToken)
    {
        if (existing.Units != request.Units)
        {
            return $"Idempotency key '{request.SessionKey}' already holds an allocation of {existing.Units} units; this request asks for {request.Units}. Use a new key for a different request.";
        }

        if (request.RequiredTags is { Count: > 0 } tags)
        {
            var worker = await store.GetWorkerAsync(existing.PoolId, existing.WorkerId, cancellationToken);
            if (worker is null || tags.Any(t => !worker.Tags.Contains(t, StringComparer.Ordinal)))
            {
                return $"Idempotency key '{request.SessionKey}' already holds an allocation on a worker without the tags this request asks for. Use a new key for a different request.";
            }
        }

        return null;
    }

    internal static void Tag(Activity? activity, AllocationOutcome outcome)
    {
        if (activity is null || !activity.IsAllDataRequested)
        {
            return;
        }

        if (outcome.Allocation is { } allocation)
        {
            activity.SetTag(AllocatorTelemetry.Tags.Worker, allocation.WorkerId);
        }

        activity.SetTag(AllocatorTelemetry.Tags.Rank, outcome.Decision.Rank);
        activity.SetTag(AllocatorTelemetry.Tags.ExcessScore, outcome.Decision.ExcessScore);
        activity.SetTag(AllocatorTelemetry.Tags.RowsSkipped, outcome.Decision.RowsSkipped);
        activity.SetTag(AllocatorTelemetry.Tags.BlockingFallback, outcome.Decision.BlockingFallback);
        activity.SetTag(AllocatorTelemetry.Tags.Retries, outcome.Decision.Retries);
    }

    private static bool TryParseIds(string pool, string allocationId, out Guid id, out ProblemHttpResult? problem)
    {
        var errors = new Dictionary<string, string[]>();
        PoolEndpoints.Check(errors, "pool", AllocatorValidation.CheckId(pool, "pool"));
        if (!Guid.TryParseExact(allocationId, "D", out id))
        {
            errors["allocationId"] = ["allocationId must be a GUID such as 3f2504e0-4f89-11d3-9a0c-0305e82c3301."];
        }

        problem = errors.Count > 0 ? Problems.Invalid(errors) : null;
        return problem is null;
    }

    private static async Task<Results<Ok<AllocationResponse>, ProblemHttpResult>> GetAsync(
        string pool, string allocationId, HttpContext context, IWorkerStore store, CancellationToken cancellationToken)
    {
        if (!TryParseIds(pool, allocationId, out var id, out var problem))
        {
            return problem!;
        }

        // Another tenant's allocation is answered exactly as one that does not exist (issue 22).
        var allocation = await store.GetAllocationAsync(pool, id, cancellationToken);
        return allocation is null || !context.GetCaller().MaySee(allocation) ? Problems.AllocationNotFound(pool, id) : TypedResults.Ok(allocation.ToResponse());
    }

    private static async Task<Results<NoContent, ProblemHttpResult>> ReleaseAsync(
        string pool, string allocationId, long? epoch, HttpContext context, PoolGrainCaller poolGrains, IPoolSettingsCache pools, CancellationToken cancellationToken)
    {
        if (!TryParseIds(pool, allocationId, out var id, out var problem))
        {
            return problem!;
        }

        if (epoch is not { } e || e < 1)
        {
            return Problems.Invalid("epoch", "The query parameter epoch (the allocation's current epoch, at least 1) is required.");
        }

        if (await pools.GetAsync(pool, cancellationToken) is null)
        {
            return Problems.PoolNotFound(pool); // no grain for a pool that does not exist (as allocate)
        }

        // Through the pool grain: concurrent releases share one store batch and one commit, and a
        // release wakes this instance's waiters without waiting for the store's notification.
        var result = await poolGrains.ReleaseAsync(pool, id, e, context.GetCaller().OwnerFilter, cancellationToken);
        return LeaseProblem(result, pool, id, e) ?? (Results<NoContent, ProblemHttpResult>)TypedResults.NoContent();
    }

    private static async Task<Results<Ok<AllocationResponse>, ProblemHttpResult>> RenewAsync(
        string pool, string allocationId, RenewBody body, HttpContext context, IWorkerStore store, CancellationToken cancellationToken)
    {
        if (!TryParseIds(pool, allocationId, out var id, out var problem))
        {
            return problem!;
        }

        var errors = new Dictionary<string, string[]>();
        if (body.Epoch < 1)
        {
            errors["epoch"] = ["epoch must be at least 1."];
        }

        var lease = body.LeaseSeconds is { } seconds ? TimeSpan.FromSeconds(seconds) : (TimeSpan?)null;
        PoolEndpoints.Check(errors, "leaseSeconds", AllocatorValidation.CheckLease(lease, "leaseSeconds"));
        if (errors.Count > 0)
        {
            return Problems.Invalid(errors);
        }

        var result = await store.RenewAsync(pool, id, body.Epoch, lease, context.GetCaller().OwnerFilter, cancellationToken);
        return LeaseProblem(result, pool, id, body.Epoch) ?? (Results<Ok<AllocationResponse>, ProblemHttpResult>)TypedResults.Ok(result.Allocation!.ToResponse());
    }

    private static ProblemHttpResult? LeaseProblem(LeaseResult result, string pool, Guid id, long epoch) => result.Status switch
    {
        LeaseStatus.Ok => null,
        LeaseStatus.NotFound => Problems.AllocationNotFound(pool, id),
        LeaseStatus.NotActive => Problems.ConflictWith($"Allocation '{id}' has already ended (released, expired or its worker deregistered)."),
        _ => Problems.StaleEpochFor($"allocation '{id}'", epoch),
    };
}
