using System.Net;
using System.Net.Http.Json;
using Allocator.Client;
using Allocator.Host.Auth;

namespace Allocator.Host.Tests;

/// <summary>
/// Issue 22: brokers kept apart (invariant 12). An allocation and its idempotency key belong to
/// the tenant of the key that made it; another tenant's broker key is answered exactly as if it
/// did not exist, and a broker key acts only on the pools it is granted.
/// </summary>
public sealed class TenancyTests : IAsyncLifetime
{
    private const string KeyA = "broker-a-secret";
    private const string KeyA2 = "broker-a-rotated-secret";
    private const string KeyB = "broker-b-secret";
    private const string KeyNarrow = "broker-narrow-secret";

    private TestHost _host = null!;
    private AllocatorClient _a = null!;
    private AllocatorClient _a2 = null!;
    private AllocatorClient _b = null!;

    public async Task InitializeAsync()
    {
        _host = await TestHost.StartAsync(
        [
            $"--ConnectionStrings:Allocator={TestPostgres.ConnectionString}",
            "--Allocator:Auth:ApiKeys:3:Name=broker-a", $"--Allocator:Auth:ApiKeys:3:Hash={ApiKeyRegistry.Hash(KeyA)}", "--Allocator:Auth:ApiKeys:3:Scopes=broker", "--Allocator:Auth:ApiKeys:3:Tenant=farm-a",
            "--Allocator:Auth:ApiKeys:4:Name=broker-a-rotated", $"--Allocator:Auth:ApiKeys:4:Hash={ApiKeyRegistry.Hash(KeyA2)}", "--Allocator:Auth:ApiKeys:4:Scopes=broker", "--Allocator:Auth:ApiKeys:4:Tenant=farm-a",
            "--Allocator:Auth:ApiKeys:5:Name=broker-b", $"--Allocator:Auth:ApiKeys:5:Hash={ApiKeyRegistry.Hash(KeyB)}", "--Allocator:Auth:ApiKeys:5:Scopes=broker", "--Allocator:Auth:ApiKeys:5:Tenant=farm-b",
            "--Allocator:Auth:ApiKeys:6:Name=broker-narrow", $"--Allocator:Auth:ApiKeys:6:Hash={ApiKeyRegistry.Hash(KeyNarrow)}", "--Allocator:Auth:ApiKeys:6:Scopes=broker", "--Allocator:Auth:ApiKeys:6:Pools=granted-*, exact-pool",
        ]);
        _a = _host.NewClient(KeyA);
        _a2 = _host.NewClient(KeyA2);
        _b = _host.NewClient(KeyB);
    }

    public async Task DisposeAsync() => await _host.DisposeAsync();

    [Fact]
    public async Task AnotherTenantsSessionKey_IsANewKey_NeverTheOtherTenantsAllocation()
    {
        var pool = await NewPoolAsync("tenancy-key");
        var mine = (await _a.AllocateAsync(pool, new AllocateRequest(), "session-1")).Allocation!;

        var theirs = await _b.AllocateAsync(pool, new AllocateRequest(), "session-1");

        theirs.Status.Should().Be(AllocateStatus.Allocated, "the key is broker B's own: nothing of broker A's is answered");
        theirs.Allocation!.AllocationId.Should().NotBe(mine.AllocationId);
        (await _a2.AllocateAsync(pool, new AllocateRequest(), "session-1")).Allocation!.AllocationId.Should().Be(mine.AllocationId, "a rotated key of the same tenant is the same principal");
    }

    [Fact]
    public async Task AnotherTenantsAllocation_ReadRenewedOrReleased_IsNotFound_WithNothingThatTellsItApart()
    {
        var pool = await NewPoolAsync("tenancy-id");
        var mine = (await _a.AllocateAsync(pool, new AllocateRequest { LeaseSeconds = 300 }, "session-2")).Allocation!;
        var missing = Guid.CreateVersion7();

        var theirs = await ThreeCallsAsync(KeyB, pool, mine.AllocationId, mine.Epoch);
        var none = await ThreeCallsAsync(KeyB, pool, missing, mine.Epoch);

        for (var i = 0; i < 3; i++)
        {
            theirs[i].Status.Should().Be(HttpStatusCode.NotFound);
            Normalized(theirs[i].Body, mine.AllocationId)
                .Should().Be(Normalized(none[i].Body, missing), "another tenant's allocation is answered exactly as a missing one");
            theirs[i].Body.Should().NotContain("session-2").And.NotContain(mine.WorkerId).And.NotContain("epoch\":");
        }

        var still = await _a.GetAllocationAsync(pool, mine.AllocationId);
        still.Active.Should().BeTrue("nothing broker B did touched it");
        still.Epoch.Should().Be(mine.Epoch);
    }

    [Fact]
    public async Task ReusedKeyWithAnotherRequest_ConflictDetail_NamesNoAllocation()
    {
        var pool = await NewPoolAsync("tenancy-conflict");
        var mine = (await _a.AllocateAsync(pool, new AllocateRequest(), "session-3")).Allocation!;

        var (status, body) = await Raw(KeyA, HttpMethod.Post, $"v1/pools/{pool}/allocations", new { units = 2 }, "session-3");

        status.Should().Be(HttpStatusCode.Conflict);
        body.Should().NotContain(mine.AllocationId.ToString(), "a 409 must not hand out an allocation id");
    }

