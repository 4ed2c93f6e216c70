namespace Allocator.Host.Auth;

/// <summary>What an API key may do.</summary>
[Flags]
internal enum ApiScopes
{
    None = 0,

    /// <summary>Session brokers: allocate, release, renew, read allocations and pool statistics.</summary>
    Broker = 1,

    /// <summary>Workers: register, report load, drain, undrain and deregister their own record only.</summary>
    Worker = 2,

    /// <summary>Everything, on every pool and worker.</summary>
    Admin = 4,
}

internal static class ApiScopesParser
{
    public static bool TryParse(string? text, out ApiScopes scopes)
    {
        scopes = ApiScopes.None;
        if (string.IsNullOrWhiteSpace(text))
        {
            return false;
        }

        foreach (var part in text.Split([',', ' ', ';'], StringSplitOptions.RemoveEmptyEntries))
        {
            switch (part.ToLowerInvariant())
            {
                case "broker":
                    scopes |= ApiScopes.Broker;
                    break;
                case "worker":
                    scopes |= ApiScopes.Worker;
                    break;
                case "admin":
                    scopes |= ApiScopes.Admin;
                    break;
                default:
                    return false;
            }
        }

        return true;
    }
}
