namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// Splits a registration call into statements of bounded size, in (pool, worker id) order.
/// </summary>
/// <remarks>
/// SQL Server escalates a statement's row locks to one table lock once it holds about 5,000
/// locks on one table. A table lock is not passed over by READPAST, so allocation would stall
/// behind a large registration. A registered row costs a key lock in the clustered index and
/// the old and new keys of the eligible index (fewer than four), so 1,000 rows stay well under
/// the threshold. Each statement is its own transaction: locks are held for one chunk only.
/// </remarks>
internal static class RegistrationBatches
{
    public const int MaxRowsPerStatement = 1_000;

    /// <summary>The registrations sorted by worker id (ordinal), cut into chunks of at most <paramref name="maxRows"/>.</summary>
    public static IReadOnlyList<IReadOnlyList<(int Index, WorkerRegistration Registration)>> Split(
        IReadOnlyList<WorkerRegistration> registrations, int maxRows = MaxRowsPerStatement)
    {
        ArgumentNullException.ThrowIfNull(registrations);
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(maxRows);
        var sorted = registrations
            .Select((registration, index) => (Index: index, Registration: registration))
            .OrderBy(x => x.Registration.WorkerId, StringComparer.Ordinal)
            .ToArray();
        var chunks = new List<IReadOnlyList<(int, WorkerRegistration)>>((sorted.Length + maxRows - 1) / maxRows);
        for (var start = 0; start < sorted.Length; start += maxRows)
        {
            chunks.Add(sorted[start..Math.Min(start + maxRows, sorted.Length)]);
        }

        return chunks;
    }
}
