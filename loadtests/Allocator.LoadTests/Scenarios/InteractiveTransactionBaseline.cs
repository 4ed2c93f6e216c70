using Allocator.LoadTests.Audit;
using Allocator.LoadTests.Harness;
using Npgsql;
using NpgsqlTypes;

namespace Allocator.LoadTests.Scenarios;

/// <summary>
/// THE BASELINE, not Allocator: a hand-written interactive transaction in raw Npgsql, the way the
/// published "old" broker allocated. BEGIN; SELECT … FOR UPDATE of the least-loaded row; UPDATE;
/// INSERT; COMMIT: four round trips, three of them with the row lock held, so callers serialize
/// on the hottest row. The pool and schema are provisioned through the store; the allocations
/// bypass it entirely (SQL in <c>Scenarios/baseline-*.sql</c>).
/// </summary>
internal sealed class InteractiveTransactionBaseline(StoreProvider stores, PoolShape pool, int maxConnections = 100) : IScenario, IScenarioMetrics, IAuditedScenario
{
    public const string ScenarioName = "baseline: interactive transaction (FOR UPDATE)";

    private static readonly string SetupSql = PostgresInvariantAudit.Load("baseline-setup.sql");
    private static readonly string SelectSql = PostgresInvariantAudit.Load("baseline-select.sql");
    private static readonly string UpdateSql = PostgresInvariantAudit.Load("baseline-update.sql");
    private static readonly string InsertSql = PostgresInvariantAudit.Load("baseline-insert.sql");

    private readonly AllocationLedger _ledger = new();
    private StoreSession? _session;
    private NpgsqlDataSource? _dataSource;
    private string _poolId = "";
    private string _runId = "";
    private string _select = "";
    private string _update = "";
    private string _insert = "";

    public string Name => ScenarioName;

    public async Task InitAsync(ScenarioContext context)
    {
        if (stores is not PostgresStoreProvider)
        {
            throw new ScenarioNotWiredException("the interactive-transaction baseline is raw SQL: it needs PostgreSQL (--store postgres)");
        }

        _runId = context.RunId;
        _poolId = "pool-" + context.RunId;
        _session = await stores.OpenAsync(new StoreSessionOptions(context.RunId, context.Rtt, maxConnections, Jitter: context.Jitter), context.CancellationToken);
        await PoolProvisioning.ProvisionAsync(_session.Store, _poolId, pool with { Strategy = AllocationStrategy.Strict }, context.CancellationToken);

        var schema = PostgresInvariantAudit.QuoteSchema(_session.Schema!);
        _select = SelectSql.Replace("{schema}", schema, StringComparison.Ordinal);
        _update = UpdateSql.Replace("{schema}", schema, StringComparison.Ordinal);
        _insert = InsertSql.Replace("{schema}", schema, StringComparison.Ordinal);

        // Through the proxy, like the service's own connections.
        _dataSource = NpgsqlDataSource.Create(_session.ConnectionString!);
        await using var setup = _dataSource.CreateCommand(SetupSql.Replace("{schema}", schema, StringComparison.Ordinal));
        await setup.ExecuteNonQueryAsync(context.CancellationToken);
    }

    public async Task<StepResult> StepAsync(StepInfo step, CancellationToken cancellationToken)
    {
        const int Units = 1;
        await using var connection = await _dataSource!.OpenConnectionAsync(cancellationToken);
        await using var transaction = await connection.BeginTransactionAsync(cancellationToken);

        string workerId;
        await using (var select = new NpgsqlCommand(_select, connection, transaction))
        {
            select.Parameters.Add(new NpgsqlParameter("pool_id", NpgsqlDbType.Text) { Value = _poolId });
            select.Parameters.Add(new NpgsqlParameter("units", NpgsqlDbType.Integer) { Value = Units });
            if (await select.ExecuteScalarAsync(cancellationToken) is not string found)
            {
                await transaction.RollbackAsync(cancellationToken);
                return StepResult.Fail(ErrorKinds.NoCapacity);
            }

            workerId = found;
        }

        await using (var update = new NpgsqlCommand(_update, connection, transaction))
        {
            update.Parameters.Add(new NpgsqlParameter("pool_id", NpgsqlDbType.Text) { Value = _poolId });
            update.Parameters.Add(new NpgsqlParameter("worker_id", NpgsqlDbType.Text) { Value = workerId });
            update.Parameters.Add(new NpgsqlParameter("units", NpgsqlDbType.Integer) { Value = Units });
            await update.ExecuteNonQueryAsync(cancellationToken);
        }

        var allocationId = Guid.NewGuid();
        var sessionKey = $"{_runId}-{step.CallerIndex}-{step.Iteration}";
        await using (var insert = new NpgsqlCommand(_insert, connection, transaction))
        {
            insert.Parameters.Add(new NpgsqlParameter("allocation_id", NpgsqlDbType.Uuid) { Value = allocationId });
            insert.Parameters.Add(new NpgsqlParameter("pool_id", NpgsqlDbType.Text) { Value = _poolId });
            insert.Parameters.Add(new NpgsqlParameter("worker_id", NpgsqlDbType.Text) { Value = workerId });
            insert.Parameters.Add(new NpgsqlParameter("session_key", NpgsqlDbType.Text) { Value = sessionKey });
            insert.Parameters.Add(new NpgsqlParameter("units", NpgsqlDbType.Integer) { Value = Units });
            await insert.ExecuteNonQueryAsync(cancellationToken);
        }

        await transaction.CommitAsync(cancellationToken);
        if (!step.IsWarmUp)
        {
            _ledger.RecordReply(new AllocationOutcome(
                AllocationStatus.Allocated,
                new Allocation
                {
                    AllocationId = allocationId,
                    PoolId = _poolId,
                    WorkerId = workerId,
                    Address = "",
                    SessionKey = sessionKey,
                    Units = Units,
                    Epoch = 0,
                    CreatedAt = default,
                },
                default));
        }

        return StepResult.Ok();
    }

    public async Task<IReadOnlyList<ScenarioMetric>> CollectMetricsAsync(CancellationToken cancellationToken)
    {
        var statistics = await _session!.Store.GetPoolStatisticsAsync(_poolId, cancellationToken);
        return [new ScenarioMetric(MetricNames.LoadSpread, statistics.LoadSpread, "slots"), new ScenarioMetric("utilization", statistics.Utilization * 100, "%")];
    }

    public Task<AuditResult> AuditAsync(CancellationToken cancellationToken) => _session!.Audit(_poolId, _ledger, cancellationToken);

    public async Task CleanAsync()
    {
        if (_dataSource is not null)
        {
            await _dataSource.DisposeAsync();
        }

        if (_session is not null)
        {
            await _session.DisposeAsync();
        }
    }
}
