using System.Net;
using Allocator.Client;
using Allocator.Storage.InMemory;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Tests;

/// <summary>
/// <c>services.AddAllocatorClient(…)</c> as a broker uses it, against the real host on Kestrel: the
/// retry handler honours Retry-After on 429 and 503 for allocate, release and renew only, within
/// its budget. Attempts are counted by a handler added to the returned builder (it runs inside the
/// retry, once per attempt).
/// </summary>
public sealed class ClientRegistrationTests
{
    [Fact]
    public async Task Allocate_After429_WaitsForRetryAfter_AndSucceedsOnTheRetry()
    {
        await using var host = await TestHost.StartAsync(RateLimitedToOnePerSecond);
        var pool = await PoolWithOneWorkerInStoreAsync(host, "retry-429");
        var (client, attempts, services) = Build(host, TestHost.BrokerKey);
        await using var _ = services;

        var result = await WhileRateLimitedAsync(host, attempts, key => client.AllocateAsync(pool, new AllocateRequest(), key));

        // The host's Retry-After is whole seconds and the bucket refills on its own one-second
        // tick, so a retry may land just before the refill and meet one more 429.
        result.Status.Should().Be(AllocateStatus.Allocated);
        attempts.Statuses[^1].Should().Be(HttpStatusCode.Created);
        attempts.Statuses.SkipLast(1).Should().NotBeEmpty().And.OnlyContain(s => s == HttpStatusCode.TooManyRequests);
        attempts.Statuses.Count.Should().BeLessThanOrEqualTo(1 + 3, "at most MaxRetries (3) retries");
        attempts.RetryAfter[0].Should().NotBeNull("the host says when to come back");
    }

    [Fact]
    public async Task NonIdempotentCall_After429_IsNotRetried()
    {
        await using var host = await TestHost.StartAsync(RateLimitedToOnePerSecond);
        var pool = await PoolWithOneWorkerInStoreAsync(host, "no-retry-429");
        var (client, attempts, services) = Build(host, TestHost.BrokerKey);
        await using var _ = services;

        var error = await WhileRateLimitedAsync(host, attempts, async _ =>
        {
            try
            {
                await client.GetPoolAsync(pool);
                return null;
            }
            catch (AllocatorApiException e)
            {
                return e;
            }
        });

        error!.StatusCode.Should().Be(HttpStatusCode.TooManyRequests);
        error.RetryAfter.Should().NotBeNull();
        attempts.Statuses.Should().Equal(HttpStatusCode.TooManyRequests);
    }

    [Fact]
    public async Task Allocate_After503_IsRetriedWithItsKey_AndTheBudgetIsBounded()
    {
        var memory = new InMemoryWorkerStore();
        var store = new StoreFaultTests.FaultyStore(memory);
        await using var host = await TestHost.StartAsync(configure: builder => builder.Services.AddSingleton<IWorkerStore>(store).AddSingleton<IPoolChangeFeed>(memory));
        var pool = await PoolWithOneWorkerAsync(host, "retry-503");
        var (client, attempts, services) = Build(host, TestHost.BrokerKey, o => o.MaxRetries = 2);
        await using var _ = services;

        // Always unavailable: three attempts (one and two retries), then the 503 itself.
        store.FailAllocations = true;
        var error = await FluentActions.Awaiting(() => client.AllocateAsync(pool, new AllocateRequest(), "k-503")).Should().ThrowAsync<AllocatorApiException>();
        error.Which.StatusCode.Should().Be(HttpStatusCode.ServiceUnavailable);
        attempts.Statuses.Should().Equal(HttpStatusCode.ServiceUnavailable, HttpStatusCode.ServiceUnavailable, HttpStatusCode.ServiceUnavailable);
        attempts.RetryAfter.Should().AllSatisfy(r => r.Should().Be(TimeSpan.FromSeconds(1)));

        // Unavailable once: the retry, with the same idempotency key, allocates.
        attempts.Clear();
        attempts.OnResponse = status => store.FailAllocations = false;
        store.FailAllocations = true;
        var result = await client.AllocateAsync(pool, new AllocateRequest(), "k-503-once");
        result.Status.Should().Be(AllocateStatus.Allocated);
        attempts.Statuses.Should().Equal(HttpStatusCode.ServiceUnavailable, HttpStatusCode.Created);
    }

