using System.Net;
using System.Text.Json;
using Allocator.Client;

namespace Allocator.Host.Tests;

[Collection(SharedHostCollection.Name)]
public sealed class AuthTests(SharedHostFixture fixture)
{
    private readonly TestHost _host = fixture.Host;

    [Fact]
    public async Task NoKey_Is401_WithWwwAuthenticate()
    {
        using var http = _host.NewHttp(null);
        using var response = await http.GetAsync("v1/pools/anything");

        response.StatusCode.Should().Be(HttpStatusCode.Unauthorized);
        response.Headers.WwwAuthenticate.Should().NotBeEmpty();
        await ExpectProblemAsync(response, ProblemTypes.Unauthorized);
    }

    [Fact]
    public async Task WrongKey_Is401()
    {
        var error = await FluentActions.Awaiting(() => _host.NewClient("not-a-key").GetPoolAsync("anything"))
            .Should().ThrowAsync<AllocatorApiException>();

        error.Which.StatusCode.Should().Be(HttpStatusCode.Unauthorized);
        error.Which.Type.Should().Be(ProblemTypes.Unauthorized);
    }

    [Fact]
    public async Task BrokerKey_CannotChangePools_Is403()
    {
        var name = Unique.Name("broker-made");
        var error = await FluentActions.Awaiting(() => _host.Broker.PutPoolAsync(name, new Client.PoolSettings()))
            .Should().ThrowAsync<AllocatorApiException>();

        error.Which.StatusCode.Should().Be(HttpStatusCode.Forbidden);
        error.Which.Type.Should().Be(ProblemTypes.Forbidden);
        (await _host.Store.GetPoolAsync(name)).Should().BeNull();
    }

    [Fact]
    public async Task WorkerKey_ActsOnlyOnItsOwnWorker()
    {
        await _host.Admin.PutPoolAsync(TestHost.WorkerKeyPool, new Client.PoolSettings());

        var own = await _host.Worker.RegisterWorkerAsync(TestHost.WorkerKeyPool, TestHost.WorkerKeyWorker, new Client.WorkerRegistration("own:1", 3));
        await _host.Worker.ReportLoadAsync(TestHost.WorkerKeyPool, TestHost.WorkerKeyWorker, own.Worker.Epoch, 100);
        await _host.Worker.DrainWorkerAsync(TestHost.WorkerKeyPool, TestHost.WorkerKeyWorker);
        await _host.Worker.UndrainWorkerAsync(TestHost.WorkerKeyPool, TestHost.WorkerKeyWorker);

        var other = await FluentActions.Awaiting(() => _host.Worker.RegisterWorkerAsync(TestHost.WorkerKeyPool, "someone-else", new Client.WorkerRegistration("x:1", 3)))
            .Should().ThrowAsync<AllocatorApiException>();
        other.Which.Type.Should().Be(ProblemTypes.Forbidden);
        var allocate = await FluentActions.Awaiting(() => _host.Worker.AllocateAsync(TestHost.WorkerKeyPool, new AllocateRequest(), "w-key"))
            .Should().ThrowAsync<AllocatorApiException>();
        allocate.Which.StatusCode.Should().Be(HttpStatusCode.Forbidden);
        (await _host.Store.GetWorkerAsync(TestHost.WorkerKeyPool, "someone-else")).Should().BeNull();
    }

    [Fact]
    public async Task OpenEndpoints_NeedNoKey()
    {
        using var http = _host.NewHttp(null);

        (await http.GetAsync("health/live")).StatusCode.Should().Be(HttpStatusCode.OK);
        (await http.GetAsync("health/ready")).StatusCode.Should().Be(HttpStatusCode.OK);
        (await _host.Anonymous.IsReadyAsync()).Should().BeTrue();
    }

