using System.Collections.Concurrent;
using System.Text.Json;

namespace Allocator.Reliability.History;

/// <summary>Every client operation of a scenario, in invocation order, safe to add to from any thread.</summary>
internal sealed class HistoryRecorder
{
    private static readonly JsonSerializerOptions Json = new() { DefaultIgnoreCondition = System.Text.Json.Serialization.JsonIgnoreCondition.WhenWritingNull };
    private readonly ConcurrentQueue<Operation> _operations = new();
    private long _next;

    public long NextId() => Interlocked.Increment(ref _next);

    public void Add(Operation operation) => _operations.Enqueue(operation);

    public IReadOnlyList<Operation> Operations => [.. _operations.OrderBy(o => o.Id)];

    /// <summary>One JSON object per line, for reading a failed run afterwards.</summary>
    public async Task WriteAsync(string path)
    {
        Directory.CreateDirectory(Path.GetDirectoryName(path)!);
        await using var file = File.CreateText(path);
        foreach (var operation in Operations)
        {
            await file.WriteLineAsync(JsonSerializer.Serialize(operation, Json));
        }
    }
}