    [Fact]
    public async Task Release_WhoseFirstAttemptCommittedBeforeA503_IsReportedDone()
    {
        var memory = new InMemoryWorkerStore();
        var store = new StoreFaultTests.FaultyStore(memory);
        await using var host = await TestHost.StartAsync(configure: builder => builder.Services.AddSingleton<IWorkerStore>(store).AddSingleton<IPoolChangeFeed>(memory));
        var pool = await PoolWithOneWorkerAsync(host, "release-503");
        var (client, attempts, services) = Build(host, TestHost.BrokerKey);
        await using var _ = services;
        var allocation = (await client.AllocateAsync(pool, new AllocateRequest(), "r-1")).Allocation!;
        attempts.Clear();

        store.FailReleasesAfterCommit = true;
        await client.ReleaseAsync(pool, allocation.AllocationId, allocation.Epoch);

        attempts.Statuses.Should().Equal(HttpStatusCode.ServiceUnavailable, HttpStatusCode.Conflict);
        (await client.GetAllocationAsync(pool, allocation.AllocationId)).Active.Should().BeFalse();
        (await client.GetPoolAsync(pool)).Load.Should().Be(0, "the slot was freed exactly once");
    }

    [Fact]
    public async Task RetryAfter_AboveTheCap_IsNotWaitedFor()
    {
        await using var host = await TestHost.StartAsync(RateLimitedToOnePerSecond);
        var pool = await PoolWithOneWorkerInStoreAsync(host, "cap");
        var (client, attempts, services) = Build(host, TestHost.BrokerKey, o =>
        {
            o.MaxRetryAfter = TimeSpan.FromMilliseconds(500);
            o.DefaultRetryDelay = TimeSpan.FromMilliseconds(100);
        });
        await using var _ = services;

        var error = await WhileRateLimitedAsync(host, attempts, async key =>
        {
            try
            {
                await client.AllocateAsync(pool, new AllocateRequest(), key);
                return null;
            }
            catch (AllocatorApiException e)
            {
                return e;
            }
        });

        error!.StatusCode.Should().Be(HttpStatusCode.TooManyRequests);
        attempts.Statuses.Should().Equal(HttpStatusCode.TooManyRequests);
    }

    /// <summary>The broker of docs/client.md, against the real host.</summary>
    [Fact]
    public async Task DocsBrokerInTenLines_Runs()
    {
        await using var host = await TestHost.StartAsync();
        var pool = await PoolWithOneWorkerInStoreAsync(host, "vdi");
        var sessionId = "session-42";

        var services = new ServiceCollection();
        services.AddAllocatorClient(o =>
        {
            o.BaseAddress = host.BaseAddress;
            o.ApiKey = TestHost.BrokerKey;
        });
        await using var provider = services.BuildServiceProvider();
        var allocator = provider.GetRequiredService<AllocatorClient>();

        var placed = await allocator.AllocateAsync(pool, new AllocateRequest { MaxWaitMs = 5_000, LeaseSeconds = 3_600 }, idempotencyKey: sessionId);
        placed.Allocation.Should().NotBeNull();
        if (placed.Allocation is { } seat)
        {
            seat.Address.Should().Be("a:1");
            await allocator.ReleaseAsync(pool, seat.AllocationId, seat.Epoch);
        }

        (await allocator.GetPoolAsync(pool)).Load.Should().Be(0);
    }

