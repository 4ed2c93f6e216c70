using System.Net;
using System.Net.Sockets;
using Allocator.Storage.InMemory;
using Allocator.LoadTests.Audit;
using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Integration;
using Allocator.LoadTests.Proxy;
using Npgsql;

namespace Allocator.LoadTests.Scenarios;

/// <summary>What a run asks of its store.</summary>
/// <param name="RunId">Makes schema and pool names unique.</param>
/// <param name="Rtt">Latency between the service and the database.</param>
/// <param name="MaxConnections">Database connection limit of the service (Npgsql <c>Maximum Pool Size</c>).</param>
/// <param name="Multiplexing">Npgsql multiplexing (many commands share few connections).</param>
/// <param name="Jitter">Jitter of the injected latency (PostgreSQL proxy only).</param>
internal sealed record StoreSessionOptions(string RunId, TimeSpan Rtt, int MaxConnections = 100, bool Multiplexing = false, TimeSpan Jitter = default);

/// <summary>Opens stores for runs: the in-memory reference store or PostgreSQL.</summary>
internal abstract class StoreProvider
{
    public abstract string Name { get; }

    public abstract Task<StoreSession> OpenAsync(StoreSessionOptions options, CancellationToken cancellationToken);
}

/// <summary>A store opened for one run, with what it takes to audit it and tear it down.</summary>
internal sealed class StoreSession : IAsyncDisposable
{
    private readonly Func<ValueTask> _dispose;

    public StoreSession(IWorkerStore store, string label, Func<string, AllocationLedger, CancellationToken, Task<AuditResult>> audit, Func<ValueTask>? dispose = null)
    {
        Store = store;
        Label = label;
        Audit = audit;
        _dispose = dispose ?? (() => ValueTask.CompletedTask);
    }

    /// <summary>The store as the service sees it: behind the injected latency when there is one.</summary>
    public IWorkerStore Store { get; }

    /// <summary>E.g. <c>postgres (proxy, RTT 90 ms)</c> or <c>memory (emulated RTT 90 ms)</c>.</summary>
    public string Label { get; }

    /// <summary>Audits one pool: (pool id, replies of the run) → result.</summary>
    public Func<string, AllocationLedger, CancellationToken, Task<AuditResult>> Audit { get; }

    /// <summary>For PostgreSQL: the connection string through the proxy (for raw-SQL scenarios such as the baseline).</summary>
    public string? ConnectionString { get; init; }

    /// <summary>For PostgreSQL: the run's schema.</summary>
    public string? Schema { get; init; }

    public LatencyProxy? Proxy { get; init; }

    public ValueTask DisposeAsync() => _dispose();
}

/// <summary>
/// The in-memory reference store. An RTT is emulated by waiting before each call
/// (<see cref="DelayedWorkerStore"/>): useful to exercise the harness, not a database figure.
/// </summary>
internal sealed class MemoryStoreProvider(TimeProvider time) : StoreProvider
{
    public override string Name => "memory";

    public override Task<StoreSession> OpenAsync(StoreSessionOptions options, CancellationToken cancellationToken)
    {
        var inner = new InMemoryWorkerStore(time);
        IWorkerStore store = options.Rtt > TimeSpan.Zero ? new DelayedWorkerStore(inner, options.Rtt, time) : inner;
        var label = options.Rtt > TimeSpan.Zero ? $"memory (emulated RTT {options.Rtt.TotalMilliseconds:0} ms)" : "memory";
        return Task.FromResult(new StoreSession(
            store,
            label,
            (poolId, ledger, ct) => StoreInvariantAudit.AuditAsync(inner, poolId, ledger, ct)));
    }
}

/// <summary>
/// PostgreSQL through <see cref="IntegrationHooks.PostgresStore"/>: a fresh schema per run, the
/// service's connections through a <see cref="LatencyProxy"/> when an RTT is injected, and the
/// SQL audit over a direct connection afterwards.
/// </summary>
/// <param name="connectionString">Direct connection to the database (the proxy is put in front of it for the service).</param>
/// <param name="factory">The store factory; null takes <see cref="IntegrationHooks.PostgresStore"/>.</param>
/// <param name="keepSchemas">Keep every run's schema, even when its audit passed.</param>
/// <param name="log">Where a kept schema is named (and a drop that failed is told); null: nowhere.</param>
/// <remarks>
/// Each run gets a schema of its own (<c>lt_&lt;run id&gt;</c>), so runs never inherit each other's
/// load or dead tuples. Once the run's invariant audit has passed the schema is dropped when the
/// session ends: a run against a lasting database used to leave its whole history behind (a
/// wide-250 run 90,000 allocations, a sustained run millions of history rows). A run whose audit
/// failed, or that ended before its audit, keeps its schema for inspection and says so.
/// </remarks>
internal sealed class PostgresStoreProvider(string connectionString, Func<PostgresStoreTarget, Task<IWorkerStore>>? factory = null, bool keepSchemas = false, TextWriter? log = null) : StoreProvider
{
    public override string Name => "postgres";

