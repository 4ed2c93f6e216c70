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
}