    [Fact]
    public async Task BrokerKey_ActsOnlyOnItsGrantedPools()
    {
        var granted = await NewPoolAsync("granted-pool");
        var exact = "exact-pool";
        await _host.Admin.PutPoolAsync(exact, new Client.PoolSettings());
        var other = await NewPoolAsync("other-pool");
        var narrow = _host.NewClient(KeyNarrow);

        (await narrow.AllocateAsync(granted, new AllocateRequest(), "n1")).Status.Should().Be(AllocateStatus.Allocated);
        (await narrow.GetPoolAsync(exact)).PoolId.Should().Be(exact);
        var refused = await FluentActions.Awaiting(() => narrow.AllocateAsync(other, new AllocateRequest(), "n2")).Should().ThrowAsync<AllocatorApiException>();
        refused.Which.StatusCode.Should().Be(HttpStatusCode.Forbidden);
        (await Raw(KeyNarrow, HttpMethod.Get, $"v1/pools/{other}")).Status.Should().Be(HttpStatusCode.Forbidden);
        (await Raw(KeyNarrow, HttpMethod.Get, "v1/pools/no-such-pool-anywhere")).Status.Should().Be(HttpStatusCode.Forbidden, "a pool outside the grant is refused alike whether it exists or not");
    }

    [Fact]
    public async Task AllocateAny_APoolOutsideTheGrant_Is403NamingIt_AndNothingIsAllocated()
    {
        var granted = await NewPoolAsync("granted-pref");
        var other = await NewPoolAsync("other-pref");
        var narrow = _host.NewClient(KeyNarrow);

        var ok = await narrow.AllocateAnyAsync([granted], new AllocateRequest(), "np1");
        var refused = await FluentActions.Awaiting(() => narrow.AllocateAnyAsync([granted, other], new AllocateRequest(), "np2")).Should().ThrowAsync<AllocatorApiException>();

        ok.Allocation!.PoolId.Should().Be(granted);
        refused.Which.StatusCode.Should().Be(HttpStatusCode.Forbidden);
        refused.Which.Detail.Should().Contain(other, "the answer names the pool the key is not granted");
        (await _host.Admin.GetPoolAsync(granted)).ActiveAllocations.Should().Be(1, "the refused call allocated nothing, not even in the pool it is granted");
    }

    [Fact]
    public async Task AllocateAny_AnotherTenantsSessionKey_IsANewKey()
    {
        var pool = await NewPoolAsync("tenancy-pref");
        var other = await NewPoolAsync("tenancy-pref2");
        var mine = (await _a.AllocateAnyAsync([pool, other], new AllocateRequest(), "session-p")).Allocation!;

        var theirs = await _b.AllocateAnyAsync([pool, other], new AllocateRequest(), "session-p");
        var again = await _a2.AllocateAnyAsync([pool, other], new AllocateRequest(), "session-p");

        theirs.Status.Should().Be(AllocateStatus.Allocated, "the key is broker B's own");
        theirs.Allocation!.AllocationId.Should().NotBe(mine.AllocationId);
        again.Status.Should().Be(AllocateStatus.Existing, "a rotated key of the same tenant is the same principal");
        again.Allocation!.AllocationId.Should().Be(mine.AllocationId);
    }

    /// <summary>A problem body with the id it was asked about and its trace id taken out.</summary>
    private static string Normalized(string body, Guid id) =>
        System.Text.RegularExpressions.Regex.Replace(body.Replace(id.ToString(), "{id}", StringComparison.Ordinal), "\"traceId\":\"[^\"]*\"", "\"traceId\":\"-\"");

    /// <summary>GET, renew and release of one allocation id, as broker <paramref name="key"/>.</summary>
    private async Task<(HttpStatusCode Status, string Body)[]> ThreeCallsAsync(string key, string pool, Guid id, long epoch) =>
    [
        await Raw(key, HttpMethod.Get, $"v1/pools/{pool}/allocations/{id}"),
        await Raw(key, HttpMethod.Post, $"v1/pools/{pool}/allocations/{id}/renew", new { epoch, leaseSeconds = 300 }),
        await Raw(key, HttpMethod.Delete, $"v1/pools/{pool}/allocations/{id}?epoch={epoch}"),
    ];

    private async Task<string> NewPoolAsync(string prefix)
    {
        var pool = prefix + "-" + Guid.NewGuid().ToString("N")[..10];
        await _host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
        await _host.Admin.RegisterWorkersAsync(pool, [new WorkerBatchEntry("w1", "10.0.0.1:3389", 10), new WorkerBatchEntry("w2", "10.0.0.2:3389", 10)]);
        return pool;
    }

    private async Task<(HttpStatusCode Status, string Body)> Raw(string key, HttpMethod method, string path, object? body = null, string? idempotencyKey = null)
    {
        var http = _host.NewHttp(key);
        using var request = new HttpRequestMessage(method, path);
        if (body is not null)
        {
            request.Content = JsonContent.Create(body);
        }

        if (idempotencyKey is not null)
        {
            request.Headers.Add("Idempotency-Key", idempotencyKey);
        }

        using var response = await http.SendAsync(request);
        return (response.StatusCode, await response.Content.ReadAsStringAsync());
    }
}
