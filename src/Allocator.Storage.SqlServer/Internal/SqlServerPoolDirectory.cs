
namespace Allocator.Storage.SqlServer.Internal;

/// <summary>The pool directory of the SQL Server store (<see cref="IPoolPlacementStore"/>): read, compare and set, count.</summary>
internal sealed class SqlServerPoolDirectory(SqlServerStoreContext context)
{
    public Task<PoolPlacement?> GetPlacementAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return context.RunAsync(poolId, () => context.Commands.DirectoryGet(poolId), async (reader, ct) =>
            await reader.ReadAsync(ct) ? new PoolPlacement(poolId, reader.GetString(0), reader.IsDBNull(1) ? null : reader.GetString(1)) : null, cancellationToken);
    }

    public async Task<bool> ReplacePlacementAsync(PoolPlacement? expected, PoolPlacement replacement, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(replacement);
        AllocatorValidation.EnsurePoolId(replacement.PoolId);
        if (expected is not null && !string.Equals(expected.PoolId, replacement.PoolId, StringComparison.Ordinal))
        {
            throw new ArgumentException("The expected and the new entry must be of one pool.", nameof(expected));
        }

        var replaced = await context.RunAsync(replacement.PoolId, () => context.Commands.DirectoryReplace(expected, replacement), async (reader, ct) =>
        {
            await reader.ReadAsync(ct);
            return reader.GetBoolean(0);
        }, cancellationToken);
        if (replaced)
        {
            // This instance at once; the others when their poll sees the entry's version.
            context.Changes.Raise(new PoolChanged(replacement.PoolId, PoolChangeKind.SettingsChanged));
        }

        return replaced;
    }

    public Task<IReadOnlyDictionary<string, long>> CountPoolsAsync(string defaultDatabase, CancellationToken cancellationToken)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(defaultDatabase);
        return context.RunAsync<IReadOnlyDictionary<string, long>>(null, () => context.Commands.DirectoryCount(defaultDatabase), async (reader, ct) =>
        {
            var counts = new Dictionary<string, long>(StringComparer.Ordinal);
            while (await reader.ReadAsync(ct))
            {
                counts[reader.GetString(0)] = counts.GetValueOrDefault(reader.GetString(0)) + reader.GetInt64(1);
            }

            return counts;
        }, cancellationToken);
    }
}
