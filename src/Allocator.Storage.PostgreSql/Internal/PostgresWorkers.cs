using System.Text.Json;
using Npgsql;
using NpgsqlTypes;
using static Allocator.Storage.PostgreSql.Internal.PostgresParameters;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// The worker operations of the PostgreSQL store: register (create or update a batch),
/// deregister, set state (drain, undrain, offline), report load, read one or all.
/// </summary>
internal sealed class PostgresWorkers(PostgresStoreContext context)
{
    public async Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureRegistrations(workers);
        var settings = await context.LoadSettingsAsync(poolId, cancellationToken) ?? throw AllocatorException.PoolNotFound(poolId);

        // Sorted input: rows are locked and inserted in (pool, worker id) order, so concurrent
        // overlapping batches wait for each other instead of deadlocking.
        var sorted = workers.OrderBy(w => w.WorkerId, StringComparer.Ordinal).ToArray();
        var ids = sorted.Select(w => w.WorkerId).ToArray();
        var addresses = sorted.Select(w => w.Address ?? string.Empty).ToArray();
        var capacities = sorted.Select(w => w.Capacity).ToArray();
        var tags = JsonSerializer.Serialize(sorted.Select(w => NormalizeTags(w.Tags)).ToArray());

        var byId = await context.Retry.RunAsync(async ct =>
        {
            await using var batch = context.DataSource.CreateBatch();
            if (settings.SerializeRegistrations)
            {
                // One batch at a time per pool, across instances: a transaction-scoped advisory
                // lock, released by the batch's implicit transaction when it commits.
                batch.BatchCommands.Add(context.BatchCommand("serialize_registrations", context.Channel, poolId));
            }

            batch.BatchCommands.Add(context.BatchCommand("register_workers", poolId, ids, addresses, capacities, Jsonb(tags)));
            // Same round trip, same implicit transaction: delivered only if the registration commits.
            batch.BatchCommands.Add(context.BatchCommand("notify_capacity_changed", context.Channel, poolId + ":c"));
            batch.Timeout = PostgresStoreContext.DriverCommandTimeout;
            await using var reader = await batch.ExecuteReaderAsync(ct);
            if (settings.SerializeRegistrations)
            {
                await reader.NextResultAsync(ct);
            }

            var result = new Dictionary<string, RegistrationOutcome>(StringComparer.Ordinal);
            while (await reader.ReadAsync(ct))
            {
                var status = reader.GetString(0) switch
                {
                    "created" => RegistrationStatus.Created,
                    "updated" => RegistrationStatus.Updated,
                    _ => RegistrationStatus.CapacityBelowLoad,
                };
                var worker = PostgresRowReaders.ReadWorker(reader, 1, poolId);
                result[worker.WorkerId] = new RegistrationOutcome(worker.WorkerId, status, worker);
            }

            await reader.EndAsync(ct);
            return result;
        }, duplicateKeyIsTransient: true, cancellationToken, poolId);

        var outcomes = new RegistrationOutcome[workers.Count];
        for (var i = 0; i < workers.Count; i++)
        {
            if (!byId.TryGetValue(workers[i].WorkerId, out var outcome))
            {
                // Lost an insert race to a row whose load now exceeds the new capacity (see register_workers.sql).
                var current = await GetWorkerAsync(poolId, workers[i].WorkerId, cancellationToken)
                    ?? throw new AllocatorException(AllocatorErrorKind.Conflict, $"Worker '{workers[i].WorkerId}' was deregistered while registering.");
                outcome = new RegistrationOutcome(current.WorkerId, RegistrationStatus.CapacityBelowLoad, current);
            }

            outcomes[i] = outcome;
        }

        return outcomes;
    }

    public async Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        var (found, ended) = await context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command("deregister_worker", poolId, workerId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            await reader.ReadAsync(ct);
            var outcome = (reader.GetInt32(0), reader.GetInt32(1));
            await reader.EndAsync(ct);
            return outcome;
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (found == 0)
        {
            await context.EnsurePoolAsync(poolId, cancellationToken);
        }

        return new DeregistrationResult(found > 0, ended);
    }

    public async Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        if (!Enum.IsDefined(state))
        {
            throw new ArgumentOutOfRangeException(nameof(state), state, "Unknown worker state.");
        }

        var found = await context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command("set_worker_state", poolId, workerId, state.ToName(), context.Channel);
            return Convert.ToInt32(await command.ExecuteWriteScalarAsync(ct), System.Globalization.CultureInfo.InvariantCulture);
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (found == 0)
        {
            await context.EnsurePoolAsync(poolId, cancellationToken);
            return WorkerUpdateStatus.NotFound;
        }

        return WorkerUpdateStatus.Ok;
    }

    public async Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        if (AllocatorValidation.CheckLoadIndex(loadIndex) is { } error)
        {
            throw new ArgumentOutOfRangeException(nameof(loadIndex), loadIndex, error);
        }

        var (current, changed) = await context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command("report_load", poolId, workerId, epoch, Nullable(loadIndex, NpgsqlDbType.Integer), context.Channel);
            await using var reader = await command.ExecuteReaderAsync(ct);
            await reader.ReadAsync(ct);
            var outcome = (reader.IsDBNull(0) ? (long?)null : reader.GetInt64(0), reader.GetInt32(1));
            await reader.EndAsync(ct);
            return outcome;
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (current is null)
        {
            await context.EnsurePoolAsync(poolId, cancellationToken);
            return WorkerUpdateStatus.NotFound;
        }

        return changed > 0 ? WorkerUpdateStatus.Ok : WorkerUpdateStatus.StaleEpoch;
    }

    public async Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        var worker = await context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command("get_worker", poolId, workerId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            return await reader.ReadAsync(ct) ? PostgresRowReaders.ReadWorker(reader, 0, poolId) : null;
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (worker is null)
        {
            await context.EnsurePoolAsync(poolId, cancellationToken);
        }

        return worker;
    }

    public async Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        var workers = await context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command("get_workers", poolId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            var list = new List<Worker>();
            while (await reader.ReadAsync(ct))
            {
                list.Add(PostgresRowReaders.ReadWorker(reader, 0, poolId));
            }

            return list;
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (workers.Count == 0)
        {
            await context.EnsurePoolAsync(poolId, cancellationToken);
        }

        return workers;
    }
}
