using Allocator.Grains;
using Allocator.Host.Auth;
using Microsoft.AspNetCore.Http.HttpResults;

namespace Allocator.Host.Api;

internal static class WorkerEndpoints
{
    public static void MapWorkerEndpoints(this RouteGroupBuilder v1)
    {
        v1.MapPut("/pools/{pool}/workers/{worker}", RegisterAsync).RequireScopes(ApiScopes.Worker, ownWorker: true)
            .WithName("RegisterWorker")
            .WithSummary("Register or update one worker (201 created, 200 updated, 409 when the new capacity is below its load).")
            .WithProblems(StatusCodes.Status409Conflict, Problems.Conflict)
            .WithExamples("""{"address":"10.0.0.1:3389","capacity":4,"tags":["gpu"]}""",
                (StatusCodes.Status201Created, """{"workerId":"host-1","status":"created","worker":{"poolId":"demo","workerId":"host-1","address":"10.0.0.1:3389","capacity":4,"load":0,"loadIndex":null,"state":"available","tags":["gpu"],"epoch":1,"lastHeartbeat":"2026-11-23T10:15:00+00:00"}}"""));
        v1.MapPost("/pools/{pool}/workers", RegisterManyAsync).RequireScopes(ApiScopes.Admin)
            .WithName("RegisterWorkers")
            .WithSummary("Register or update many workers in one batch; each gets its own status.")
            .WithExamples("""{"workers":[{"workerId":"host-1","address":"10.0.0.1:3389","capacity":4,"tags":["gpu"]},{"workerId":"host-2","address":"10.0.0.2:3389","capacity":4}]}""", []);
        v1.MapGet("/pools/{pool}/workers", ListAsync).RequireScopes(ApiScopes.Broker)
            .WithName("ListWorkers")
            .WithSummary("All workers of a pool, ordered by id.");
        v1.MapGet("/pools/{pool}/workers/{worker}", GetAsync).RequireScopes(ApiScopes.Broker | ApiScopes.Worker, ownWorker: true)
            .WithName("GetWorker")
            .WithSummary("One worker.")
            .WithExamples(null, (StatusCodes.Status200OK, """{"poolId":"demo","workerId":"host-1","address":"10.0.0.1:3389","capacity":4,"load":0,"loadIndex":null,"state":"available","tags":["gpu"],"epoch":1,"lastHeartbeat":"2026-11-23T10:15:00+00:00"}"""));
        v1.MapDelete("/pools/{pool}/workers/{worker}", DeregisterAsync).RequireScopes(ApiScopes.Worker, ownWorker: true)
            .WithName("DeregisterWorker")
            .WithSummary("Deregister a worker; its active allocations end.");
        v1.MapPost("/pools/{pool}/workers/{worker}/drain", (string pool, string worker, IWorkerStore store, CancellationToken ct) =>
                SetStateAsync(pool, worker, WorkerState.Draining, store, ct))
            .RequireScopes(ApiScopes.Worker, ownWorker: true).WithName("DrainWorker").WithSummary("Stop giving the worker new allocations.");
        v1.MapPost("/pools/{pool}/workers/{worker}/undrain", (string pool, string worker, IWorkerStore store, CancellationToken ct) =>
                SetStateAsync(pool, worker, WorkerState.Available, store, ct))
            .RequireScopes(ApiScopes.Worker, ownWorker: true).WithName("UndrainWorker").WithSummary("Make a drained worker available again.");
        v1.MapPost("/pools/{pool}/workers/{worker}/load", ReportLoadAsync).RequireScopes(ApiScopes.Worker, ownWorker: true)
            .WithName("ReportLoad")
            .WithSummary("Heartbeat with an optional load index (0–10000), fenced by the registration epoch.")
            .WithProblems(StatusCodes.Status409Conflict, Problems.StaleEpoch)
            .WithExamples("""{"epoch":1,"loadIndex":2500}""");
    }

    private static ProblemHttpResult? CheckIds(string pool, string worker)
    {
        var errors = new Dictionary<string, string[]>();
        PoolEndpoints.Check(errors, "pool", AllocatorValidation.CheckId(pool, "pool"));
        PoolEndpoints.Check(errors, "worker", AllocatorValidation.CheckId(worker, "worker"));
        return errors.Count > 0 ? Problems.Invalid(errors) : null;
    }

    private static async Task<Results<Created<RegistrationResponse>, Ok<RegistrationResponse>, ProblemHttpResult>> RegisterAsync(
        string pool, string worker, WorkerBody body, IGrainFactory grains, CancellationToken cancellationToken)
    {
        if (CheckIds(pool, worker) is { } invalid)
        {
            return invalid;
        }

        var registration = new WorkerRegistration(worker, body.Address, body.Capacity, body.Tags);
        if (CheckRegistration(registration) is { } errors)
        {
            return Problems.Invalid(errors);
        }

        var outcome = await grains.GetRegistrationBatcher(pool).RegisterAsync(registration, cancellationToken);
        return outcome.Status switch
        {
            RegistrationStatus.Created => TypedResults.Created($"/v1/pools/{pool}/workers/{worker}", outcome.ToResponse()),
            RegistrationStatus.Updated => TypedResults.Ok(outcome.ToResponse()),
            _ => Problems.ConflictWith(
                $"Capacity {body.Capacity} is below the worker's current load {outcome.Worker.Load}; nothing changed. Drain the worker and wait for its load to fall first."),
        };
    }

