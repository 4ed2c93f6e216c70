using System.Globalization;
using System.Net;
using System.Net.Http.Headers;
using System.Text;
using System.Text.Json;
using Allocator.Client;
using Allocator.Host.Auth;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Metadata;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using Npgsql;
using Xunit.Abstractions;

namespace Allocator.Host.Tests.Fuzz;

/// <summary>
/// A fuzzer over every /v1 endpoint (found in the host's routing table, so a new endpoint is
/// fuzzed without a change here): malformed JSON, nulls inside arrays, wrong types, extreme
/// numbers, control characters and unpaired surrogates, oversized bodies, headers and ids,
/// conflicting headers, missing/bad/wrong-scope keys and worker keys on other workers. Every case
/// is certainly invalid; each must be answered 4xx with Problem Details, never 5xx, and must write
/// nothing (the host's own schema is compared before and after every case). The host runs on
/// PostgreSQL in a schema of its own. The seed is printed; ALLOCATOR_FUZZ_SEED and
/// ALLOCATOR_FUZZ_CASES replay or lengthen a run.
/// </summary>
public sealed class ApiFuzzTests(ITestOutputHelper output) : IAsyncLifetime
{
    private const string Pool = TestHost.WorkerKeyPool; // the worker key's pool: "another worker" is then a real one
    private const string Worker = "w1";
    private const string HeldKey = "fuzz-held";
    private readonly string _schema = "fuzz_" + Guid.NewGuid().ToString("N")[..10];
    private TestHost _host = null!;
    private NpgsqlDataSource _db = null!;
    private AllocationInfo _held = null!;
    private HttpClient _http = null!;

    public async Task InitializeAsync()
    {
        _host = await TestHost.StartAsync(
        [
            $"--ConnectionStrings:Allocator={TestPostgres.ConnectionString}",
            $"--Allocator:Storage:Postgres:Schema={_schema}",
            // The limiter stays on (the real pipeline) but out of the way of the fuzzer's own pace.
            "--Allocator:RateLimit:UnauthenticatedPermitsPerSecond=1000000",
            "--Allocator:RateLimit:UnauthenticatedBurst=1000000",
        ]);
        _db = NpgsqlDataSource.Create(TestPostgres.ConnectionString);
        _http = new HttpClient { BaseAddress = _host.BaseAddress, Timeout = TimeSpan.FromSeconds(30) };
        await _host.Admin.PutPoolAsync(Pool, new Client.PoolSettings());
        await _host.Admin.RegisterWorkersAsync(Pool, [new WorkerBatchEntry(Worker, "10.7.0.1:7000", 3, ["gpu"]), new WorkerBatchEntry(TestHost.WorkerKeyWorker, "10.7.0.2:7000", 2)]);

        // One allocation held (ids and epochs to aim at); one slot is left free, so a case that
        // was wrongly accepted as a valid allocation would show as a write.
        _held = (await _host.Admin.AllocateAsync(Pool, new AllocateRequest { Units = 2 }, HeldKey)).Allocation!; // as the cases are sent: a key is its tenant's
    }

    public async Task DisposeAsync()
    {
        _http.Dispose();
        await _host.DisposeAsync();
        await using (var drop = _db.CreateCommand($"DROP SCHEMA IF EXISTS \"{_schema}\" CASCADE"))
        {
            await drop.ExecuteNonQueryAsync();
        }

        await _db.DisposeAsync();
    }

    private sealed record Endpoint(string Method, string Route, ApiScopes Scopes, bool OwnWorker, Field[]? Body);

    private sealed record FuzzCase(string Why, string Method, string Path, byte[]? Body, string? ContentType, List<(string Name, string Value)> Headers)
    {
        public override string ToString()
        {
            var body = Body is null ? "(no body)" : Body.Length > 300 ? $"{Body.Length} bytes: {Preview(Body[..300])}…" : Preview(Body);
            return $"[{Why}] {Method} {Path} {string.Join(" ", Headers.Select(h => $"{h.Name}: {(h.Value.Length > 60 ? h.Value[..60] + "…" : h.Value)}"))} content-type {ContentType ?? "-"} body {body}";
        }

