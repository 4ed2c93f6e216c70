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

/// <summary>
/// <c>POST /v1/allocations</c>: one allocation in the first of an ordered list of pools with room,
/// one session key across the whole list (ADR 0036). The pools' grains do the allocating; the
/// key's <see cref="IPreferredAllocationGrain"/> decides which to ask.
/// </summary>
internal static class PreferredAllocationEndpoints
{
    public static void MapPreferredAllocationEndpoints(this RouteGroupBuilder v1)
    {
        v1.MapPost("/allocations", AllocateAnyAsync).RequireScopes(ApiScopes.Broker).DisableRequestTimeout()
            .WithName("AllocateAny")
            .WithSummary("Allocate in the first of an ordered list of pools with room (201 new, 200 existing for the same idempotency key, 409 no-capacity in every pool).")
            .WithDescription("`pools` names 1 to 8 pools in order of preference, each granted to the key. The first pool with room answers (`poolId` says which); the `Idempotency-Key` stays one allocation across the whole list, so a retry finds the allocation in whichever pool it was made. With `maxWaitMs`, a request that finds every pool full waits in all of them at once and is served by the first to free a slot. A `503` means the outcome is unknown: retry with the same key and the same pools.")
            .WithProblems(StatusCodes.Status409Conflict, Problems.NoCapacity, Problems.Conflict)
            .WithProblems(StatusCodes.Status504GatewayTimeout, Problems.Timeout)
            .WithExamples("""{"pools":["zone-a","zone-b"],"units":1,"maxWaitMs":5000,"leaseSeconds":3600}""", (StatusCodes.Status201Created, Example), (StatusCodes.Status200OK, Example));
    }

    private const string Example = """{"allocationId":"0193a5c2-7d41-7c3e-9a0b-5f1e2d3c4b5a","poolId":"zone-b","workerId":"host-2","address":"10.0.0.2:3389","sessionKey":"session-1","units":1,"epoch":17,"createdAt":"2026-11-23T10:15:00+00:00","expiresAt":"2026-11-23T11:15:00+00:00","endedAt":null,"active":true}""";

    private static async Task<Results<Created<AllocationResponse>, Ok<AllocationResponse>, ProblemHttpResult>> AllocateAnyAsync(
        [FromHeader(Name = AllocationEndpoints.IdempotencyKeyHeader)] string? idempotencyKey,
        AllocateAnyBody body,
        HttpContext context,
        IGrainFactory grains,
        PoolGrainCaller poolGrains,
        IWorkerStore store,
        IPoolSettingsCache settings,
        Draining draining,
        IOptions<AllocatorTimeoutOptions> timeouts,
        ApiMetrics metrics,
        TimeProvider time,
        CancellationToken cancellationToken)
    {
        var started = time.GetTimestamp();
        var errors = new Dictionary<string, string[]>();
        PoolEndpoints.Check(errors, "pools", PreferredAllocationGrain.CheckPools(body.Pools));
        var caller = context.GetCaller();
        if (AllocationEndpoints.ReadRequest(errors, idempotencyKey, body, caller.Tenant, out var maxWait) is not { } request)
        {
            return Problems.Invalid(errors);
        }

        string[] pools = [.. body.Pools!];

        // Every pool named must be granted to the key, refused alike whether it exists or not (as
        // the one-pool call's route check does), before anything is read.
        if (!caller.IsAdmin && pools.FirstOrDefault(p => !caller.Pools.Allows(p)) is { } refused)
        {
            return Problems.Make(StatusCodes.Status403Forbidden, Problems.Forbidden, "Forbidden.", $"The key '{caller.Name}' is not granted pool '{refused}'.");
        }

        using var deadline = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken, draining.RequestsCutOff);
        deadline.CancelAfter(maxWait + timeouts.Value.GrainCallTimeout);
        var metricPool = pools[0];
        try
        {
            // Answered from the settings cache (warm for pools that exist): no grain for a name anyone may send.
            var reads = await Task.WhenAll(pools.Select(p => settings.GetAsync(p, deadline.Token).AsTask())).WaitAsync(deadline.Token);
            if (Array.IndexOf(reads, null) is var missing and >= 0)
            {
                return Problems.PoolNotFound(pools[missing]);
            }
        }
        catch (OperationCanceledException) when (!cancellationToken.IsCancellationRequested)
        {
            metrics.RecordAllocation(metricPool, AllocatorTelemetry.Outcomes.Timeout, time.GetElapsedTime(started));
            return Problems.ServiceUnavailable(
                "The pools' settings could not be read in time; nothing is held for this request. Retry with the same idempotency key.",
                outcomeUnknown: false);
        }

