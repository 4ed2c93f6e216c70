using System.Net;
using System.Text;
using System.Text.Json;
using Allocator.Client;

namespace Allocator.Host.Tests;

/// <summary>
/// Every malformed or out-of-range request gets the right 4xx problem and writes nothing: the
/// pool's statistics, workers and allocations are compared before and after each request.
/// </summary>
[Collection(SharedHostCollection.Name)]
public sealed class BadInputTests(SharedHostFixture fixture) : IAsyncLifetime
{
    private static readonly string Pool = Unique.Name("bad-inputs");
    private const string Held = "held-session";
    private readonly TestHost _host = fixture.Host;
    private static readonly SemaphoreSlim SetupLock = new(1, 1);
    private static AllocationInfo? s_held;

    private sealed record Case(HttpMethod Method, string Path, string? Body, HttpStatusCode Status, string Type, string? ContentType = "application/json", string? IdempotencyKey = null, bool ExpectContinue = false);

    private static readonly Dictionary<string, Case> Cases = new()
    {
        ["pool: malformed JSON"] = new(HttpMethod.Put, "v1/pools/{pool}", "{\"strategy\":", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["pool: unknown field"] = new(HttpMethod.Put, "v1/pools/{pool}", "{\"strategyy\":\"strict\"}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["pool: unknown strategy"] = new(HttpMethod.Put, "v1/pools/{pool}", "{\"strategy\":\"random\"}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["pool: unknown placement"] = new(HttpMethod.Put, "v1/pools/{pool}", "{\"placement\":\"binpack\"}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["pool: negative maxWaitMs"] = new(HttpMethod.Put, "v1/pools/{pool}", "{\"maxWaitMs\":-1}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["pool: huge lease"] = new(HttpMethod.Put, "v1/pools/{pool}", "{\"defaultLeaseSeconds\":999999999}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["pool: number as string"] = new(HttpMethod.Put, "v1/pools/{pool}", "{\"maxWaitMs\":\"10\"}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["pool: id with a space"] = new(HttpMethod.Put, "v1/pools/bad%20pool", "{}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["pool: id too long"] = new(HttpMethod.Put, "v1/pools/" + new string('p', 129), "{}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["pool: body is an array"] = new(HttpMethod.Put, "v1/pools/{pool}", "[1]", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["worker: missing capacity"] = new(HttpMethod.Put, "v1/pools/{pool}/workers/w9", "{\"address\":\"x:1\"}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["worker: capacity 0"] = new(HttpMethod.Put, "v1/pools/{pool}/workers/w9", "{\"address\":\"x:1\",\"capacity\":0}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["worker: capacity too large"] = new(HttpMethod.Put, "v1/pools/{pool}/workers/w9", "{\"address\":\"x:1\",\"capacity\":2000000}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["worker: capacity overflows int"] = new(HttpMethod.Put, "v1/pools/{pool}/workers/w9", "{\"address\":\"x:1\",\"capacity\":99999999999}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["worker: null address"] = new(HttpMethod.Put, "v1/pools/{pool}/workers/w9", "{\"address\":null,\"capacity\":1}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["worker: tag with a space"] = new(HttpMethod.Put, "v1/pools/{pool}/workers/w9", "{\"address\":\"x:1\",\"capacity\":1,\"tags\":[\"a b\"]}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["worker: id with a slash-like char"] = new(HttpMethod.Put, "v1/pools/{pool}/workers/w%24x", "{\"address\":\"x:1\",\"capacity\":1}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["worker: unknown pool"] = new(HttpMethod.Put, "v1/pools/no-such-pool/workers/w9", "{\"address\":\"x:1\",\"capacity\":1}", HttpStatusCode.NotFound, ProblemTypes.NotFound),
        ["worker: capacity below load"] = new(HttpMethod.Put, "v1/pools/{pool}/workers/w1", "{\"address\":\"x:1\",\"capacity\":1}", HttpStatusCode.Conflict, ProblemTypes.Conflict),
        ["workers: empty batch"] = new(HttpMethod.Post, "v1/pools/{pool}/workers", "{\"workers\":[]}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["workers: duplicate ids"] = new(HttpMethod.Post, "v1/pools/{pool}/workers", "{\"workers\":[{\"workerId\":\"d1\",\"address\":\"a\",\"capacity\":1},{\"workerId\":\"d1\",\"address\":\"a\",\"capacity\":1}]}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["workers: one bad entry"] = new(HttpMethod.Post, "v1/pools/{pool}/workers", "{\"workers\":[{\"workerId\":\"ok1\",\"address\":\"a\",\"capacity\":1},{\"workerId\":\"bad\",\"address\":\"a\",\"capacity\":-1}]}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["workers: null entry"] = new(HttpMethod.Post, "v1/pools/{pool}/workers", "{\"workers\":[null]}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["workers: null among good entries"] = new(HttpMethod.Post, "v1/pools/{pool}/workers", "{\"workers\":[{\"workerId\":\"ok2\",\"address\":\"a\",\"capacity\":1},null]}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["workers: null workers"] = new(HttpMethod.Post, "v1/pools/{pool}/workers", "{\"workers\":null}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["workers: null tag"] = new(HttpMethod.Post, "v1/pools/{pool}/workers", "{\"workers\":[{\"workerId\":\"ok3\",\"address\":\"a\",\"capacity\":1,\"tags\":[null]}]}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["worker: null tag"] = new(HttpMethod.Put, "v1/pools/{pool}/workers/w9", "{\"address\":\"x:1\",\"capacity\":1,\"tags\":[null]}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["allocate: null tag"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{\"tags\":[null]}", HttpStatusCode.BadRequest, ProblemTypes.Validation, IdempotencyKey: "k11"),
        ["load: stale epoch"] = new(HttpMethod.Post, "v1/pools/{pool}/workers/w1/load", "{\"epoch\":99,\"loadIndex\":10}", HttpStatusCode.Conflict, ProblemTypes.StaleEpoch),
        ["load: index above 10000"] = new(HttpMethod.Post, "v1/pools/{pool}/workers/w1/load", "{\"epoch\":1,\"loadIndex\":10001}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["load: missing epoch"] = new(HttpMethod.Post, "v1/pools/{pool}/workers/w1/load", "{\"loadIndex\":1}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["load: unknown worker"] = new(HttpMethod.Post, "v1/pools/{pool}/workers/nobody/load", "{\"epoch\":1}", HttpStatusCode.NotFound, ProblemTypes.NotFound),
        ["drain: unknown worker"] = new(HttpMethod.Post, "v1/pools/{pool}/workers/nobody/drain", null, HttpStatusCode.NotFound, ProblemTypes.NotFound),
        ["deregister: unknown worker"] = new(HttpMethod.Delete, "v1/pools/{pool}/workers/nobody", null, HttpStatusCode.NotFound, ProblemTypes.NotFound),
        ["allocate: no idempotency key"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["allocate: units 0"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{\"units\":0}", HttpStatusCode.BadRequest, ProblemTypes.Validation, IdempotencyKey: "k0"),
        ["allocate: negative units"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{\"units\":-3}", HttpStatusCode.BadRequest, ProblemTypes.Validation, IdempotencyKey: "k1"),
        ["allocate: header and body keys differ"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{\"sessionKey\":\"a\"}", HttpStatusCode.BadRequest, ProblemTypes.Validation, IdempotencyKey: "b"),
        ["allocate: lease 0"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{\"leaseSeconds\":0}", HttpStatusCode.BadRequest, ProblemTypes.Validation, IdempotencyKey: "k2"),
        ["allocate: maxWait too long"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{\"maxWaitMs\":700000}", HttpStatusCode.BadRequest, ProblemTypes.Validation, IdempotencyKey: "k3"),
        ["allocate: 33 tags"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{\"tags\":[" + string.Join(',', Enumerable.Range(0, 33).Select(i => $"\"t{i}\"")) + "]}", HttpStatusCode.BadRequest, ProblemTypes.Validation, IdempotencyKey: "k4"),
        ["allocate: key too long"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{}", HttpStatusCode.BadRequest, ProblemTypes.Validation, IdempotencyKey: new string('k', 201)),
        ["allocate: unknown pool"] = new(HttpMethod.Post, "v1/pools/no-such-pool/allocations", "{}", HttpStatusCode.NotFound, ProblemTypes.NotFound, IdempotencyKey: "k5"),
        ["allocate: reused key, other units"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{\"units\":1}", HttpStatusCode.Conflict, ProblemTypes.Conflict, IdempotencyKey: Held),
        ["allocate: pool is full"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{}", HttpStatusCode.Conflict, ProblemTypes.NoCapacity, IdempotencyKey: "k6"),
        ["allocate: text/plain body"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{}", HttpStatusCode.UnsupportedMediaType, ProblemTypes.UnsupportedMediaType, "text/plain", IdempotencyKey: "k7"),
        ["allocate: 2 MiB body"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{\"tags\":[\"" + new string('x', 2 * 1024 * 1024) + "\"]}", HttpStatusCode.RequestEntityTooLarge, ProblemTypes.PayloadTooLarge, IdempotencyKey: "k8", ExpectContinue: true),
        ["allocate: duplicate member"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "{\"units\":1,\"units\":1}", HttpStatusCode.BadRequest, ProblemTypes.Validation, IdempotencyKey: "k10"),
        ["allocate: empty body"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations", "", HttpStatusCode.BadRequest, ProblemTypes.Validation, IdempotencyKey: "k9"),
        ["release: not a GUID"] = new(HttpMethod.Delete, "v1/pools/{pool}/allocations/not-a-guid?epoch=1", null, HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["release: missing epoch"] = new(HttpMethod.Delete, "v1/pools/{pool}/allocations/{held}", null, HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["release: epoch not a number"] = new(HttpMethod.Delete, "v1/pools/{pool}/allocations/{held}?epoch=abc", null, HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["release: stale epoch"] = new(HttpMethod.Delete, "v1/pools/{pool}/allocations/{held}?epoch=999999", null, HttpStatusCode.Conflict, ProblemTypes.StaleEpoch),
        ["release: unknown allocation"] = new(HttpMethod.Delete, "v1/pools/{pool}/allocations/3f2504e0-4f89-11d3-9a0c-0305e82c3301?epoch=1", null, HttpStatusCode.NotFound, ProblemTypes.NotFound),
        ["renew: negative lease"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations/{held}/renew", "{\"epoch\":1,\"leaseSeconds\":-5}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["renew: stale epoch"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations/{held}/renew", "{\"epoch\":999999}", HttpStatusCode.Conflict, ProblemTypes.StaleEpoch),
        ["renew: epoch is a float"] = new(HttpMethod.Post, "v1/pools/{pool}/allocations/{held}/renew", "{\"epoch\":1.5}", HttpStatusCode.BadRequest, ProblemTypes.Validation),
        ["get: unknown allocation"] = new(HttpMethod.Get, "v1/pools/{pool}/allocations/3f2504e0-4f89-11d3-9a0c-0305e82c3301", null, HttpStatusCode.NotFound, ProblemTypes.NotFound),
        ["get: unknown pool"] = new(HttpMethod.Get, "v1/pools/no-such-pool", null, HttpStatusCode.NotFound, ProblemTypes.NotFound),
        ["route: unknown path"] = new(HttpMethod.Get, "v1/nothing-here", null, HttpStatusCode.NotFound, ProblemTypes.NotFound),
    };

    public static TheoryData<string> CaseNames() => [.. Cases.Keys];

    public async Task InitializeAsync()
    {
        await SetupLock.WaitAsync();
        try
        {
            if (s_held is null)
            {
                await _host.Admin.PutPoolAsync(Pool, new Client.PoolSettings());
                await _host.Admin.RegisterWorkerAsync(Pool, "w1", new Client.WorkerRegistration("10.1.0.1:7000", 2, ["gpu"]));
                s_held = (await _host.Admin.AllocateAsync(Pool, new AllocateRequest { Units = 2 }, Held)).Allocation!; // as the cases are sent: a key is its tenant's
            }
        }
        finally
        {
            SetupLock.Release();
        }
    }

    public Task DisposeAsync() => Task.CompletedTask;

    [Fact]
    public void TheSuite_HasAtLeastThirtyCases() => Cases.Should().HaveCountGreaterThanOrEqualTo(30);

    [Theory]
    [MemberData(nameof(CaseNames))]
    public async Task BadRequest_GetsProblemDetails_AndWritesNothing(string name)
    {
        var c = Cases[name];
        var before = await SnapshotAsync();
        using var request = new HttpRequestMessage(c.Method, c.Path.Replace("{pool}", Pool).Replace("{held}", s_held!.AllocationId.ToString()));
        if (c.Body is not null)
        {
            request.Content = new StringContent(c.Body, Encoding.UTF8, c.ContentType ?? "application/json");
        }

        // The server answers 413 from the declared length; with 100-continue the client does not
        // stream 2 MiB into a connection the server is closing (a broken pipe, not an answer).
        request.Headers.ExpectContinue = c.ExpectContinue ? true : null;
        if (c.IdempotencyKey is not null)
        {
            request.Headers.Add(AllocatorClient.IdempotencyKeyHeader, c.IdempotencyKey);
        }

        using var response = await _host.Http.SendAsync(request);

        var body = await response.Content.ReadAsStringAsync();
        response.StatusCode.Should().Be(c.Status, body);
        response.Content.Headers.ContentType?.MediaType.Should().Be("application/problem+json", body);
        using var problem = JsonDocument.Parse(body);
        problem.RootElement.GetProperty("type").GetString().Should().Be(c.Type);
        problem.RootElement.GetProperty("status").GetInt32().Should().Be((int)c.Status);
        problem.RootElement.GetProperty("title").GetString().Should().NotBeNullOrEmpty();
        if (c.Status != HttpStatusCode.NotFound || problem.RootElement.TryGetProperty("detail", out _))
        {
            problem.RootElement.GetProperty("detail").GetString().Should().NotBeNullOrEmpty();
        }

        body.Should().NotContain("Allocator.Host", "problems must not leak internals");
        body.Should().NotContain("System.", "problems must not leak internals");
        (await SnapshotAsync()).Should().Be(before, "a rejected request must write nothing");
    }

    [Fact]
    public async Task ValidationProblem_ListsTheBadFields()
    {
        var error = await FluentActions.Awaiting(() => _host.Admin.PutPoolAsync(Pool, new Client.PoolSettings { Strategy = "fastest", MaxWaitMs = -5 }))
            .Should().ThrowAsync<AllocatorApiException>();

        error.Which.Type.Should().Be(ProblemTypes.Validation);
        error.Which.Errors.Should().ContainKeys("strategy", "maxWaitMs");
    }

    private async Task<string> SnapshotAsync()
    {
        var stats = await _host.Store.GetPoolStatisticsAsync(Pool);
        var workers = await _host.Store.GetWorkersAsync(Pool);
        var held = await _host.Store.GetAllocationAsync(Pool, s_held!.AllocationId);
        return JsonSerializer.Serialize(new { stats, workers, held });
    }
}