        private static string Preview(byte[] bytes) => Encoding.UTF8.GetString(bytes).Replace("\0", "\\0", StringComparison.Ordinal);
    }

    [Fact]
    public async Task EveryEndpoint_CertainlyInvalidRequests_Answer4xxProblemDetails_AndWriteNothing()
    {
        var seed = Environment.GetEnvironmentVariable("ALLOCATOR_FUZZ_SEED") is { Length: > 0 } s ? int.Parse(s, CultureInfo.InvariantCulture) : 20261123;
        var count = Environment.GetEnvironmentVariable("ALLOCATOR_FUZZ_CASES") is { Length: > 0 } c ? int.Parse(c, CultureInfo.InvariantCulture) : 1500;
        var random = new Random(seed);
        var endpoints = Endpoints();
        endpoints.Select(e => $"{e.Method} {e.Route}").Should().Contain(
            ["POST /v1/pools/{pool}/allocations", "DELETE /v1/pools/{pool}/allocations/{allocationId}", "POST /v1/pools/{pool}/workers", "PUT /v1/pools/{pool}"],
            "the fuzzer reads the endpoints from the host's routing table");

        var cases = new List<FuzzCase>();
        foreach (var endpoint in endpoints)
        {
            cases.AddRange(Systematic(endpoint, random));
        }

        for (var i = 0; i < count; i++)
        {
            cases.Add(RandomCase(endpoints[random.Next(endpoints.Count)], random));
        }

        var failures = new List<string>();
        var statuses = new SortedDictionary<int, int>();
        var before = await SnapshotAsync();
        foreach (var fuzz in cases)
        {
            var (status, failure) = await SendAsync(fuzz);
            statuses[status] = statuses.GetValueOrDefault(status) + 1;
            var after = await SnapshotAsync();
            if (after != before)
            {
                failure = (failure is null ? "" : failure + "; ") + "the database changed";
                before = after;
            }

            if (failure is not null)
            {
                failures.Add($"{failure}: {fuzz}");
            }
        }

        foreach (var failure in failures)
        {
            output.WriteLine(failure);
        }

        output.WriteLine($"seed {seed}: {cases.Count} cases over {endpoints.Count} endpoints; statuses: {string.Join(", ", statuses.Select(p => p.Key == KestrelRejected ? $"400 by Kestrel (no body) x{p.Value}" : $"{p.Key} x{p.Value}"))}");
        failures.Should().BeEmpty($"every certainly invalid request must get a 4xx problem and write nothing (seed {seed})");
        statuses.Keys.Should().OnlyContain(k => (k >= 400 && k < 500) || k == KestrelRejected);
    }

