using Allocator.Host;
using Allocator.Host.Auth;

// `Allocator.Host --print-key-hash <key>` prints the value for Allocator:Auth:ApiKeys:N:Hash.
if (args is ["--print-key-hash", var key])
{
    Console.WriteLine(ApiKeyRegistry.Hash(key));
    return 0;
}

try
{
    var app = AllocatorApp.Build(args);
    await app.RunAsync();
    return 0;
}
catch (Exception ex) when (ex is InvalidOperationException or Microsoft.Extensions.Options.OptionsValidationException)
{
    // A configuration or start-up problem: one clear line, not a crash dump.
    Console.Error.WriteLine($"allocator: start-up failed: {ex.Message}");
    return 1;
}
catch (Orleans.Runtime.MembershipService.OrleansClusterConnectivityCheckFailedException ex)
{
    // This silo reached the membership table but not every active silo: it does not join.
    Console.Error.WriteLine($"allocator: could not join the cluster: {ex.Message}. Check that the silo ports are reachable and, with Allocator:Cluster:Tls, that the instances trust each other's certificates (docs/clustering.md).");
    return 1;
}