    [Fact]
    public void InvalidOptions_FailWhenTheClientIsCreated_SayingWhy()
    {
        var services = new ServiceCollection();
        services.AddAllocatorClient(o => o.MaxRetries = 99);
        using var provider = services.BuildServiceProvider();

        var act = () => provider.GetRequiredService<AllocatorClient>();

        act.Should().Throw<OptionsValidationException>().WithMessage("*BaseAddress*").WithMessage("*MaxRetries*");
    }

    private static readonly string[] RateLimitedToOnePerSecond = ["--Allocator:RateLimit:PermitsPerSecond=1", "--Allocator:RateLimit:Burst=1"];

    /// <summary>Straight into the store: the admin key's one token per second is not spent on set-up.</summary>
    private static async Task<string> PoolWithOneWorkerInStoreAsync(TestHost host, string prefix)
    {
        var pool = Unique.Name(prefix);
        await host.Store.UpsertPoolAsync(pool, Allocator.PoolSettings.Default);
        await host.Store.RegisterWorkersAsync(pool, [new Allocator.WorkerRegistration("w1", "a:1", 4)]);
        return pool;
    }

    /// <summary>
    /// Spends the broker's token (one call answered 429 proves the bucket is empty), then makes
    /// the call under test. Should the bucket refill in between (its one-second tick), the call's
    /// first attempt is not a 429: then it starts over with a fresh key, up to three times.
    /// </summary>
    private static async Task<T> WhileRateLimitedAsync<T>(TestHost host, AttemptRecorder attempts, Func<string, Task<T>> call)
    {
        for (var round = 0; ; round++)
        {
            while (true)
            {
                try
                {
                    await host.Broker.GetPoolAsync("any-pool");
                }
                catch (AllocatorApiException e) when (e.StatusCode == HttpStatusCode.TooManyRequests)
                {
                    break;
                }
                catch (AllocatorApiException e) when (e.StatusCode == HttpStatusCode.NotFound)
                {
                    // The token was spent on this call; the next one finds the bucket empty.
                }
            }

            attempts.Clear();
            var result = await call($"key-{round}");
            if (attempts.Statuses.FirstOrDefault() == HttpStatusCode.TooManyRequests || round == 2)
            {
                return result;
            }
        }
    }

    private static async Task<string> PoolWithOneWorkerAsync(TestHost host, string prefix)
    {
        var pool = Unique.Name(prefix);
        await host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
        await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 4));
        return pool;
    }

    private static (AllocatorClient Client, AttemptRecorder Attempts, ServiceProvider Services) Build(TestHost host, string apiKey, Action<AllocatorClientOptions>? more = null)
    {
        var attempts = new AttemptRecorder();
        var services = new ServiceCollection();
        services.AddAllocatorClient(o =>
        {
            o.BaseAddress = host.BaseAddress;
            o.ApiKey = apiKey;
            o.Timeout = TimeSpan.FromSeconds(30);
            more?.Invoke(o);
        }).AddHttpMessageHandler(() => attempts);
        var provider = services.BuildServiceProvider();
        return (provider.GetRequiredService<AllocatorClient>(), attempts, provider);
    }

    /// <summary>Records the status and Retry-After of every attempt that reached the network.</summary>
    private sealed class AttemptRecorder : DelegatingHandler
    {
        private readonly List<(HttpStatusCode Status, TimeSpan? RetryAfter)> _seen = [];

        public Action<HttpStatusCode>? OnResponse { get; set; }

        public IReadOnlyList<HttpStatusCode> Statuses { get { lock (_seen) { return _seen.Select(s => s.Status).ToList(); } } }

        public IReadOnlyList<TimeSpan?> RetryAfter { get { lock (_seen) { return _seen.Select(s => s.RetryAfter).ToList(); } } }

        public void Clear()
        {
            lock (_seen)
            {
                _seen.Clear();
            }
        }

        protected override async Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        {
            var response = await base.SendAsync(request, cancellationToken);
            lock (_seen)
            {
                _seen.Add((response.StatusCode, response.Headers.RetryAfter?.Delta));
            }

            OnResponse?.Invoke(response.StatusCode);
            return response;
        }
    }
}