    /// <summary>
    /// Requests no well-behaved HTTP client sends, written on a raw socket: control characters and
    /// non-ASCII bytes in headers, oversized headers, conflicting framing and content types.
    /// Kestrel refuses some before the application runs (a bare 4xx); the rest must get a 4xx
    /// problem; none may write.
    /// </summary>
    [Fact]
    public async Task RawProtocolAbuse_Answers4xx_AndWritesNothing()
    {
        var body = "{\"units\":1}";
        var target = $"/v1/pools/{Pool}/allocations";
        string Head(string extra, string? contentLength = null) =>
            $"POST {target} HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: {TestHost.AdminKey}\r\nContent-Type: application/json\r\n{extra}"
            + $"Content-Length: {contentLength ?? Encoding.UTF8.GetByteCount(body).ToString(CultureInfo.InvariantCulture)}\r\nConnection: close\r\n\r\n";
        var cases = new (string Why, byte[] Request)[]
        {
            ("control character in Idempotency-Key", Encoding.ASCII.GetBytes(Head("Idempotency-Key: raw\u0001key\r\n") + body)),
            ("DEL in Idempotency-Key", Encoding.ASCII.GetBytes(Head("Idempotency-Key: raw\u007fkey\r\n") + body)),
            ("NUL in Idempotency-Key", Encoding.ASCII.GetBytes(Head("Idempotency-Key: raw\u0000key\r\n") + body)),
            ("surrogate bytes in Idempotency-Key", Splice(Head("Idempotency-Key: raw\u00a7\r\n") + body, [0xED, 0xA0, 0x80])),
            ("Latin-1 byte in Idempotency-Key", Splice(Head("Idempotency-Key: caf\u00a7\r\n") + body, [0xE9])),
            ("40 KiB Idempotency-Key", Encoding.ASCII.GetBytes(Head($"Idempotency-Key: {new string('k', 40 * 1024)}\r\n") + body)),
            ("two Content-Length values", Encoding.ASCII.GetBytes(Head("Idempotency-Key: raw-cl\r\nContent-Length: 3\r\n") + body)),
            ("Content-Length and chunked", Encoding.ASCII.GetBytes(Head("Idempotency-Key: raw-te\r\nTransfer-Encoding: chunked\r\n") + body)),
            ("bad chunk size", Encoding.ASCII.GetBytes($"POST {target} HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: {TestHost.AdminKey}\r\nIdempotency-Key: raw-chunk\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nZZ\r\n{body}\r\n0\r\n\r\n")),
            ("body shorter than Content-Length", Encoding.ASCII.GetBytes(Head("Idempotency-Key: raw-short\r\n", "100") + body)),
            ("two Content-Type headers", Encoding.ASCII.GetBytes(Head("Idempotency-Key: raw-ct\r\nContent-Type: text/plain\r\n") + body)),
            ("two X-Api-Key headers", Encoding.ASCII.GetBytes(Head($"Idempotency-Key: raw-keys\r\nX-Api-Key: {TestHost.BrokerKey}\r\n") + body)),
            ("header line without colon", Encoding.ASCII.GetBytes(Head("Idempotency-Key raw-colon\r\n") + body)),
            ("space before colon", Encoding.ASCII.GetBytes(Head("Idempotency-Key : raw-space\r\n") + body)),
            ("unknown method", Encoding.ASCII.GetBytes(Head("Idempotency-Key: raw-method\r\n").Replace("POST ", "FROB ", StringComparison.Ordinal) + body)),
            ("request line of 16 KiB", Encoding.ASCII.GetBytes(Head("Idempotency-Key: raw-long\r\n").Replace(target, target + "?x=" + new string('x', 16 * 1024), StringComparison.Ordinal) + body)),
        };

        var before = await SnapshotAsync();
        var failures = new List<string>();
        var statuses = new List<string>();
        foreach (var (why, request) in cases)
        {
            var (status, contentType, text) = await RawAsync(request);
            statuses.Add($"{why}: {status}{(text.Length == 0 ? " (bare)" : "")}");
            if (status is < 400 or >= 500)
            {
                failures.Add($"{why}: answered {status} {Shorten(text)}");
            }
            else if (text.Length > 0 && contentType != "application/problem+json")
            {
                failures.Add($"{why}: {status} with a body that is not a problem ({contentType})");
            }

            if (await SnapshotAsync() is var after && after != before)
            {
                failures.Add($"{why}: the database changed");
                before = after;
            }
        }

        output.WriteLine(string.Join(Environment.NewLine, statuses));
        failures.Should().BeEmpty();
    }

    /// <summary>ASCII text with the bytes put where the text has a section sign.</summary>
    private static byte[] Splice(string ascii, byte[] bytes)
    {
        var at = ascii.IndexOf('\u00a7', StringComparison.Ordinal);
        return [.. Encoding.ASCII.GetBytes(ascii[..at]), .. bytes, .. Encoding.ASCII.GetBytes(ascii[(at + 1)..])];
    }