    private static async Task<Results<Ok<WorkerBatchResponse>, ProblemHttpResult>> RegisterManyAsync(
        string pool, WorkerBatchBody body, IWorkerStore store, CancellationToken cancellationToken)
    {
        if (AllocatorValidation.CheckId(pool, "pool") is { } poolError)
        {
            return Problems.Invalid("pool", poolError);
        }

        if (body.Workers.Count is 0 || body.Workers.Count > AllocatorLimits.MaxRegistrationBatch)
        {
            return Problems.Invalid("workers", $"workers must hold 1–{AllocatorLimits.MaxRegistrationBatch} entries (was {body.Workers.Count}).");
        }

        var registrations = new List<WorkerRegistration>(body.Workers.Count);
        var seen = new HashSet<string>(StringComparer.Ordinal);
        for (var i = 0; i < body.Workers.Count; i++)
        {
            if (body.Workers[i] is not { } entry)
            {
                return Problems.Invalid($"workers[{i}]", $"workers[{i}] must be an object with workerId, address and capacity, not null.");
            }

            var registration = new WorkerRegistration(entry.WorkerId, entry.Address, entry.Capacity, entry.Tags);
            if (CheckRegistration(registration, $"workers[{i}].") is { } errors)
            {
                return Problems.Invalid(errors);
            }

            if (!seen.Add(entry.WorkerId))
            {
                return Problems.Invalid($"workers[{i}].workerId", $"Worker '{entry.WorkerId}' appears twice in one batch.");
            }

            registrations.Add(registration);
        }

        var outcomes = await store.RegisterWorkersAsync(pool, registrations, cancellationToken);
        return TypedResults.Ok(new WorkerBatchResponse([.. outcomes.Select(o => o.ToResponse())]));
    }

    private static Dictionary<string, string[]>? CheckRegistration(WorkerRegistration registration, string prefix = "")
    {
        var errors = new Dictionary<string, string[]>();
        PoolEndpoints.Check(errors, prefix + "workerId", AllocatorValidation.CheckId(registration.WorkerId, "workerId"));
        if (string.IsNullOrWhiteSpace(registration.Address))
        {
            errors[prefix + "address"] = ["address must not be empty."];
        }
        else
        {
            PoolEndpoints.Check(errors, prefix + "address", AllocatorValidation.CheckAddress(registration.Address));
        }

        PoolEndpoints.Check(errors, prefix + "capacity", AllocatorValidation.CheckCapacity(registration.Capacity));
        PoolEndpoints.Check(errors, prefix + "tags", AllocatorValidation.CheckTags(registration.Tags, "tags"));
        return errors.Count > 0 ? errors : null;
    }

    private static async Task<Results<Ok<WorkerResponse[]>, ProblemHttpResult>> ListAsync(
        string pool, IWorkerStore store, CancellationToken cancellationToken)
    {
        if (AllocatorValidation.CheckId(pool, "pool") is { } error)
        {
            return Problems.Invalid("pool", error);
        }

        var workers = await store.GetWorkersAsync(pool, cancellationToken);
        return TypedResults.Ok(workers.Select(w => w.ToResponse()).ToArray());
    }

    private static async Task<Results<Ok<WorkerResponse>, ProblemHttpResult>> GetAsync(
        string pool, string worker, IWorkerStore store, CancellationToken cancellationToken)
    {
        if (CheckIds(pool, worker) is { } invalid)
        {
            return invalid;
        }

        var found = await store.GetWorkerAsync(pool, worker, cancellationToken);
        if (found is null)
        {
            // Tell an unknown pool from an unknown worker.
            _ = await store.GetPoolAsync(pool, cancellationToken) ?? throw AllocatorException.PoolNotFound(pool);
            return Problems.WorkerNotFound(pool, worker);
        }

        return TypedResults.Ok(found.ToResponse());
    }

    private static async Task<Results<Ok<DeregistrationResponse>, ProblemHttpResult>> DeregisterAsync(
        string pool, string worker, IWorkerStore store, CancellationToken cancellationToken)
    {
        if (CheckIds(pool, worker) is { } invalid)
        {
            return invalid;
        }

        var result = await store.DeregisterWorkerAsync(pool, worker, cancellationToken);
        return result.Found
            ? TypedResults.Ok(new DeregistrationResponse(worker, result.AllocationsEnded))
            : Problems.WorkerNotFound(pool, worker);
    }

    private static async Task<Results<NoContent, ProblemHttpResult>> SetStateAsync(
        string pool, string worker, WorkerState state, IWorkerStore store, CancellationToken cancellationToken)
    {
        if (CheckIds(pool, worker) is { } invalid)
        {
            return invalid;
        }

        var status = await store.SetWorkerStateAsync(pool, worker, state, cancellationToken);
        return status == WorkerUpdateStatus.Ok ? TypedResults.NoContent() : Problems.WorkerNotFound(pool, worker);
    }

    private static async Task<Results<NoContent, ProblemHttpResult>> ReportLoadAsync(
        string pool, string worker, LoadReportBody body, IWorkerStore store, CancellationToken cancellationToken)
    {
        if (CheckIds(pool, worker) is { } invalid)
        {
            return invalid;
        }

        var errors = new Dictionary<string, string[]>();
        PoolEndpoints.Check(errors, "loadIndex", AllocatorValidation.CheckLoadIndex(body.LoadIndex));
        if (body.Epoch < 1)
        {
            errors["epoch"] = ["epoch must be at least 1."];
        }

        if (errors.Count > 0)
        {
            return Problems.Invalid(errors);
        }

        return await store.ReportLoadAsync(pool, worker, body.Epoch, body.LoadIndex, cancellationToken) switch
        {
            WorkerUpdateStatus.Ok => TypedResults.NoContent(),
            WorkerUpdateStatus.StaleEpoch => Problems.StaleEpochFor($"worker '{worker}'", body.Epoch),
            _ => Problems.WorkerNotFound(pool, worker),
        };
    }
}
