using Allocator.Host.Auth;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Options;

internal sealed class TimeoutOptionsValidator : IValidateOptions<AllocatorTimeoutOptions>
{
    public ValidateOptionsResult Validate(string? name, AllocatorTimeoutOptions options)
    {
        var failures = new List<string>();
        if (options.LockTimeout <= TimeSpan.Zero)
        {
            failures.Add("Allocator:Timeouts:LockTimeout must be positive.");
        }

        // Invariant 10: each layer must give up before the layer that called it.
        if (options.LockTimeout >= options.CommandTimeout)
        {
            failures.Add($"Allocator:Timeouts: LockTimeout ({options.LockTimeout}) must be shorter than CommandTimeout ({options.CommandTimeout}).");
        }

        if (options.CommandTimeout >= options.GrainCallTimeout)
        {
            failures.Add($"Allocator:Timeouts: CommandTimeout ({options.CommandTimeout}) must be shorter than GrainCallTimeout ({options.GrainCallTimeout}).");
        }

        if (options.GrainCallTimeout >= options.RequestTimeout)
        {
            failures.Add($"Allocator:Timeouts: GrainCallTimeout ({options.GrainCallTimeout}) must be shorter than RequestTimeout ({options.RequestTimeout}).");
        }

        if (options.RequestTimeout > TimeSpan.FromMinutes(10))
        {
            failures.Add("Allocator:Timeouts:RequestTimeout must be at most 10 minutes.");
        }

        return failures.Count == 0 ? ValidateOptionsResult.Success : ValidateOptionsResult.Fail(failures);
    }
}

internal sealed class StorageOptionsValidator(ConfiguredDatabases databases) : IValidateOptions<AllocatorStorageOptions>
{
    public ValidateOptionsResult Validate(string? name, AllocatorStorageOptions options)
    {
        var failures = new List<string>(databases.Errors);
        var provider = options.EffectiveProvider;
        if (provider == StorageProviders.Memory && databases.Several)
        {
            failures.Add($"Allocator:Storage:Provider '{provider}' keeps one database in memory; several databases ({ConfiguredDatabases.Section}) need postgres or sqlserver.");
        }

        if (provider is not (StorageProviders.Memory or StorageProviders.Postgres or StorageProviders.SqlServer))
        {
            failures.Add($"Allocator:Storage:Provider '{options.Provider}' is unknown; use memory, postgres or sqlserver.");
        }
        else if (provider != StorageProviders.Memory && string.IsNullOrWhiteSpace(options.ConnectionString))
        {
            failures.Add($"Allocator:Storage:Provider '{provider}' needs a connection string (ConnectionStrings:Allocator).");
        }

        if (options.ReapInterval < TimeSpan.FromMilliseconds(10) || options.ReapInterval > TimeSpan.FromMinutes(10))
        {
            failures.Add("Allocator:Storage:ReapInterval must be between 10 ms and 10 minutes.");
        }

        if (options.ReapBatchSize is < 1 or > 100_000)
        {
            failures.Add("Allocator:Storage:ReapBatchSize must be between 1 and 100000.");
        }

        return failures.Count == 0 ? ValidateOptionsResult.Success : ValidateOptionsResult.Fail(failures);
    }
}

internal sealed class AuthOptionsValidator : IValidateOptions<AllocatorAuthOptions>
{
    public ValidateOptionsResult Validate(string? name, AllocatorAuthOptions options)
    {
        var failures = new List<string>();
        for (var i = 0; i < options.ApiKeys.Count; i++)
        {
            var key = options.ApiKeys[i];
            var where = $"Allocator:Auth:ApiKeys:{i}";
            if (key.Hash.Length != 64 || !key.Hash.All(char.IsAsciiHexDigit))
            {
                failures.Add($"{where}:Hash must be the 64-character hex SHA-256 of the key.");
            }

            if (!ApiScopesParser.TryParse(key.Scopes, out var scopes) || scopes == ApiScopes.None)
            {
                failures.Add($"{where}:Scopes must list one or more of broker, worker, admin (was '{key.Scopes}').");
            }
            else if (scopes.HasFlag(ApiScopes.Worker) && !scopes.HasFlag(ApiScopes.Admin)
                && (AllocatorValidation.CheckId(key.Pool, "Pool") is not null || AllocatorValidation.CheckId(key.WorkerId, "WorkerId") is not null))
            {
                failures.Add($"{where}: a worker key needs a valid Pool and WorkerId (the one worker it may act on).");
            }

            if (key.Tenant is not null && AllocatorValidation.CheckId(key.Tenant, "Tenant") is { } tenantError)
            {
                failures.Add($"{where}:Tenant: {tenantError}");
            }

            if (key.Pools is not null && PoolGrant.Parse(key.Pools, out var grantError) is null)
            {
                failures.Add($"{where}:Pools {grantError}.");
            }
        }

        return failures.Count == 0 ? ValidateOptionsResult.Success : ValidateOptionsResult.Fail(failures);
    }
}

internal sealed class RateLimitOptionsValidator : IValidateOptions<AllocatorRateLimitOptions>
{
    public ValidateOptionsResult Validate(string? name, AllocatorRateLimitOptions options) =>
        options.Disabled || (options.PermitsPerSecond >= 1 && options.Burst >= 1 && options.UnauthenticatedPermitsPerSecond >= 1 && options.UnauthenticatedBurst >= 1)
            ? ValidateOptionsResult.Success
            : ValidateOptionsResult.Fail("Allocator:RateLimit: PermitsPerSecond, Burst, UnauthenticatedPermitsPerSecond and UnauthenticatedBurst must be at least 1.");
}