    private async Task<(int Status, string? ContentType, string Body)> RawAsync(byte[] request)
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(15));
        using var client = new System.Net.Sockets.TcpClient();
        await client.ConnectAsync(_host.BaseAddress.Host, _host.BaseAddress.Port, timeout.Token);
        var stream = client.GetStream();
        try
        {
            await stream.WriteAsync(request, timeout.Token);
        }
        catch (IOException)
        {
            // The server may answer and close before reading everything (oversized headers).
        }

        var buffer = new MemoryStream();
        try
        {
            await stream.CopyToAsync(buffer, timeout.Token);
        }
        catch (IOException)
        {
            // A reset after the answer: keep what arrived.
        }

        var text = Encoding.UTF8.GetString(buffer.ToArray());
        var split = text.IndexOf("\r\n\r\n", StringComparison.Ordinal);
        var head = split < 0 ? text : text[..split];
        var lines = head.Split("\r\n");
        var status = lines[0].Split(' ') is [_, var code, ..] && int.TryParse(code, CultureInfo.InvariantCulture, out var parsed) ? parsed : 0;
        var contentType = lines.FirstOrDefault(l => l.StartsWith("Content-Type:", StringComparison.OrdinalIgnoreCase))?["Content-Type:".Length..].Split(';')[0].Trim();
        var content = split < 0 ? "" : text[(split + 4)..];
        return (status, contentType, content);
    }

    /// <summary>The /v1 endpoints of the running host, with their scopes and bodies.</summary>
    private List<Endpoint> Endpoints()
    {
        var sources = _host.Services.GetRequiredService<IEnumerable<EndpointDataSource>>();
        var found = new List<Endpoint>();
        foreach (var route in sources.SelectMany(s => s.Endpoints).OfType<RouteEndpoint>())
        {
            var pattern = "/" + route.RoutePattern.RawText!.TrimStart('/');
            if (!pattern.StartsWith("/v1/", StringComparison.Ordinal) || route.Metadata.GetMetadata<IHttpMethodMetadata>() is not { } methods)
            {
                continue;
            }

            var requirement = route.Metadata.GetMetadata<ScopeRequirement>();
            requirement.Should().NotBeNull($"{pattern} must require a scope");
            foreach (var method in methods.HttpMethods)
            {
                var hasBody = route.Metadata.GetMetadata<IAcceptsMetadata>() is not null;
                BodyShapes.ByRoute.TryGetValue($"{method} {pattern}", out var shape);
                if (hasBody)
                {
                    shape.Should().NotBeNull($"{method} {pattern} takes a body: describe it in BodyShapes so it is fuzzed");
                }

                found.Add(new Endpoint(method, pattern, requirement!.Scopes, requirement.OwnWorker, hasBody ? shape : null));
            }
        }

        return found;
    }

    // --- case generation ---------------------------------------------------------------------

    private static readonly string[] BadPoolOrWorkerIds =
    [
        "bad%20id", new string('p', 129), "%00", "x%01y", "%C3%28", "%ED%A0%80", "%E6%97%A5", "-x", "_x", "a%2Fb", "a%5Cb", "%20", "x%7F",
    ];

    private static readonly string[] BadAllocationIds =
    [
        "not-a-guid", "3f2504e04f8911d39a0c0305e82c3301", "%7B3f2504e0-4f89-11d3-9a0c-0305e82c3301%7D", "%00", new string('a', 200),
        "3f2504e0-4f89-11d3-9a0c-0305e82c330", "3f2504e0-4f89-11d3-9a0c-0305e82c3301%00",
    ];

    private static readonly string[] BadEpochQueries =
    [
        "", "?epoch=", "?epoch=abc", "?epoch=0", "?epoch=-1", "?epoch=1.5", "?epoch=99999999999999999999", "?epoch=999999",
        "?epoch=1&epoch=2", "?epoch=%00", "?epoch=1e3", "?Epoch=" + new string('9', 5000),
    ];

    /// <summary>Each kind of bad input once per endpoint (where it applies).</summary>
    private IEnumerable<FuzzCase> Systematic(Endpoint endpoint, Random random)
    {
        // Bad ids in each route parameter.
        foreach (var parameter in Parameters(endpoint))
        {
            var bad = parameter == "allocationId" ? BadAllocationIds : BadPoolOrWorkerIds;
            foreach (var value in bad)
            {
                yield return Build(endpoint, random, $"bad {parameter}", route: new() { [parameter] = value });
            }
        }

        // Every certainly invalid value of every body member.
        foreach (var field in endpoint.Body ?? [])
        {
            foreach (var value in FuzzValues.InvalidFor(field))
            {
                yield return Build(endpoint, random, $"bad {field.Name}", fields: new() { [field.Name] = value });
            }
        }

        if (endpoint.Body is not null)
        {
            var valid = ValidBody(endpoint, random, []);
            foreach (var (name, bytes) in BadBodies.All(valid))
            {
                yield return Build(endpoint, random, $"body: {name}", rawBody: bytes);
            }

            foreach (var type in new[] { "text/plain", "application/xml", "multipart/form-data; boundary=x", "application/x-www-form-urlencoded" })
            {
                yield return Build(endpoint, random, $"content type {type}", contentType: type, validBodyOk: true);
            }

            yield return Build(endpoint, random, "no content type", contentType: "", validBodyOk: true);
        }

        if (endpoint.Route.EndsWith("/allocations", StringComparison.Ordinal) && endpoint.Method == "POST")
        {
            // Conflicting and oversized idempotency keys (the body is otherwise valid).
            yield return Build(endpoint, random, "two Idempotency-Key headers", headers: [("Idempotency-Key", "fz-a"), ("Idempotency-Key", "fz-b")], validBodyOk: true, noKeyHeader: true);
            yield return Build(endpoint, random, "Idempotency-Key differs from sessionKey", headers: [("Idempotency-Key", "fz-a")], fields: new() { ["sessionKey"] = "\"fz-b\"" }, validBodyOk: true, noKeyHeader: true);
            yield return Build(endpoint, random, "8 KiB Idempotency-Key", headers: [("Idempotency-Key", new string('k', 8192))], validBodyOk: true, noKeyHeader: true);
            yield return Build(endpoint, random, "empty Idempotency-Key", headers: [("Idempotency-Key", "")], validBodyOk: true, noKeyHeader: true);
            yield return Build(endpoint, random, "no key at all", validBodyOk: true, noKeyHeader: true, fields: new() { ["sessionKey"] = null });
            yield return Build(endpoint, random, "reused key, other units", headers: [("Idempotency-Key", HeldKey)], fields: new() { ["units"] = "1" }, validBodyOk: true, noKeyHeader: true);
        }

        if (endpoint.Method == "DELETE" && endpoint.Route.Contains("{allocationId}", StringComparison.Ordinal))
        {
            foreach (var query in BadEpochQueries)
            {
                yield return Build(endpoint, random, $"epoch query '{(query.Length > 30 ? query[..30] : query)}'", query: query, validBodyOk: true);
            }
        }

        // Authentication and scopes: each is rejected whatever the rest of the request holds.
        foreach (var (why, key) in AuthFailures(endpoint))
        {
            yield return Build(endpoint, random, why, apiKeys: key, validBodyOk: true);
        }
    }

    private IEnumerable<(string Why, string[] Keys)> AuthFailures(Endpoint endpoint)
    {
        yield return ("no API key", []);
        yield return ("unknown API key", ["not-a-key"]);
        yield return ("two API keys", [TestHost.AdminKey, TestHost.AdminKey]);
        yield return ("2 KiB API key", [new string('k', 2048)]);
        yield return ("API key of another case", [TestHost.AdminKey.ToUpperInvariant()]);
        if ((endpoint.Scopes & ApiScopes.Broker) == 0)
        {
            yield return ("broker key on a non-broker endpoint", [TestHost.BrokerKey]);
        }

        if ((endpoint.Scopes & ApiScopes.Worker) == 0)
        {
            yield return ("worker key on a non-worker endpoint", [TestHost.WorkerKey]);
        }
        else if (endpoint.OwnWorker && endpoint.Route.Contains("{worker}", StringComparison.Ordinal))
        {
            yield return ("worker key on another worker", [TestHost.WorkerKey]);
        }
    }

    /// <summary>One to three bad parts at random, the rest valid.</summary>
    private FuzzCase RandomCase(Endpoint endpoint, Random random)
    {
        Dictionary<string, string> route = [];
        Dictionary<string, string?> fields = [];
        byte[]? rawBody = null;
        string[]? keys = null;
        var parts = new List<string>();
        var mutations = random.Next(1, 4);
        for (var i = 0; i < mutations; i++)
        {
            switch (random.Next(endpoint.Body is null ? 2 : 4))
            {
                case 0 when Parameters(endpoint).ToList() is { Count: > 0 } parameters:
                    var parameter = parameters[random.Next(parameters.Count)];
                    var bad = parameter == "allocationId" ? BadAllocationIds : BadPoolOrWorkerIds;
                    route[parameter] = bad[random.Next(bad.Length)];
                    parts.Add("bad " + parameter);
                    break;
                case 2:
                    var field = endpoint.Body![random.Next(endpoint.Body.Length)];
                    var values = FuzzValues.InvalidFor(field);
                    fields[field.Name] = values[random.Next(values.Length)];
                    parts.Add("bad " + field.Name);
                    break;
                case 3:
                    var bodies = BadBodies.All(ValidBody(endpoint, random, [])).ToList();
                    var pick = bodies[random.Next(bodies.Count)];
                    rawBody = pick.Bytes;
                    parts.Add("body: " + pick.Name);
                    break;
                default:
                    var failures = AuthFailures(endpoint).ToList();
                    var failure = failures[random.Next(failures.Count)];
                    keys = failure.Keys;
                    parts.Add(failure.Why);
                    break;
            }
        }

        return Build(endpoint, random, "random: " + string.Join(" + ", parts.Distinct()), route: route, fields: fields, rawBody: rawBody, apiKeys: keys,
            validBodyOk: keys is not null || route.Count > 0);
    }

    private static IEnumerable<string> Parameters(Endpoint endpoint)
    {
        foreach (var name in new[] { "pool", "worker", "allocationId" })
        {
            if (endpoint.Route.Contains("{" + name + "}", StringComparison.Ordinal))
            {
                yield return name;
            }
        }
    }

    /// <param name="validBodyOk">
    /// Something other than the body already makes the request invalid (a bad id, key, header or
    /// query), so the body may be valid; otherwise a case must break the body or an id.
    /// </param>
    private FuzzCase Build(
        Endpoint endpoint,
        Random random,
        string why,
        Dictionary<string, string>? route = null,
        Dictionary<string, string?>? fields = null,
        byte[]? rawBody = null,
        string? contentType = "application/json",
        List<(string, string)>? headers = null,
        string[]? apiKeys = null,
        string? query = null,
        bool validBodyOk = false,
        bool noKeyHeader = false)
    {
        route ??= [];
        var path = endpoint.Route
            .Replace("{pool}", route.GetValueOrDefault("pool", Pool), StringComparison.Ordinal)
            .Replace("{worker}", route.GetValueOrDefault("worker", Worker), StringComparison.Ordinal)
            .Replace("{allocationId}", route.GetValueOrDefault("allocationId", _held.AllocationId.ToString()), StringComparison.Ordinal);

        var invalidElsewhere = validBodyOk || route.Count > 0 || rawBody is not null || (fields?.Count > 0 && fields.Values.Any(v => v is not null));
        if (endpoint.Body is null && !invalidElsewhere)
        {
            // A bodiless write (drain, deregister, release) with good ids and key is valid: it
            // needs a bad id or key to be a fuzz case.
            throw new InvalidOperationException($"No invalid part in a case for {endpoint.Method} {endpoint.Route} ({why}).");
        }

        if (endpoint.Method == "DELETE" && endpoint.Route.Contains("{allocationId}", StringComparison.Ordinal))
        {
            // A release with the held allocation's real epoch would be valid: always a stale or bad one.
            path += query ?? "?epoch=999999";
        }
        else if (query is not null)
        {
            path += query;
        }

        byte[]? body = rawBody;
        if (body is null && endpoint.Body is not null)
        {
            body = Encoding.UTF8.GetBytes(ValidBody(endpoint, random, fields ?? []));
        }

        List<(string Name, string Value)> all = [.. headers ?? []];
        if (endpoint.Route.EndsWith("/allocations", StringComparison.Ordinal) && endpoint.Method == "POST" && !noKeyHeader)
        {
            all.Add(("Idempotency-Key", "fuzz-" + random.Next().ToString(CultureInfo.InvariantCulture)));
        }

        foreach (var key in apiKeys ?? [TestHost.AdminKey])
        {
            all.Add((AllocatorClient.ApiKeyHeader, key));
        }

        return new FuzzCase(why, endpoint.Method, path.TrimStart('/'), body, body is null ? null : contentType, all);
    }

    /// <summary>A body of the endpoint's shape: the given members as given (null: left out), the rest valid or left out when optional.</summary>
    private static string ValidBody(Endpoint endpoint, Random random, Dictionary<string, string?> given)
    {
        var members = new List<string>();
        foreach (var field in endpoint.Body!)
        {
            if (given.TryGetValue(field.Name, out var value))
            {
                if (value is not null)
                {
                    members.Add($"\"{field.Name}\":{value}");
                }
            }
            else if (field.Required || random.Next(2) == 0)
            {
                members.Add($"\"{field.Name}\":{FuzzValues.ValidFor(field, random)}");
            }
        }

        return "{" + string.Join(',', members) + "}";
    }

    // --- sending and judging -----------------------------------------------------------------

    private async Task<(int Status, string? Failure)> SendAsync(FuzzCase fuzz)
    {
        using var request = new HttpRequestMessage(new HttpMethod(fuzz.Method), fuzz.Path);
        if (fuzz.Body is not null)
        {
            request.Content = new ByteArrayContent(fuzz.Body);
            if (fuzz.ContentType is { Length: > 0 } type)
            {
                request.Content.Headers.TryAddWithoutValidation("Content-Type", type);
            }

            // Large bodies: the server answers 413 from the declared length; 100-continue keeps
            // the client from streaming into a connection the server is closing.
            request.Headers.ExpectContinue = fuzz.Body.Length > 64 * 1024 ? true : null;
        }

        foreach (var (name, value) in fuzz.Headers)
        {
            request.Headers.TryAddWithoutValidation(name, value);
        }

        request.Headers.Accept.Add(new MediaTypeWithQualityHeaderValue("application/json"));
        HttpResponseMessage response;
        try
        {
            response = await _http.SendAsync(request);
        }
        catch (HttpRequestException ex)
        {
            return (0, "no answer (" + ex.Message + ")");
        }

        using (response)
        {
            var status = (int)response.StatusCode;
            var text = await response.Content.ReadAsStringAsync();
            if (status is < 400 or >= 500)
            {
                return (status, $"answered {status} {Shorten(text)}");
            }

            if (status == 400 && text.Length == 0 && fuzz.Path.Contains("%00", StringComparison.Ordinal))
            {
                // Kestrel refuses a NUL in the request target before the application runs: a bare
                // 400 that no middleware can dress as a problem. Counted apart.
                return (KestrelRejected, null);
            }

            if (response.Content.Headers.ContentType?.MediaType != "application/problem+json")
            {
                return (status, $"answered {status} without problem details ({response.Content.Headers.ContentType})");
            }

            try
            {
                using var problem = JsonDocument.Parse(text);
                var root = problem.RootElement;
                if (root.GetProperty("status").GetInt32() != status
                    || root.GetProperty("type").GetString() is not { } type || !type.StartsWith("https://allocator.dev/problems/", StringComparison.Ordinal)
                    || string.IsNullOrEmpty(root.GetProperty("title").GetString()))
                {
                    return (status, $"problem without a stable type, title or matching status: {Shorten(text)}");
                }
            }
            catch (Exception ex) when (ex is JsonException or KeyNotFoundException or InvalidOperationException)
            {
                return (status, $"unreadable problem: {Shorten(text)}");
            }

            if (text.Contains("System.", StringComparison.Ordinal) || text.Contains("Allocator.", StringComparison.Ordinal) || text.Contains("   at ", StringComparison.Ordinal))
            {
                return (status, $"problem leaks internals: {Shorten(text)}");
            }

            return (status, null);
        }
    }

    /// <summary>Status bucket of requests Kestrel answered 400 without a body (never reached the application).</summary>
    private const int KestrelRejected = 400_000;

    private static string Shorten(string text) => text.Length > 400 ? text[..400] + "…" : text;

    /// <summary>Everything the store holds in the fuzz schema, as one digest per table.</summary>
    private async Task<string> SnapshotAsync()
    {
        var tables = new[] { "pools", "workers", "worker_epochs", "allocations", "allocation_history" };
        var sql = "SELECT " + string.Join(" || '/' || ", tables.Select(t =>
            $"(SELECT count(*)::text || ':' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM \"{_schema}\".{t} t)"));
        await using var command = _db.CreateCommand(sql);
        return (string)(await command.ExecuteScalarAsync())!;
    }
}
