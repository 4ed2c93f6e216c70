using System.Text;
using System.Text.Json;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// The worker operations of the SQL Server store: register (create or update a batch),
/// deregister, set state (drain, undrain, offline), report load, read one or all.
/// </summary>
internal sealed class SqlServerWorkers(SqlServerStoreContext context)
{
    public async Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureRegistrations(workers);
        var outcomes = new RegistrationOutcome[workers.Count];
        var anyChanged = false;

        // Chunks in worker id order, each its own short transaction: bounded locks per statement
        // (no escalation to a table lock that READPAST cannot pass) and rows always locked in
        // (pool, worker id) order, so concurrent batches queue rather than deadlock.
        foreach (var chunk in RegistrationBatches.Split(workers))
        {
            var json = RegistrationJson(chunk);
            await context.RunAsync(poolId, () => context.Commands.RegisterWorkers(poolId, json), async (reader, ct) =>
            {
                while (await reader.ReadAsync(ct))
                {
                    var index = reader.GetInt32(reader.GetOrdinal("i"));
                    var status = reader.GetInt32(reader.GetOrdinal("status")) switch
                    {
                        0 => RegistrationStatus.Created,
                        1 => RegistrationStatus.Updated,
                        _ => RegistrationStatus.CapacityBelowLoad,
                    };
                    anyChanged |= status != RegistrationStatus.CapacityBelowLoad;
                    var worker = SqlServerRowReaders.ReadWorker(reader);
                    outcomes[index] = new RegistrationOutcome(worker.WorkerId, status, worker);
                }

                return true;
            }, cancellationToken);
        }

        if (anyChanged)
        {
            context.Changes.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return outcomes;
    }

    public Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        return context.RunAsync(poolId, () => context.Commands.DeregisterWorker(poolId, workerId), async (reader, ct) =>
        {
            await reader.ReadAsync(ct);
            return new DeregistrationResult(reader.GetBoolean(0), reader.GetInt32(1));
        }, cancellationToken);
    }

    public async Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        if (!Enum.IsDefined(state))
        {
            throw new ArgumentOutOfRangeException(nameof(state), state, "Unknown worker state.");
        }

        var status = await context.RunAsync(poolId, () => context.Commands.SetWorkerState(poolId, workerId, state), SqlServerRowReaders.ReadStatusAsync, cancellationToken);
        if (status == 0 && state == WorkerState.Available)
        {
            context.Changes.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return status == 0 ? WorkerUpdateStatus.Ok : WorkerUpdateStatus.NotFound;
    }

    public async Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        if (AllocatorValidation.CheckLoadIndex(loadIndex) is { } error)
        {
            throw new ArgumentOutOfRangeException(nameof(loadIndex), loadIndex, error);
        }

        var status = await context.RunAsync(poolId, () => context.Commands.ReportLoad(poolId, workerId, epoch, loadIndex), SqlServerRowReaders.ReadStatusAsync, cancellationToken);
        if (status == 0)
        {
            context.Changes.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return status switch
        {
            0 => WorkerUpdateStatus.Ok,
            2 => WorkerUpdateStatus.StaleEpoch,
            _ => WorkerUpdateStatus.NotFound,
        };
    }

    public Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        return context.RunAsync(poolId, () => context.Commands.GetWorker(poolId, workerId), async (reader, ct) =>
            await reader.ReadAsync(ct) ? SqlServerRowReaders.ReadWorker(reader) : null, cancellationToken);
    }

    public Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return context.RunAsync<IReadOnlyList<Worker>>(poolId, () => context.Commands.GetWorkers(poolId), async (reader, ct) =>
        {
            var workers = new List<Worker>();
            while (await reader.ReadAsync(ct))
            {
                workers.Add(SqlServerRowReaders.ReadWorker(reader));
            }

            return workers;
        }, cancellationToken);
    }

    internal static string RegistrationJson(IEnumerable<(int Index, WorkerRegistration Registration)> chunk)
    {
        using var buffer = new MemoryStream();
        using (var json = new Utf8JsonWriter(buffer))
        {
            json.WriteStartArray();
            foreach (var (index, registration) in chunk)
            {
                json.WriteStartObject();
                json.WriteNumber("i", index);
                json.WriteString("w", registration.WorkerId);
                json.WriteString("a", registration.Address ?? "");
                json.WriteNumber("c", registration.Capacity);
                json.WriteStartArray("t");
                foreach (var tag in NormalizeTags(registration.Tags))
                {
                    json.WriteStringValue(tag);
                }

                json.WriteEndArray();
                json.WriteEndObject();
            }

            json.WriteEndArray();
        }

        return Encoding.UTF8.GetString(buffer.ToArray());
    }

    private static string[] NormalizeTags(IReadOnlyList<string>? tags) =>
        tags is null ? [] : [.. tags.Distinct(StringComparer.Ordinal).Order(StringComparer.Ordinal)];
}
