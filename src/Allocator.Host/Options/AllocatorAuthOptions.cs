namespace Allocator.Host.Options;

/// <summary>API-key authentication. Bound from <c>Allocator:Auth</c>.</summary>
public sealed class AllocatorAuthOptions
{
    public const string Section = "Allocator:Auth";

    /// <summary>
    /// Switches authentication off: every caller is an admin. For local development only; the
    /// host logs a warning at start-up. Default: false.
    /// </summary>
    public bool Disabled { get; set; }

    /// <summary>The accepted keys, stored as SHA-256 hashes. Default: none.</summary>
    public List<ApiKeyOptions> ApiKeys { get; set; } = [];
}

/// <summary>One API key: <c>Allocator:Auth:ApiKeys:N:{Name,Hash,Scopes,Pool,WorkerId}</c>.</summary>
public sealed class ApiKeyOptions
{
    /// <summary>Name of the caller, used in logs and as the rate-limiting partition. Default: the hash prefix.</summary>
    public string? Name { get; set; }

    /// <summary>Lower- or upper-case hex SHA-256 of the key (64 characters); the key itself is never stored.</summary>
    public string Hash { get; set; } = "";

    /// <summary>Comma-separated scopes: <c>broker</c>, <c>worker</c>, <c>admin</c>.</summary>
    public string Scopes { get; set; } = "";

    /// <summary>For worker keys: the pool of the one worker this key may act on.</summary>
    public string? Pool { get; set; }

    /// <summary>For worker keys: the one worker this key may act on.</summary>
    public string? WorkerId { get; set; }

    /// <summary>
    /// The principal this key acts for (a broker's tenant): allocations and their idempotency keys
    /// belong to it, and keys of another tenant never see them. Keys that share a tenant share its
    /// allocations (a rotated key keeps the same tenant). An id. Default: the key's <see cref="Name"/>
    /// when that is an id, else <c>key-</c> and the first 8 hex digits of its hash.
    /// </summary>
    public string? Tenant { get; set; }

    /// <summary>
    /// For broker keys: the pools this key may use, comma-separated names and patterns where
    /// <c>*</c> stands for any run of characters (<c>render-*, vdi-eu</c>). Default: every pool
    /// (keys configured before grants existed keep working; the host warns at start-up). Admin
    /// keys use every pool whatever this says.
    /// </summary>
    public string? Pools { get; set; }
}
