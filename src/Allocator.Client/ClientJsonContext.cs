using System.Text.Json;
using System.Text.Json.Serialization;

namespace Allocator.Client;

/// <summary>Source-generated serialization: no reflection, fewer allocations on the hot path.</summary>
[JsonSourceGenerationOptions(JsonSerializerDefaults.Web, DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
[JsonSerializable(typeof(PoolSettings))]
[JsonSerializable(typeof(PoolInfo))]
[JsonSerializable(typeof(PoolStatistics))]
[JsonSerializable(typeof(WorkerRegistration))]
[JsonSerializable(typeof(WorkerBatch))]
[JsonSerializable(typeof(WorkerBatchResult))]
[JsonSerializable(typeof(WorkerInfo))]
[JsonSerializable(typeof(WorkerInfo[]))]
[JsonSerializable(typeof(RegistrationResult))]
[JsonSerializable(typeof(DeregistrationResult))]
[JsonSerializable(typeof(LoadReport))]
[JsonSerializable(typeof(AllocateRequest))]
[JsonSerializable(typeof(AllocateAnyBody))]
[JsonSerializable(typeof(AllocationInfo))]
[JsonSerializable(typeof(RenewRequest))]
[JsonSerializable(typeof(Problem))]
internal sealed partial class ClientJsonContext : JsonSerializerContext;

internal sealed record WorkerBatch(IReadOnlyList<WorkerBatchEntry> Workers);

internal sealed record WorkerBatchResult(IReadOnlyList<RegistrationResult> Results);

internal sealed record LoadReport(long Epoch, int? LoadIndex);

internal sealed record RenewRequest(long Epoch, int? LeaseSeconds);
