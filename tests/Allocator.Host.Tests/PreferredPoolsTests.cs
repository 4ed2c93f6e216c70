using System.Net;
using System.Text;
using System.Text.Json;
using Allocator.Client;

namespace Allocator.Host.Tests;

/// <summary>
/// <c>POST /v1/allocations</c> over HTTP (ADR 0036): the first pool in order with room answers,
/// one session key across the list, a wait across every pool, and bad input answered 4xx.
/// </summary>
[Collection(SharedHostCollection.Name)]
public sealed class PreferredPoolsTests(SharedHostFixture fixture)
{
    private readonly TestHost _host = fixture.Host;

    private async Task<string> NewPoolAsync(string name, int slots, int maxWaitMs = 30_000)
    {
        var pool = name + "-" + Guid.NewGuid().ToString("N")[..12];
        await _host.Admin.PutPoolAsync(pool, new Client.PoolSettings { MaxWaitMs = maxWaitMs });
        if (slots > 0)
        {
            await _host.Admin.RegisterWorkersAsync(pool, [new WorkerBatchEntry("w1", "10.0.0.1:7000", slots)]);
        }

        return pool;
    }

    [Fact]
    public async Task AllocateAny_TheFirstPoolWithRoomAnswers_AndARetryFindsItThere()
    {
        var home = await NewPoolAsync("zone-a", slots: 1);
        var away = await NewPoolAsync("zone-b", slots: 1);
        var key = "pref-" + Guid.NewGuid().ToString("N");
        var blocker = await _host.Broker.AllocateAnyAsync([home, away], new AllocateRequest(), key + "-blocker");

        var made = await _host.Broker.AllocateAnyAsync([home, away], new AllocateRequest(), key);
        await _host.Broker.ReleaseAsync(home, blocker.Allocation!.AllocationId, blocker.Allocation.Epoch);
        var retry = await _host.Broker.AllocateAnyAsync([home, away], new AllocateRequest(), key);
        var full = await _host.Broker.AllocateAnyAsync([away], new AllocateRequest(), key + "-late");

        blocker.Allocation.PoolId.Should().Be(home);
        made.Status.Should().Be(AllocateStatus.Allocated);
        made.Allocation!.PoolId.Should().Be(away, "the first pool named was full");
        retry.Status.Should().Be(AllocateStatus.Existing, "the key stays one allocation across the list, though the first pool has room again");
        retry.Allocation!.AllocationId.Should().Be(made.Allocation.AllocationId);
        full.Status.Should().Be(AllocateStatus.NoCapacity);
        full.Detail.Should().Contain(away);
        (await _host.Broker.GetPoolAsync(home)).Load.Should().Be(0);
        (await _host.Broker.GetAllocationAsync(away, made.Allocation.AllocationId)).Active.Should().BeTrue();
    }

    [Fact]
    public async Task AllocateAny_EveryPoolFull_WaitsInAll_AndTheFirstToFreeASlotServes()
    {
        var home = await NewPoolAsync("zone-a", slots: 1);
        var away = await NewPoolAsync("zone-b", slots: 1);
        await _host.Broker.AllocateAsync(home, new AllocateRequest(), "holder-" + Guid.NewGuid().ToString("N"));
        var awayHolder = (await _host.Broker.AllocateAsync(away, new AllocateRequest(), "holder-" + Guid.NewGuid().ToString("N"))).Allocation!;

        var waiting = _host.Broker.AllocateAnyAsync([home, away], new AllocateRequest { MaxWaitMs = 20_000 }, "waiter-" + Guid.NewGuid().ToString("N"));
        await WaitUntilAsync(async () => (await _host.Broker.GetPoolAsync(home)).Waiters == 1 && (await _host.Broker.GetPoolAsync(away)).Waiters == 1);
        await _host.Broker.ReleaseAsync(away, awayHolder.AllocationId, awayHolder.Epoch);
        var served = await waiting.WaitAsync(TimeSpan.FromSeconds(15));

        served.Status.Should().Be(AllocateStatus.Allocated);
        served.Allocation!.PoolId.Should().Be(away);
        await WaitUntilAsync(async () => (await _host.Broker.GetPoolAsync(home)).Waiters == 0);
        (await _host.Broker.GetPoolAsync(home)).Load.Should().Be(1, "only its holder: the waiter was served elsewhere");
    }

    public static TheoryData<string, string> BadBodies() => new()
    {
        { """{"pools":[]}""", "pools" },
        { """{}""", "pools" },
        { """{"pools":["a","b","c","d","e","f","g","h","i"]}""", "pools" },
        { """{"pools":["zone-a","zone-a"]}""", "pools" },
        { """{"pools":["bad pool!"]}""", "pools" },
        { """{"pools":["zone-a"],"units":0}""", "units" },
        { """{"pools":["zone-a"],"maxWaitMs":-1}""", "maxWaitMs" },
    };

    [Theory]
    [MemberData(nameof(BadBodies))]
    public async Task AllocateAny_BadBody_Is400_NamingTheField(string body, string field)
    {
        var (status, problem) = await PostAsync(body, "bad-" + Guid.NewGuid().ToString("N"));

        status.Should().Be(HttpStatusCode.BadRequest, problem.GetRawText());
        problem.GetProperty("errors").TryGetProperty(field, out _).Should().BeTrue(problem.GetRawText());
    }

    [Fact]
    public async Task AllocateAny_AMissingPool_Is404_NamingIt_AndNothingIsAllocated()
    {
        var home = await NewPoolAsync("zone-a", slots: 1);
        var missing = "missing-" + Guid.NewGuid().ToString("N")[..12];

        var (status, problem) = await PostAsync($$"""{"pools":["{{home}}","{{missing}}"]}""", "miss-" + Guid.NewGuid().ToString("N"));

        status.Should().Be(HttpStatusCode.NotFound);
        problem.GetProperty("detail").GetString().Should().Contain(missing);
        (await _host.Broker.GetPoolAsync(home)).Load.Should().Be(0);
    }

    [Fact]
    public async Task AllocateAny_WithoutAKey_Is400()
    {
        var home = await NewPoolAsync("zone-a", slots: 1);

        var (status, problem) = await PostAsync($$"""{"pools":["{{home}}"]}""", idempotencyKey: null);

        status.Should().Be(HttpStatusCode.BadRequest);
        problem.GetProperty("errors").TryGetProperty("sessionKey", out _).Should().BeTrue();
    }

    private async Task<(HttpStatusCode Status, JsonElement Problem)> PostAsync(string body, string? idempotencyKey)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, "v1/allocations") { Content = new StringContent(body, Encoding.UTF8, "application/json") };
        if (idempotencyKey is not null)
        {
            request.Headers.Add(AllocatorClient.IdempotencyKeyHeader, idempotencyKey);
        }

        using var response = await _host.Http.SendAsync(request);
        var text = await response.Content.ReadAsStringAsync();
        return (response.StatusCode, JsonDocument.Parse(text).RootElement.Clone());
    }

    private static async Task WaitUntilAsync(Func<Task<bool>> condition)
    {
        var clock = System.Diagnostics.Stopwatch.StartNew();
        while (!await condition())
        {
            if (clock.Elapsed > TimeSpan.FromSeconds(20))
            {
                throw new TimeoutException("The condition did not hold within 20 s.");
            }

            await Task.Delay(50);
        }
    }
}
