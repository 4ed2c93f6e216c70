using System.Net;
using Allocator.Client;
using Allocator.Host.Auth;

namespace Allocator.Host.Tests;

[Collection(SharedHostCollection.Name)]
public sealed class ClientAndKeysTests(SharedHostFixture fixture)
{
    private readonly TestHost _host = fixture.Host;

    [Fact]
    public void KeyHash_IsLowerCaseHexSha256()
    {
        ApiKeyRegistry.Hash("abc").Should().Be("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    [Fact]
    public async Task Client_HonoursCancellation()
    {
        using var cancelled = new CancellationTokenSource();
        await cancelled.CancelAsync();

        await FluentActions.Awaiting(() => _host.Broker.AllocateAsync("any", new AllocateRequest(), "c1", cancelled.Token))
            .Should().ThrowAsync<OperationCanceledException>();
    }

    [Fact]
    public async Task Client_SurfacesProblemDetails_AsTypedException()
    {
        var error = await FluentActions.Awaiting(() => _host.Admin.GetWorkerAsync("no-such-pool", "w1"))
            .Should().ThrowAsync<AllocatorApiException>();

        error.Which.StatusCode.Should().Be(HttpStatusCode.NotFound);
        error.Which.Type.Should().Be(ProblemTypes.NotFound);
        error.Which.Detail.Should().Contain("no-such-pool");
    }

    [Fact]
    public async Task DemoKey_FromConfiguration_IsAnAdminKey()
    {
        await using var host = await TestHost.StartAsync(["--ALLOCATOR_DEMO_KEY=demo-key-123"]);

        var name = Unique.Name("demo");
        var pool = await host.NewClient("demo-key-123").PutPoolAsync(name, new Client.PoolSettings());

        pool.PoolId.Should().Be(name);
    }
}
