using System.Collections.Frozen;
using System.Security.Cryptography;
using System.Text;
using Allocator.Host.Api;
using Allocator.Host.Options;
using Microsoft.Extensions.Options;
using Microsoft.Extensions.Primitives;

namespace Allocator.Host.Auth;

/// <summary>Who is calling: the configured key that matched.</summary>
/// <param name="Tenant">The principal its allocations belong to (<see cref="ApiKeyOptions.Tenant"/>).</param>
/// <param name="Pools">The pools a broker key may use (admin keys: every pool).</param>
internal sealed record Caller(string Name, ApiScopes Scopes, string? Pool, string? WorkerId, string Tenant, PoolGrant Pools)
{
    public bool IsAdmin => Scopes.HasFlag(ApiScopes.Admin);

    /// <summary>
    /// The owner the caller's allocations get, and the only owner whose allocations it may see;
    /// <see langword="null"/> for an admin acting on someone else's (it sees every owner's).
    /// </summary>
    public string? OwnerFilter => IsAdmin ? null : Tenant;
}

/// <summary>Endpoint metadata: the scopes that may call an endpoint (admin always may).</summary>
/// <param name="OwnWorker">When true, a caller admitted only by its worker scope must be the worker named in the route.</param>
/// <param name="BrowserLogin">
/// When true, a browser may send the key as the password of HTTP Basic authentication (any user
/// name), and a 401 asks it to: for pages a person opens (the Orleans dashboard), which cannot
/// send an <c>X-Api-Key</c> header.
/// </param>
internal sealed record ScopeRequirement(ApiScopes Scopes, bool OwnWorker, bool BrowserLogin = false);

internal static class ScopeRequirementExtensions
{
    /// <summary>The caller of an endpoint that requires scopes (set before the endpoint runs).</summary>
    public static Caller GetCaller(this HttpContext context) =>
        context.Items.TryGetValue(typeof(Caller), out var value) && value is Caller caller
            ? caller
            : throw new InvalidOperationException("No caller: the endpoint has no scope requirement.");

    /// <summary>
    /// Whether the caller may see an allocation: its own tenant's, one without an owner (made before
    /// owners existed), or any for an admin. Another tenant's is answered as one that does not exist.
    /// </summary>
    public static bool MaySee(this Caller caller, Allocation allocation) =>
        caller.OwnerFilter is not { } owner || allocation.Owner is not { } actual || string.Equals(actual, owner, StringComparison.Ordinal);

    public static RouteHandlerBuilder RequireScopes(this RouteHandlerBuilder builder, ApiScopes scopes, bool ownWorker = false) =>
        builder.WithMetadata(new ScopeRequirement(scopes, ownWorker));
}

/// <summary>The configured keys, by the hex SHA-256 of the key.</summary>
internal sealed class ApiKeyRegistry
{
    /// <summary>Environment/configuration value holding a plaintext admin key for demos (eng/run.sh).</summary>
    public const string DemoKeySetting = "ALLOCATOR_DEMO_KEY";

    private readonly FrozenDictionary<string, Caller> _byHash;

    public ApiKeyRegistry(IOptions<AllocatorAuthOptions> options, IConfiguration configuration)
    {
        var keys = new Dictionary<string, Caller>(StringComparer.Ordinal);
        var everyPool = new List<string>();
        foreach (var key in options.Value.ApiKeys)
        {
            ApiScopesParser.TryParse(key.Scopes, out var scopes);
            var hash = key.Hash.ToLowerInvariant();
            var name = key.Name ?? $"key-{hash[..8]}";
            var tenant = key.Tenant ?? (AllocatorValidation.CheckId(name, "name") is null ? name : $"key-{hash[..8]}");
            var pools = key.Pools is { } grant ? PoolGrant.Parse(grant, out _) ?? PoolGrant.All : PoolGrant.All;
            if (key.Pools is null && scopes.HasFlag(ApiScopes.Broker) && !scopes.HasFlag(ApiScopes.Admin))
            {
                everyPool.Add(name);
            }

            keys[hash] = new Caller(name, scopes, key.Pool, key.WorkerId, tenant, pools);
        }

        if (configuration[DemoKeySetting] is { Length: > 0 } demo)
        {
            keys[Hash(demo)] = new Caller("demo", ApiScopes.Admin, null, null, "demo", PoolGrant.All);
            HasDemoKey = true;
        }

        BrokerKeysWithEveryPool = everyPool;

        _byHash = keys.ToFrozenDictionary(StringComparer.Ordinal);
    }