    [Fact]
    public async Task OpenApiDocument_DescribesTheV1Api()
    {
        using var http = _host.NewHttp(null);
        using var response = await http.GetAsync("openapi/v1.json");

        response.StatusCode.Should().Be(HttpStatusCode.OK);
        using var document = JsonDocument.Parse(await response.Content.ReadAsStringAsync());
        var paths = document.RootElement.GetProperty("paths");
        paths.TryGetProperty("/v1/pools/{pool}/allocations", out _).Should().BeTrue();
        paths.TryGetProperty("/v1/pools/{pool}/workers/{worker}/drain", out _).Should().BeTrue();
        paths.TryGetProperty("/v1/pools/{pool}/allocations/{allocationId}/renew", out _).Should().BeTrue();
        document.RootElement.GetProperty("components").GetProperty("securitySchemes").GetProperty("ApiKey").GetProperty("name").GetString().Should().Be("X-Api-Key");
        paths.GetProperty("/v1/pools/{pool}/allocations").GetProperty("post").GetProperty("responses").TryGetProperty("429", out _).Should().BeTrue();
    }

    internal static async Task ExpectProblemAsync(HttpResponseMessage response, string type)
    {
        response.Content.Headers.ContentType?.MediaType.Should().Be("application/problem+json");
        using var problem = JsonDocument.Parse(await response.Content.ReadAsStringAsync());
        problem.RootElement.GetProperty("type").GetString().Should().Be(type);
        problem.RootElement.GetProperty("detail").GetString().Should().NotBeNullOrEmpty();
    }
}

public sealed class RateLimitTests
{
    [Fact]
    public async Task Disabled_SameLimitsThatWouldReject_NeverAnswer429()
    {
        await using var host = await TestHost.StartAsync(["--Allocator:RateLimit:PermitsPerSecond=1", "--Allocator:RateLimit:Burst=2", "--Allocator:RateLimit:Disabled=true"]);
        using var http = host.NewHttp(TestHost.BrokerKey);

        var statuses = new List<HttpStatusCode>();
        for (var i = 0; i < 6; i++)
        {
            using var response = await http.GetAsync("v1/pools/rl-off-pool");
            statuses.Add(response.StatusCode);
        }

        statuses.Should().AllBeEquivalentTo(HttpStatusCode.NotFound, "with rate limiting off the limits do not apply (they reject the 3rd request when on)");
    }

    [Fact]
    public async Task OverTheLimit_Is429_WithRetryAfter()
    {
        await using var host = await TestHost.StartAsync(["--Allocator:RateLimit:PermitsPerSecond=1", "--Allocator:RateLimit:Burst=2"]);
        using var http = host.NewHttp(TestHost.BrokerKey);

        var statuses = new List<HttpStatusCode>();
        HttpResponseMessage? limited = null;
        for (var i = 0; i < 6 && limited is null; i++)
        {
            var response = await http.GetAsync("v1/pools/rl-pool");
            statuses.Add(response.StatusCode);
            if (response.StatusCode == HttpStatusCode.TooManyRequests)
            {
                limited = response;
            }
            else
            {
                response.Dispose();
            }
        }

        limited.Should().NotBeNull($"6 quick requests exceed a burst of 2 (got {string.Join(", ", statuses)})");
        using (limited)
        {
            limited!.Headers.RetryAfter.Should().NotBeNull();
            limited.Headers.RetryAfter!.Delta.Should().BeGreaterThanOrEqualTo(TimeSpan.FromSeconds(1));
            await AuthTests.ExpectProblemAsync(limited, ProblemTypes.RateLimited);
        }

        // Another caller has its own bucket, and health checks are never limited.
        using var admin = host.NewHttp(TestHost.AdminKey);
        (await admin.GetAsync("v1/pools/rl-pool")).StatusCode.Should().Be(HttpStatusCode.NotFound);
        (await http.GetAsync("health/live")).StatusCode.Should().Be(HttpStatusCode.OK);

        // The typed client surfaces Retry-After.
        var error = await FluentActions.Awaiting(async () =>
        {
            var client = host.NewClient(TestHost.BrokerKey);
            for (var i = 0; i < 6; i++)
            {
                await client.GetAllocationAsync("rl-pool", Guid.NewGuid());
            }
        }).Should().ThrowAsync<AllocatorApiException>();
        if (error.Which.StatusCode == HttpStatusCode.TooManyRequests)
        {
            error.Which.RetryAfter.Should().NotBeNull();
        }
    }
}

