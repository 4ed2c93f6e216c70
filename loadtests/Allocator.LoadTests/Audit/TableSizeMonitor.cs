using System.Globalization;
using System.Reflection;
using Npgsql;

namespace Allocator.LoadTests.Audit;

/// <summary>
/// Writes, once a minute while a run lasts, the size of the run's tables and indexes, their dead
/// tuples and autovacuum counts (<c>table-sizes.sql</c>): the sustained workload's evidence that
/// the hot table stays small and vacuum keeps up. Reads over its own connection.
/// </summary>
internal sealed class TableSizeMonitor : IAsyncDisposable
{
    private readonly CancellationTokenSource _stop = new();
    private readonly Task _loop;
    private readonly List<string> _lines = [];

    private TableSizeMonitor(string connectionString, string schema, string label, TimeSpan interval, TextWriter output, TimeProvider time)
    {
        _loop = Task.Run(() => RunAsync(connectionString, schema, label, interval, output, time));
    }

    /// <summary>The reports so far, one line per table per minute.</summary>
    public IReadOnlyList<string> Lines
    {
        get
        {
            lock (_lines)
            {
                return [.. _lines];
            }
        }
    }

    public static TableSizeMonitor Start(string connectionString, string schema, string label, TextWriter output, TimeProvider time, TimeSpan? interval = null) =>
        new(connectionString, schema, label, interval ?? TimeSpan.FromMinutes(1), output, time);

    /// <summary>One report now (the end of the run), then stop.</summary>
    public async ValueTask DisposeAsync()
    {
        await _stop.CancelAsync();
        await _loop;
        _stop.Dispose();
    }

    private async Task RunAsync(string connectionString, string schema, string label, TimeSpan interval, TextWriter output, TimeProvider time)
    {
        var sql = ReadSql().Replace("{schema}", "\"" + schema + "\"", StringComparison.Ordinal).Replace("@schema", "$1", StringComparison.Ordinal);
        await using var dataSource = NpgsqlDataSource.Create(connectionString);
        var started = time.GetTimestamp();
        using var timer = new PeriodicTimer(interval, time);
        var stopping = false;
        while (!stopping)
        {
            try
            {
                stopping = !await timer.WaitForNextTickAsync(_stop.Token);
            }
            catch (OperationCanceledException)
            {
                stopping = true;
            }

            try
            {
                await using var command = dataSource.CreateCommand(sql);
                command.Parameters.Add(new NpgsqlParameter { Value = schema });
                await using var reader = await command.ExecuteReaderAsync(CancellationToken.None);
                var minute = time.GetElapsedTime(started).TotalMinutes;
                while (await reader.ReadAsync(CancellationToken.None))
                {
                    var line = string.Create(CultureInfo.InvariantCulture,
                        $"[{label}] minute {minute:0.0}: {reader.GetString(0)} heap {Mb(reader.GetInt64(1))} MB, indexes {Mb(reader.GetInt64(2))} MB, live {reader.GetInt64(3):N0}, dead {reader.GetInt64(4):N0}, autovacuum {reader.GetInt64(5)}, autoanalyze {reader.GetInt64(6)}");
                    lock (_lines)
                    {
                        _lines.Add(line);
                    }

                    await output.WriteLineAsync(line);
                }
            }
            catch (Exception ex) when (ex is NpgsqlException or InvalidOperationException)
            {
                await output.WriteLineAsync($"[{label}] table sizes not read: {ex.Message}");
            }
        }
    }

    private static string Mb(long bytes) => (bytes / 1024.0 / 1024.0).ToString("0.00", CultureInfo.InvariantCulture);

    private static string ReadSql()
    {
        using var stream = Assembly.GetExecutingAssembly().GetManifestResourceStream("Allocator.LoadTests.Sql.table-sizes.sql")
            ?? throw new InvalidOperationException("Embedded table-sizes.sql is missing.");
        using var reader = new StreamReader(stream);
        return reader.ReadToEnd();
    }
}