    public bool HasDemoKey { get; }

    /// <summary>Broker keys configured without <c>Pools</c>: granted every pool (the host warns).</summary>
    public IReadOnlyList<string> BrokerKeysWithEveryPool { get; }

    public int Count => _byHash.Count;

    public Caller? Find(string key) => _byHash.GetValueOrDefault(Hash(key));

    /// <summary>Lower-case hex SHA-256 of the UTF-8 key: what goes into <c>Allocator:Auth:ApiKeys:N:Hash</c>.</summary>
    public static string Hash(string key)
    {
        Span<byte> digest = stackalloc byte[SHA256.HashSizeInBytes];
        SHA256.HashData(Encoding.UTF8.GetBytes(key), digest);
        return Convert.ToHexStringLower(digest);
    }
}

/// <summary>Why a request to a protected endpoint carries no valid key (kept in <c>HttpContext.Items</c> until it is answered 401).</summary>
internal sealed record AuthenticationFailure(string Detail);

/// <summary>
/// Authenticates <c>X-Api-Key</c> on endpoints with a <see cref="ScopeRequirement"/> and records
/// the <see cref="Caller"/> or the <see cref="AuthenticationFailure"/>; it answers nothing itself.
/// Runs after routing and before rate limiting, so that the limiter can put callers with a valid
/// key in their own buckets and every request without one in its client address's bucket (a
/// flood of bad keys is limited without touching anyone else's). <see cref="ApiKeyAuthorization"/>
/// answers 401/403 after the limiter. Endpoints without a requirement (health, OpenAPI) are open.
/// </summary>
internal sealed class ApiKeyMiddleware(RequestDelegate next, ApiKeyRegistry registry, IOptions<AllocatorAuthOptions> options)
{
    public const string HeaderName = "X-Api-Key";
    private static readonly Caller DevelopmentCaller = new("auth-disabled", ApiScopes.Admin, null, null, "auth-disabled", PoolGrant.All);

    public Task InvokeAsync(HttpContext context)
    {
        if (context.GetEndpoint()?.Metadata.GetMetadata<ScopeRequirement>() is null)
        {
            return next(context);
        }

        if (options.Value.Disabled)
        {
            context.Items[typeof(Caller)] = DevelopmentCaller;
            return next(context);
        }

        var header = context.Request.Headers[HeaderName];
        if (header.Count == 0 && context.GetEndpoint()!.Metadata.GetMetadata<ScopeRequirement>()!.BrowserLogin && BasicPassword(context.Request) is { } password)
        {
            header = password;
        }

        if (header.Count != 1 || string.IsNullOrEmpty(header[0]))
        {
            context.Items[typeof(AuthenticationFailure)] = new AuthenticationFailure(
                header.Count > 1 ? $"Send exactly one {HeaderName} header." : $"Send an API key in the {HeaderName} header.");
            return next(context);
        }

        // Keys longer than any configured one are not hashed (a cheap answer to oversized headers).
        if ((header[0]!.Length > 1024 ? null : registry.Find(header[0]!)) is { } caller)
        {
            context.Items[typeof(Caller)] = caller;
        }
        else
        {
            context.Items[typeof(AuthenticationFailure)] = new AuthenticationFailure("The API key is not valid.");
        }

        return next(context);
    }

