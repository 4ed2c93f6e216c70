using Npgsql;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// A statement that writes is read to its end, its commit included, before its rows are trusted.
/// </summary>
/// <remarks>
/// In autocommit the server sends a statement's rows and then commits, and a cancellation that
/// reaches it in between (the command timeout, off <see cref="StatementDeadline"/>, or the
/// caller's) rolls it back after every row was sent. Npgsql reports that only to a reader that
/// asks for the next result: a reader read to its last row and disposed, and
/// <see cref="NpgsqlCommand.ExecuteScalarAsync(CancellationToken)"/>, say nothing, and the rows
/// read as done what was never written (seen: a release answered 204 whose allocation stayed
/// active, in a rolling restart on a machine that stalled for three seconds; shown in
/// <c>CommitCancelledTests</c>). <see cref="NpgsqlCommand.ExecuteNonQueryAsync(CancellationToken)"/> reads to the end itself.
/// </remarks>
internal static class StatementEnd
{
    /// <summary>Reads past the last result to the end of the statement; a failure there (its commit's) is thrown.</summary>
    public static async Task EndAsync(this NpgsqlDataReader reader, CancellationToken cancellationToken)
    {
        while (await reader.NextResultAsync(cancellationToken))
        {
        }
    }

    /// <summary>The first column of the first row (<see langword="null"/>: no row), once the statement has ended.</summary>
    public static async Task<object?> ExecuteWriteScalarAsync(this NpgsqlCommand command, CancellationToken cancellationToken)
    {
        await using var reader = await command.ExecuteReaderAsync(cancellationToken);
        var value = await reader.ReadAsync(cancellationToken) ? reader.GetValue(0) : null;
        await reader.EndAsync(cancellationToken);
        return value;
    }
}