/// <summary>
/// Callers without a valid key are limited per client address (issue 12 #11: the limiter ran
/// after authentication, so floods of bad keys were answered 401 forever and never limited).
/// </summary>
public sealed class UnauthenticatedRateLimitTests
{
    [Fact]
    public async Task FloodOfBadKeys_Is429_WhileAGoodKeyFromTheSameAddressIsServed()
    {
        await using var host = await TestHost.StartAsync(["--Allocator:RateLimit:UnauthenticatedPermitsPerSecond=1", "--Allocator:RateLimit:UnauthenticatedBurst=5"]);
        using var bad = host.NewHttp("not-a-key");
        using var none = host.NewHttp(null);
        using var good = host.NewHttp(TestHost.BrokerKey);

        var statuses = new List<HttpStatusCode>();
        for (var i = 0; i < 20; i++)
        {
            using var response = await (i % 2 == 0 ? bad : none).GetAsync("v1/pools/flooded");
            statuses.Add(response.StatusCode);
            if (response.StatusCode == HttpStatusCode.TooManyRequests)
            {
                response.Headers.RetryAfter.Should().NotBeNull();
                await AuthTests.ExpectProblemAsync(response, ProblemTypes.RateLimited);
            }

            // The good key shares the address (loopback) but not the bucket of failed callers.
            using var served = await good.GetAsync("v1/pools/flooded");
            served.StatusCode.Should().Be(HttpStatusCode.NotFound, "a caller with a valid key is not limited by others' bad keys");
        }

        statuses.Take(5).Should().AllBeEquivalentTo(HttpStatusCode.Unauthorized, "the first bad requests fit in the burst");
        statuses.Count(s => s == HttpStatusCode.TooManyRequests).Should().BeGreaterThanOrEqualTo(10,
            $"20 bad requests in well under 5 s exceed a burst of 5 at 1/s (got {string.Join(", ", statuses)})");
    }

    [Fact]
    public async Task ForbiddenCalls_CountAgainstTheKeysOwnBucket()
    {
        await using var host = await TestHost.StartAsync(["--Allocator:RateLimit:PermitsPerSecond=1", "--Allocator:RateLimit:Burst=3"]);
        using var broker = host.NewHttp(TestHost.BrokerKey);

        var statuses = new List<HttpStatusCode>();
        for (var i = 0; i < 8; i++)
        {
            using var response = await broker.PutAsync("v1/pools/not-mine", new StringContent("{}", System.Text.Encoding.UTF8, "application/json"));
            statuses.Add(response.StatusCode);
        }

        statuses.Should().Contain(HttpStatusCode.Forbidden).And.Contain(HttpStatusCode.TooManyRequests,
            "a key that floods endpoints it may not call is limited like any other caller");
    }
}

public sealed class StartupValidationTests
{
    [Theory]
    [InlineData("--Allocator:Timeouts:LockTimeout=00:00:06", "LockTimeout")]
    [InlineData("--Allocator:Timeouts:GrainCallTimeout=00:01:00", "GrainCallTimeout")]
    [InlineData("--Allocator:Storage:Provider=oracle", "Provider")]
    [InlineData("--Allocator:RateLimit:PermitsPerSecond=0", "PermitsPerSecond")]
    [InlineData("--Allocator:Auth:ApiKeys:9:Hash=abc", "Hash")]
    public async Task BadOptions_StopTheHostAtStartup(string setting, string mentioned)
    {
        var start = () => TestHost.StartAsync([setting]);

        var error = await start.Should().ThrowAsync<Microsoft.Extensions.Options.OptionsValidationException>();
        error.Which.Message.Should().Contain(mentioned);
    }

    [Fact]
    public async Task AuthDisabled_LetsCallersInWithoutKeys()
    {
        await using var host = await TestHost.StartAsync(["--Allocator:Auth:Disabled=true"]);

        var name = Unique.Name("open-pool");
        var pool = await host.Anonymous.PutPoolAsync(name, new Client.PoolSettings());

        pool.PoolId.Should().Be(name);
    }
}
