using static Allocator.Storage.PostgreSql.Internal.PostgresParameters;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>The pool directory of the PostgreSQL store (<see cref="IPoolPlacementStore"/>): read, compare and set, count.</summary>
internal sealed class PostgresPoolDirectory(PostgresStoreContext context)
{
    public async Task<PoolPlacement?> GetPlacementAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return await context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command("directory_get", poolId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            return await reader.ReadAsync(ct) ? new PoolPlacement(poolId, reader.GetString(0), reader.IsDBNull(1) ? null : reader.GetString(1)) : null;
        }, duplicateKeyIsTransient: false, cancellationToken);
    }

    public async Task<bool> ReplacePlacementAsync(PoolPlacement? expected, PoolPlacement replacement, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(replacement);
        AllocatorValidation.EnsurePoolId(replacement.PoolId);
        if (expected is not null && !string.Equals(expected.PoolId, replacement.PoolId, StringComparison.Ordinal))
        {
            throw new ArgumentException("The expected and the new entry must be of one pool.", nameof(expected));
        }

        // A lost insert race is not transient here: the caller reads the entry that won.
        return await context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command("directory_replace", replacement.PoolId,
                Text(expected?.Database), Text(expected?.MovingTo), replacement.Database, Text(replacement.MovingTo), context.Channel);
            return Convert.ToInt32(await command.ExecuteWriteScalarAsync(ct), System.Globalization.CultureInfo.InvariantCulture) > 0;
        }, duplicateKeyIsTransient: false, cancellationToken);
    }

    public async Task<IReadOnlyDictionary<string, long>> CountPoolsAsync(string defaultDatabase, CancellationToken cancellationToken)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(defaultDatabase);
        return await context.Retry.RunAsync<IReadOnlyDictionary<string, long>>(async ct =>
        {
            await using var command = context.Command("directory_count", defaultDatabase);
            await using var reader = await command.ExecuteReaderAsync(ct);
            var counts = new Dictionary<string, long>(StringComparer.Ordinal);
            while (await reader.ReadAsync(ct))
            {
                counts[reader.GetString(0)] = counts.GetValueOrDefault(reader.GetString(0)) + reader.GetInt64(1);
            }

            return counts;
        }, duplicateKeyIsTransient: false, cancellationToken);
    }
}
