using Npgsql;
using NpgsqlTypes;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>The parameter values the store's scripts take, shared by its operation families.</summary>
internal static class PostgresParameters
{
    /// <summary>
    /// A parameter of its own for every command: a typed one given by the caller is cloned, since
    /// a retry builds its command again from the same arguments and Npgsql refuses a parameter
    /// that already belongs to the first attempt's command.
    /// </summary>
    public static NpgsqlParameter Parameter(object? arg) => arg is NpgsqlParameter typed ? typed.Clone() : new NpgsqlParameter { Value = arg ?? DBNull.Value };

    public static NpgsqlParameter Jsonb(string json) => new() { Value = json, NpgsqlDbType = NpgsqlDbType.Jsonb };

    public static NpgsqlParameter Nullable<TValue>(TValue? value, NpgsqlDbType type)
        where TValue : struct => new() { Value = value.HasValue ? value.Value : DBNull.Value, NpgsqlDbType = type };

    public static NpgsqlParameter Text(string? value) => new() { Value = (object?)value ?? DBNull.Value, NpgsqlDbType = NpgsqlDbType.Text };

    public static long? Ms(TimeSpan? value) => value is { } v ? (long)v.TotalMilliseconds : null;

    public static string[] NormalizeTags(IReadOnlyList<string>? tags) =>
        tags is null ? [] : [.. tags.Distinct(StringComparer.Ordinal).Order(StringComparer.Ordinal)];
}
