using Allocator.Host;
using Allocator.Host.Auth;

// `Allocator.Host --print-key-hash <key>` prints the value for Allocator:Auth:ApiKeys:N:Hash.
if (args is ["--print-key-hash", var key])
{
    Console.WriteLine(ApiKeyRegistry.Hash(key));
    return 0;
}

var app = AllocatorApp.Build(args);
await app.RunAsync();
return 0;