    public override async Task<StoreSession> OpenAsync(StoreSessionOptions options, CancellationToken cancellationToken)
    {
        var createStore = factory ?? IntegrationHooks.RequirePostgresStore();
        var direct = new NpgsqlConnectionStringBuilder(connectionString);
        var service = new NpgsqlConnectionStringBuilder(connectionString)
        {
            MaxPoolSize = options.MaxConnections,
            Multiplexing = options.Multiplexing,
        };

        LatencyProxy? proxy = null;
        if (options.Rtt > TimeSpan.Zero)
        {
            proxy = LatencyProxy.Start(await ResolveAsync(direct.Host ?? "127.0.0.1", direct.Port, cancellationToken), options.Rtt, options.Jitter);
            service.Host = proxy.EndPoint.Address.ToString();
            service.Port = proxy.EndPoint.Port;
        }

        var schema = "lt_" + options.RunId;
        var auditPassed = false;
        var dataSource = NpgsqlDataSource.Create(direct.ConnectionString);
        IWorkerStore store;
        try
        {
            store = await createStore(new PostgresStoreTarget(service.ConnectionString, schema, options.MaxConnections, options.Multiplexing));
        }
        catch
        {
            await dataSource.DisposeAsync();
            if (proxy is not null)
            {
                await proxy.DisposeAsync();
            }

            throw;
        }

        var label = "postgres" + (proxy is null ? "" : $" (proxy, RTT {options.Rtt.TotalMilliseconds:0} ms)")
            + (options.Multiplexing ? ", multiplexing" : "") + $", ≤ {options.MaxConnections} connections";
        return new StoreSession(
            store,
            label,
            async (poolId, ledger, ct) =>
            {
                var audit = await PostgresInvariantAudit.AuditAsync(dataSource, schema, poolId, ledger.AllocationIds, ct);
                auditPassed = audit.Passed;
                return audit;
            },
            async () =>
            {
                switch (store)
                {
                    case IAsyncDisposable asyncDisposable:
                        await asyncDisposable.DisposeAsync();
                        break;
                    case IDisposable disposable:
                        disposable.Dispose();
                        break;
                }

                await EndSchemaAsync(dataSource, schema, auditPassed);
                await dataSource.DisposeAsync();
                if (proxy is not null)
                {
                    await proxy.DisposeAsync();
                }
            })
        {
            ConnectionString = service.ConnectionString,
            Schema = schema,
            Proxy = proxy,
        };
    }

    /// <summary>The schema of the Orleans membership of a run's host processes (the cluster workload).</summary>
    public static string MembershipSchemaOf(string schema) => schema + "_cluster";

    /// <summary>Drops a schema and everything in it, and the run's membership schema if there is one.</summary>
    /// <returns>Null when dropped, else why not.</returns>
    public static async Task<string?> DropSchemaAsync(NpgsqlDataSource dataSource, string schema)
    {
        try
        {
            await using var command = dataSource.CreateCommand(
                $"DROP SCHEMA IF EXISTS {PostgresInvariantAudit.QuoteSchema(schema)}, {PostgresInvariantAudit.QuoteSchema(MembershipSchemaOf(schema))} CASCADE");
            await command.ExecuteNonQueryAsync();
            return null;
        }
        catch (NpgsqlException e)
        {
            return e.Message;
        }
    }

    private async Task EndSchemaAsync(NpgsqlDataSource dataSource, string schema, bool auditPassed)
    {
        if (keepSchemas || !auditPassed)
        {
            log?.WriteLine($"schema {schema} kept ({(auditPassed ? "--keep-schemas" : "its audit did not pass or did not run")}): DROP SCHEMA {schema} CASCADE removes it");
            return;
        }

        // The figures and the audit stand even when only the tidying fails.
        if (await DropSchemaAsync(dataSource, schema) is { } failure)
        {
            log?.WriteLine($"schema {schema} could not be dropped ({failure}): DROP SCHEMA {schema} CASCADE removes it");
        }
    }

    private static async Task<IPEndPoint> ResolveAsync(string host, int port, CancellationToken cancellationToken)
    {
        if (IPAddress.TryParse(host, out var address))
        {
            return new IPEndPoint(address, port);
        }

        var addresses = await Dns.GetHostAddressesAsync(host, cancellationToken);
        var chosen = addresses.FirstOrDefault(a => a.AddressFamily == AddressFamily.InterNetwork) ?? addresses.First();
        return new IPEndPoint(chosen, port);
    }
}