    /// <summary>The password of an <c>Authorization: Basic</c> header, or null.</summary>
    private static string? BasicPassword(HttpRequest request)
    {
        var value = request.Headers.Authorization.ToString();
        if (!value.StartsWith("Basic ", StringComparison.OrdinalIgnoreCase) || value.Length > 2048)
        {
            return null;
        }

        Span<byte> decoded = stackalloc byte[value.Length];
        if (!Convert.TryFromBase64String(value["Basic ".Length..].Trim(), decoded, out var length))
        {
            return null;
        }

        var credentials = Encoding.UTF8.GetString(decoded[..length]);
        var colon = credentials.IndexOf(':', StringComparison.Ordinal);
        return colon < 0 ? null : credentials[(colon + 1)..];
    }

    /// <summary>
    /// The caller's rate-limiting partition: its key name, or, without a valid key, the client
    /// address (all requests without a valid key from one address share a bucket).
    /// </summary>
    public static (string Partition, bool Authenticated) PartitionOf(HttpContext context) =>
        context.Items.TryGetValue(typeof(Caller), out var value) && value is Caller caller
            ? ("key:" + caller.Name, true)
            : ("address:" + (context.Connection.RemoteIpAddress?.ToString() ?? "unknown"), false);
}

/// <summary>
/// Answers what <see cref="ApiKeyMiddleware"/> found, after rate limiting: 401 without a valid
/// key, 403 when the key's scopes do not cover the endpoint (or a worker key names another worker).
/// </summary>
internal sealed class ApiKeyAuthorization(RequestDelegate next)
{
    public Task InvokeAsync(HttpContext context)
    {
        var requirement = context.GetEndpoint()?.Metadata.GetMetadata<ScopeRequirement>();
        if (requirement is null)
        {
            return next(context);
        }

        if (!context.Items.TryGetValue(typeof(Caller), out var value) || value is not Caller caller)
        {
            var failure = context.Items.TryGetValue(typeof(AuthenticationFailure), out var f) && f is AuthenticationFailure known
                ? known.Detail
                : "The API key is not valid.";
            return Unauthorized(context, failure, requirement.BrowserLogin);
        }

        if (!IsAllowed(caller, requirement, context.Request.RouteValues))
        {
            return Problems.Make(StatusCodes.Status403Forbidden, Problems.Forbidden, "Forbidden.",
                $"The key '{caller.Name}' may not call this endpoint{(caller.Scopes == ApiScopes.Worker ? " (a worker key acts only on its own worker)" : "")}.").ExecuteAsync(context);
        }

        // A broker key acts on the pools it is granted; a pool outside the grant is refused alike
        // whether it exists or not, so the answer tells nothing about other tenants' pools.
        if (!caller.IsAdmin && (caller.Scopes & requirement.Scopes).HasFlag(ApiScopes.Broker)
            && context.Request.RouteValues["pool"] is string pool && !caller.Pools.Allows(pool))
        {
            return Problems.Make(StatusCodes.Status403Forbidden, Problems.Forbidden, "Forbidden.",
                $"The key '{caller.Name}' is not granted pool '{pool}'.").ExecuteAsync(context);
        }

        return next(context);
    }

    internal static bool IsAllowed(Caller caller, ScopeRequirement requirement, RouteValueDictionary route)
    {
        if (caller.Scopes.HasFlag(ApiScopes.Admin))
        {
            return true;
        }

        var granted = caller.Scopes & requirement.Scopes;
        if ((granted & ~ApiScopes.Worker) != 0)
        {
            return true;
        }

        if (granted != ApiScopes.Worker)
        {
            return false;
        }

        return !requirement.OwnWorker
            || (string.Equals(route["pool"] as string, caller.Pool, StringComparison.Ordinal)
                && string.Equals(route["worker"] as string, caller.WorkerId, StringComparison.Ordinal));
    }

    private static Task Unauthorized(HttpContext context, string detail, bool browserLogin)
    {
        context.Response.Headers.WWWAuthenticate = browserLogin
            ? new StringValues([$"ApiKey header=\"{ApiKeyMiddleware.HeaderName}\"", "Basic realm=\"Allocator (an admin API key as the password)\", charset=\"UTF-8\""])
            : $"ApiKey header=\"{ApiKeyMiddleware.HeaderName}\"";
        return Problems.Make(StatusCodes.Status401Unauthorized, Problems.Unauthorized, "Authentication required.", detail).ExecuteAsync(context);
    }
}
