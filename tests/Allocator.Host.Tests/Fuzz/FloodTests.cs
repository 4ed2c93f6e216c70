using System.Collections.Concurrent;
using System.Net;
using Xunit.Abstractions;

namespace Allocator.Host.Tests.Fuzz;

/// <summary>
/// Floods of good and of bad keys, concurrent, against a host with small limits: the flooding
/// caller gets 429 with Retry-After; every other caller, from the same address, stays served;
/// nothing answers 5xx.
/// </summary>
public sealed class FloodTests(ITestOutputHelper output) : IAsyncLifetime
{
    private TestHost _host = null!;

    public async Task InitializeAsync() => _host = await TestHost.StartAsync(
    [
        "--Allocator:RateLimit:PermitsPerSecond=20",
        "--Allocator:RateLimit:Burst=40",
        "--Allocator:RateLimit:UnauthenticatedPermitsPerSecond=5",
        "--Allocator:RateLimit:UnauthenticatedBurst=10",
    ]);

    public async Task DisposeAsync() => await _host.DisposeAsync();

    [Fact]
    public async Task FloodOfOneGoodKey_Is429ForIt_WhileOtherKeysAreServed()
    {
        var (flood, others) = await FloodAsync(_ => TestHost.BrokerKey, TestHost.AdminKey);

        flood[HttpStatusCode.TooManyRequests].Should().BeGreaterThanOrEqualTo(200, "400 requests in a few seconds exceed a burst of 40 at 20/s");
        others.Keys.Should().BeEquivalentTo([HttpStatusCode.NotFound], "another key keeps its own bucket while one key floods");
    }

    [Fact]
    public async Task FloodOfBadKeys_Is429_WhileGoodKeysFromTheSameAddressAreServed()
    {
        var (flood, others) = await FloodAsync(i => i % 3 == 0 ? null : $"guess-{i}", TestHost.BrokerKey);

        flood[HttpStatusCode.TooManyRequests].Should().BeGreaterThanOrEqualTo(300, "requests without a valid key share a burst of 10 at 5/s per address");
        flood.Keys.Should().BeEquivalentTo([HttpStatusCode.Unauthorized, HttpStatusCode.TooManyRequests]);
        others.Keys.Should().BeEquivalentTo([HttpStatusCode.NotFound], "a valid key is served while bad keys flood from the same address");
    }

    /// <summary>400 requests from 16 concurrent flooders, while one well-behaved caller makes 20 requests.</summary>
    private async Task<(ConcurrentDictionary<HttpStatusCode, int> Flood, ConcurrentDictionary<HttpStatusCode, int> Others)> FloodAsync(Func<int, string?> floodKey, string otherKey)
    {
        var flood = new ConcurrentDictionary<HttpStatusCode, int>();
        var others = new ConcurrentDictionary<HttpStatusCode, int>();
        var next = -1;
        var flooders = Enumerable.Range(0, 16).Select(async _ =>
        {
            int i;
            while ((i = Interlocked.Increment(ref next)) < 400)
            {
                using var request = new HttpRequestMessage(HttpMethod.Get, "v1/pools/flood-pool");
                if (floodKey(i) is { } key)
                {
                    request.Headers.Add(Client.AllocatorClient.ApiKeyHeader, key);
                }

                using var response = await Http.SendAsync(request);
                if (response.StatusCode == HttpStatusCode.TooManyRequests)
                {
                    response.Headers.RetryAfter.Should().NotBeNull();
                }

                flood.AddOrUpdate(response.StatusCode, 1, (_, n) => n + 1);
            }
        }).ToList();

        var served = Task.Run(async () =>
        {
            using var http = _host.NewHttp(otherKey);
            for (var i = 0; i < 20; i++)
            {
                using var response = await http.GetAsync("v1/pools/flood-pool");
                others.AddOrUpdate(response.StatusCode, 1, (_, n) => n + 1);
            }
        });

        await Task.WhenAll([.. flooders, served]);
        output.WriteLine($"flood: {string.Join(", ", flood.Select(p => $"{(int)p.Key} x{p.Value}"))}; other caller: {string.Join(", ", others.Select(p => $"{(int)p.Key} x{p.Value}"))}");
        flood.Keys.Concat(others.Keys).Should().OnlyContain(s => (int)s < 500, "a flood never causes a 5xx");
        return (flood, others);
    }

    private HttpClient Http => _http ??= _host.NewHttp(null);

    private HttpClient? _http;
}
