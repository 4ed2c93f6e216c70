namespace Allocator.Host.Options;

/// <summary>Which store backs the service. Bound from <c>Allocator:Storage</c>.</summary>
public sealed class AllocatorStorageOptions
{
    public const string Section = "Allocator:Storage";

    /// <summary>
    /// <c>memory</c>, <c>postgres</c> or <c>sqlserver</c>. Default: empty, which means
    /// <c>postgres</c> when a connection string is configured and <c>memory</c> otherwise.
    /// </summary>
    public string? Provider { get; set; }

    /// <summary>
    /// Connection string of the database store. Default: <c>ConnectionStrings:Allocator</c>
    /// (environment <c>ConnectionStrings__Allocator</c>). Never logged.
    /// </summary>
    public string? ConnectionString { get; set; }

    /// <summary>
    /// With several databases (<c>Allocator:Databases:{name}</c>): the name of the default one,
    /// which holds the pool directory, the cluster's membership and every pool without a directory
    /// entry. Default: <c>default</c> (<c>ConnectionStrings:Allocator</c>) when that is set, else
    /// the only database. See <see cref="ConfiguredDatabases"/>.
    /// </summary>
    public string? DefaultDatabase { get; set; }

    /// <summary>How often expired leases are reaped. Default: 1 s.</summary>
    public TimeSpan ReapInterval { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>Most allocations one reap call ends. Default: 1000.</summary>
    public int ReapBatchSize { get; set; } = 1000;

    /// <summary>The provider after applying the default rule.</summary>
    internal string EffectiveProvider =>
        !string.IsNullOrWhiteSpace(Provider) ? Provider.Trim().ToLowerInvariant()
        : string.IsNullOrWhiteSpace(ConnectionString) ? StorageProviders.Memory
        : StorageProviders.Postgres;
}

internal static class StorageProviders
{
    public const string Memory = "memory";
    public const string Postgres = "postgres";
    public const string SqlServer = "sqlserver";
}