internal sealed class AllocatorClusterOptionsValidator : IValidateOptions<AllocatorClusterOptions>
{
    public ValidateOptionsResult Validate(string? name, AllocatorClusterOptions options)
    {
        var failures = new List<string>();
        var membership = options.Membership?.Trim().ToLowerInvariant();
        if (membership is not (ClusterMembership.Localhost or ClusterMembership.Postgres))
        {
            failures.Add($"Allocator:Cluster:Membership '{options.Membership}' is unknown; use localhost or postgres.");
        }

        if (string.IsNullOrWhiteSpace(options.ClusterId) || string.IsNullOrWhiteSpace(options.ServiceId))
        {
            failures.Add("Allocator:Cluster:ClusterId and ServiceId must not be empty.");
        }

        if (options.SiloPort is < 0 or > 65535 || (options.SiloPort == 0 && membership != ClusterMembership.Localhost))
        {
            failures.Add($"Allocator:Cluster:SiloPort must be between 1 and 65535 (0, a free port, only with localhost membership; was {options.SiloPort}).");
        }

        if (options.GatewayPort is < 0 or > 65535 || (options.GatewayPort != 0 && options.GatewayPort == options.SiloPort))
        {
            failures.Add($"Allocator:Cluster:GatewayPort must be 0 (no gateway) or a port other than the silo port (was {options.GatewayPort}).");
        }

        if (!System.Net.IPAddress.TryParse(options.AdvertisedAddress, out var advertised))
        {
            failures.Add($"Allocator:Cluster:AdvertisedAddress must be an IP address (was '{options.AdvertisedAddress}').");
        }
        else if (options.BindOutgoingToAdvertisedAddress && (advertised.Equals(System.Net.IPAddress.Any) || advertised.Equals(System.Net.IPAddress.IPv6Any)))
        {
            failures.Add("Allocator:Cluster:BindOutgoingToAdvertisedAddress needs an AdvertisedAddress of this machine, not the any-address.");
        }

        if (options.SiloListenPort is < 0 or > 65535 || (options.SiloListenPort != 0 && options.SiloListenPort == options.GatewayPort))
        {
            failures.Add($"Allocator:Cluster:SiloListenPort must be 0 (listen on SiloPort) or a port between 1 and 65535 other than the gateway port (was {options.SiloListenPort}).");
        }

        return failures.Count == 0 ? ValidateOptionsResult.Success : ValidateOptionsResult.Fail(failures);
    }
}

internal sealed class ShutdownOptionsValidator(IOptions<AllocatorTimeoutOptions> timeouts) : IValidateOptions<AllocatorShutdownOptions>
{
    public ValidateOptionsResult Validate(string? name, AllocatorShutdownOptions options)
    {
        var failures = new List<string>();
        var t = timeouts.Value;
        if (options.DrainDelay < TimeSpan.Zero || options.DrainDelay > TimeSpan.FromMinutes(5))
        {
            failures.Add($"Allocator:Shutdown:DrainDelay must be between 0 and 5 minutes (was {options.DrainDelay}).");
        }

        // Every request without a wait for capacity ends within the request timeout.
        if (options.RequestDrainTimeout < t.RequestTimeout || options.RequestDrainTimeout > TimeSpan.FromMinutes(15))
        {
            failures.Add($"Allocator:Shutdown:RequestDrainTimeout ({options.RequestDrainTimeout}) must be at least Allocator:Timeouts:RequestTimeout ({t.RequestTimeout}) and at most 15 minutes.");
        }

        // The silo waits for the batches its pool grains have in the store.
        if (options.SiloStopTimeout < t.GrainCallTimeout + TimeSpan.FromSeconds(2) || options.SiloStopTimeout > TimeSpan.FromMinutes(15))
        {
            failures.Add($"Allocator:Shutdown:SiloStopTimeout ({options.SiloStopTimeout}) must be at least Allocator:Timeouts:GrainCallTimeout ({t.GrainCallTimeout}) plus 2 s and at most 15 minutes.");
        }

        return failures.Count == 0 ? ValidateOptionsResult.Success : ValidateOptionsResult.Fail(failures);
    }
}

internal sealed class DemandOptionsValidator : IValidateOptions<AllocatorDemandOptions>
{
    public ValidateOptionsResult Validate(string? name, AllocatorDemandOptions options)
    {
        var failures = new List<string>();
        if (!(options.BufferFraction is >= 0 and <= 10))
        {
            failures.Add($"Allocator:Demand:BufferFraction must be between 0 and 10 (was {options.BufferFraction}).");
        }

        if (!(options.HeadroomSeconds is >= 0 and <= 3_600))
        {
            failures.Add($"Allocator:Demand:HeadroomSeconds must be between 0 and 3600 (was {options.HeadroomSeconds}).");
        }

        if (options.MinimumWorkers is < 0 or > 1_000_000)
        {
            failures.Add($"Allocator:Demand:MinimumWorkers must be between 0 and 1000000 (was {options.MinimumWorkers}).");
        }

        return failures.Count == 0 ? ValidateOptionsResult.Success : ValidateOptionsResult.Fail(failures);
    }
}