        using var activity = AllocatorTelemetry.ActivitySource.StartActivity("allocator.allocate");
        activity?.SetTag("allocator.pools", string.Join(',', pools));
        activity?.SetTag(AllocatorTelemetry.Tags.Units, request.Units);
        AllocationOutcome outcome;
        try
        {
            // As the one-pool call: the grain call gives up after the wait plus the grain call
            // timeout (Orleans then asks the grain to cancel, and the key's grain cancels its pool
            // calls: nothing held, or released), and the backstop is the request timeout.
            var backstop = maxWait + timeouts.Value.RequestTimeout - time.GetElapsedTime(started);
            outcome = await grains.GetGrain<IPreferredAllocationGrain>(PreferredAllocationKey.Of(request.Owner, request.SessionKey))
                .AllocateAsync(request, pools, maxWait, deadline.Token)
                .WaitAsync(backstop > TimeSpan.Zero ? backstop : TimeSpan.Zero, time, CancellationToken.None);
        }
        catch (Exception ex) when (ex is OperationCanceledException or TimeoutException && !cancellationToken.IsCancellationRequested)
        {
            var unknown = ex is TimeoutException;
            metrics.RecordAllocation(metricPool, AllocatorTelemetry.Outcomes.Timeout, time.GetElapsedTime(started));
            return Problems.ServiceUnavailable(
                unknown
                    ? "The allocation did not finish in time and its outcome is unknown; retry with the same idempotency key and pools."
                    : "The allocation did not finish in time; nothing is held for it. Retry with the same idempotency key and pools.",
                outcomeUnknown: unknown);
        }

        var answeredBy = outcome.Allocation?.PoolId ?? metricPool;
        AllocationEndpoints.Tag(activity, outcome);
        activity?.SetTag(AllocatorTelemetry.Tags.Pool, outcome.Allocation?.PoolId);
        activity?.SetTag(AllocatorTelemetry.Tags.Outcome, AllocatorTelemetry.Outcomes.Of(outcome.Status));
        metrics.RecordAllocation(answeredBy, AllocatorTelemetry.Outcomes.Of(outcome.Status), time.GetElapsedTime(started));
        switch (outcome.Status)
        {
            case AllocationStatus.Allocated:
                var created = outcome.Allocation!;
                if (cancellationToken.IsCancellationRequested)
                {
                    // The broker left before hearing of it: it goes back, as in the one-pool call.
                    activity?.SetTag(AllocatorTelemetry.Tags.Outcome, "caller_left");
                    await poolGrains.AbandonAsync(created.PoolId, request, created);
                }

                return TypedResults.Created($"/v1/pools/{created.PoolId}/allocations/{created.AllocationId}", created.ToResponse());
            case AllocationStatus.Existing:
                return await AllocationEndpoints.CheckSameRequestAsync(outcome.Allocation!, request, store, cancellationToken) is { } conflict
                    ? Problems.ConflictWith(conflict)
                    : TypedResults.Ok(outcome.Allocation!.ToResponse());
            case AllocationStatus.NoCapacity:
                return Problems.NoCapacityInAny(pools, maxWait);
            default:
                throw new AllocatorException(AllocatorErrorKind.Unavailable, outcome.OutcomeUnknown
                    ? "A store failed while deciding this allocation; it may have been made. Retry with the same idempotency key and pools."
                    : "A store could not complete this allocation; nothing was allocated for it. Retry with the same idempotency key and pools.", outcome.OutcomeUnknown, innerException: null);
        }
    }
}
