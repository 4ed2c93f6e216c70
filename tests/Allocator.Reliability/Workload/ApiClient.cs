using System.Diagnostics;
using System.Globalization;
using System.Net.Http.Headers;
using System.Text;
using System.Text.Json;
using Allocator.Reliability.History;

namespace Allocator.Reliability.Workload;

/// <summary>
/// Raw HTTP calls to the instances of a cluster, each recorded in the history as invoked and then
/// answered ok / fail / unknown. Nothing is retried here: the callers (brokers, worker agents)
/// decide, as real clients would.
/// </summary>
internal sealed class ApiClient : IDisposable
{
    private readonly HistoryRecorder _history;
    private readonly IReadOnlyList<Uri> _instances;
    private readonly string _apiKey;
    private readonly HttpClient _http;

    /// <param name="timeout">The client's own patience; a call it gives up on is recorded as unknown (<see cref="Operation.ClientTimeout"/>).</param>
    /// <param name="tenant">The tenant of <paramref name="apiKey"/>, recorded with every call (issue 22).</param>
    public ApiClient(string name, HistoryRecorder history, IReadOnlyList<Uri> instances, string apiKey, TimeSpan timeout, string tenant = Cluster.HostCluster.ApiKeyTenant)
    {
        Name = name;
        Tenant = tenant;
        _history = history;
        _instances = instances;
        _apiKey = apiKey;
        Timeout = timeout;
        _http = new HttpClient(new SocketsHttpHandler
        {
            PooledConnectionLifetime = TimeSpan.FromSeconds(30),
            ConnectTimeout = TimeSpan.FromSeconds(5),
            MaxConnectionsPerServer = 64,
        })
        { Timeout = System.Threading.Timeout.InfiniteTimeSpan };
    }

    public string Name { get; }

    public string Tenant { get; }

    public TimeSpan Timeout { get; }

    /// <summary>The scenario's pace for brokers that open sessions through this client (<see cref="Brokers"/>); null: none.</summary>
    public SessionPace? Pace { get; init; }

    public int Instances => _instances.Count;

    public Task<Operation> PutPoolAsync(int instance, string pool, string settingsJson) =>
        SendAsync(new Operation { Id = _history.NextId(), Client = Name, Tenant = Tenant, Instance = instance, Kind = OperationKind.PutPool, Pool = pool, InvokedAt = Now },
            HttpMethod.Put, $"v1/pools/{pool}", settingsJson);

    public Task<Operation> AllocateAsync(int instance, string pool, string key, int units, TimeSpan? lease, TimeSpan maxWait, IReadOnlyList<string>? tags = null)
    {
        var body = new StringBuilder("{\"units\":").Append(units.ToString(CultureInfo.InvariantCulture));
        if (lease is { } l)
        {
            body.Append(",\"leaseSeconds\":").Append(((int)l.TotalSeconds).ToString(CultureInfo.InvariantCulture));
        }

        if (maxWait > TimeSpan.Zero)
        {
            body.Append(",\"maxWaitMs\":").Append(((int)maxWait.TotalMilliseconds).ToString(CultureInfo.InvariantCulture));
        }

        if (tags is { Count: > 0 })
        {
            body.Append(",\"tags\":").Append(JsonSerializer.Serialize(tags));
        }

        body.Append('}');
        return SendAsync(
            new Operation { Id = _history.NextId(), Client = Name, Tenant = Tenant, Instance = instance, Kind = OperationKind.Allocate, Pool = pool, Key = key, Units = units, Lease = lease, MaxWait = maxWait, InvokedAt = Now },
            HttpMethod.Post, $"v1/pools/{pool}/allocations", body.ToString(), idempotencyKey: key);
    }

    /// <summary><c>POST /v1/allocations</c>: the first of <paramref name="pools"/> with room (ADR 0036).</summary>
    public Task<Operation> AllocateAnyAsync(int instance, IReadOnlyList<string> pools, string key, int units, TimeSpan? lease, TimeSpan maxWait)
    {
        var body = new StringBuilder("{\"pools\":").Append(JsonSerializer.Serialize(pools)).Append(",\"units\":").Append(units.ToString(CultureInfo.InvariantCulture));
        if (lease is { } l)
        {
            body.Append(",\"leaseSeconds\":").Append(((int)l.TotalSeconds).ToString(CultureInfo.InvariantCulture));
        }

        if (maxWait > TimeSpan.Zero)
        {
            body.Append(",\"maxWaitMs\":").Append(((int)maxWait.TotalMilliseconds).ToString(CultureInfo.InvariantCulture));
        }

        body.Append('}');
        return SendAsync(
            new Operation { Id = _history.NextId(), Client = Name, Tenant = Tenant, Instance = instance, Kind = OperationKind.Allocate, Pool = string.Join('|', pools), Pools = pools, Key = key, Units = units, Lease = lease, MaxWait = maxWait, InvokedAt = Now },
            HttpMethod.Post, "v1/allocations", body.ToString(), idempotencyKey: key);
    }

    public Task<Operation> ReleaseAsync(int instance, string pool, Guid id, long epoch, string? key, bool knownStale = false) =>
        SendAsync(new Operation { Id = _history.NextId(), Client = Name, Tenant = Tenant, Instance = instance, Kind = OperationKind.Release, Pool = pool, Key = key, AllocationId = id, Epoch = epoch, KnownStale = knownStale, InvokedAt = Now },
            HttpMethod.Delete, $"v1/pools/{pool}/allocations/{id}?epoch={epoch.ToString(CultureInfo.InvariantCulture)}", null);

    public Task<Operation> RenewAsync(int instance, string pool, Guid id, long epoch, TimeSpan lease, string? key, bool knownStale = false) =>
        SendAsync(new Operation { Id = _history.NextId(), Client = Name, Tenant = Tenant, Instance = instance, Kind = OperationKind.Renew, Pool = pool, Key = key, AllocationId = id, Epoch = epoch, Lease = lease, KnownStale = knownStale, InvokedAt = Now },
            HttpMethod.Post, $"v1/pools/{pool}/allocations/{id}/renew",
            $"{{\"epoch\":{epoch.ToString(CultureInfo.InvariantCulture)},\"leaseSeconds\":{((int)lease.TotalSeconds).ToString(CultureInfo.InvariantCulture)}}}");

    public Task<Operation> GetAllocationAsync(int instance, string pool, Guid id) =>
        SendAsync(new Operation { Id = _history.NextId(), Client = Name, Tenant = Tenant, Instance = instance, Kind = OperationKind.GetAllocation, Pool = pool, AllocationId = id, InvokedAt = Now },
            HttpMethod.Get, $"v1/pools/{pool}/allocations/{id}", null);

    public Task<Operation> RegisterAsync(int instance, string pool, string worker, int capacity, IReadOnlyList<string>? tags = null) =>
        SendAsync(new Operation { Id = _history.NextId(), Client = Name, Tenant = Tenant, Instance = instance, Kind = OperationKind.Register, Pool = pool, WorkerId = worker, Capacity = capacity, InvokedAt = Now },
            HttpMethod.Put, $"v1/pools/{pool}/workers/{worker}",
            $"{{\"address\":\"10.1.{capacity % 250}.{worker.Length % 250}:3389\",\"capacity\":{capacity.ToString(CultureInfo.InvariantCulture)}{(tags is { Count: > 0 } ? ",\"tags\":" + JsonSerializer.Serialize(tags) : "")}}}");

    public Task<Operation> RegisterBatchAsync(int instance, string pool, IReadOnlyList<(string Worker, int Capacity)> workers) =>
        SendAsync(new Operation { Id = _history.NextId(), Client = Name, Tenant = Tenant, Instance = instance, Kind = OperationKind.RegisterBatch, Pool = pool, InvokedAt = Now, Detail = $"{workers.Count} workers" },
            HttpMethod.Post, $"v1/pools/{pool}/workers",
            "{\"workers\":[" + string.Join(',', workers.Select(w => $"{{\"workerId\":\"{w.Worker}\",\"address\":\"10.2.0.1:3389\",\"capacity\":{w.Capacity.ToString(CultureInfo.InvariantCulture)}}}")) + "]}");

    public Task<Operation> DeregisterAsync(int instance, string pool, string worker) =>
        SendAsync(new Operation { Id = _history.NextId(), Client = Name, Tenant = Tenant, Instance = instance, Kind = OperationKind.Deregister, Pool = pool, WorkerId = worker, InvokedAt = Now },
            HttpMethod.Delete, $"v1/pools/{pool}/workers/{worker}", null);

    public Task<Operation> DrainAsync(int instance, string pool, string worker) =>
        SendAsync(new Operation { Id = _history.NextId(), Client = Name, Tenant = Tenant, Instance = instance, Kind = OperationKind.Drain, Pool = pool, WorkerId = worker, InvokedAt = Now },
            HttpMethod.Post, $"v1/pools/{pool}/workers/{worker}/drain", null);

    public Task<Operation> UndrainAsync(int instance, string pool, string worker) =>
        SendAsync(new Operation { Id = _history.NextId(), Client = Name, Tenant = Tenant, Instance = instance, Kind = OperationKind.Undrain, Pool = pool, WorkerId = worker, InvokedAt = Now },
            HttpMethod.Post, $"v1/pools/{pool}/workers/{worker}/undrain", null);

    public Task<Operation> ReportLoadAsync(int instance, string pool, string worker, long epoch, int loadIndex, bool knownStale = false) =>
        SendAsync(new Operation { Id = _history.NextId(), Client = Name, Tenant = Tenant, Instance = instance, Kind = OperationKind.ReportLoad, Pool = pool, WorkerId = worker, Epoch = epoch, KnownStale = knownStale, InvokedAt = Now, Detail = $"loadIndex {loadIndex}" },
            HttpMethod.Post, $"v1/pools/{pool}/workers/{worker}/load", $"{{\"epoch\":{epoch.ToString(CultureInfo.InvariantCulture)},\"loadIndex\":{loadIndex.ToString(CultureInfo.InvariantCulture)}}}");

    /// <summary>The id of the silo hosting a pool's grain (address:port@generation), or null.</summary>
    public async Task<string?> GrainSiloAsync(int instance, string pool) =>
        await ReadPoolAsync(instance, pool, root => root.TryGetProperty("grainSilo", out var silo) ? silo.GetString() : null);

    /// <summary>The pool's demand as the service answers it (issue 49): the <c>demand</c> member's JSON, or null.</summary>
    public async Task<string?> DemandAsync(int instance, string pool) =>
        await ReadPoolAsync(instance, pool, root => root.TryGetProperty("demand", out var demand) && demand.ValueKind == JsonValueKind.Object ? demand.GetRawText() : null);

    private async Task<string?> ReadPoolAsync(int instance, string pool, Func<JsonElement, string?> read)
    {
        using var request = new HttpRequestMessage(HttpMethod.Get, new Uri(_instances[instance], $"v1/pools/{pool}"));
        request.Headers.Add("X-Api-Key", _apiKey);
        try
        {
            using var timeout = new CancellationTokenSource(Timeout);
            using var response = await _http.SendAsync(request, timeout.Token);
            if (!response.IsSuccessStatusCode)
            {
                return null;
            }

            using var json = JsonDocument.Parse(await response.Content.ReadAsStringAsync(timeout.Token));
            return read(json.RootElement);
        }
        catch (Exception ex) when (ex is HttpRequestException or OperationCanceledException)
        {
            return null;
        }
    }

    /// <summary>The problem of a call whose (last) connection was refused: go to another instance.</summary>
    public const string Refused = "refused";

    private static DateTimeOffset Now => TimeProvider.System.GetUtcNow();

    internal static bool IsRefused(HttpRequestException exception) =>
        exception.InnerException is System.Net.Sockets.SocketException { SocketErrorCode: System.Net.Sockets.SocketError.ConnectionRefused };

    private async Task<Operation> SendAsync(Operation operation, HttpMethod method, string path, string? json, string? idempotencyKey = null)
    {
        _history.Add(operation);
        using var request = new HttpRequestMessage(method, new Uri(_instances[operation.Instance], path));
        request.Headers.Add("X-Api-Key", _apiKey);
        request.Headers.Accept.Add(new MediaTypeWithQualityHeaderValue("application/json"));
        if (idempotencyKey is not null)
        {
            request.Headers.Add("Idempotency-Key", idempotencyKey);
        }

        if (json is not null)
        {
            request.Content = new StringContent(json, Encoding.UTF8, "application/json");
        }

        var clock = Stopwatch.StartNew();
        using var timeout = new CancellationTokenSource(Timeout);
        try
        {
            using var response = await _http.SendAsync(request, timeout.Token);
            var text = await response.Content.ReadAsStringAsync(timeout.Token);
            operation.Status = (int)response.StatusCode;
            operation.RetryAfter = response.Headers.RetryAfter is { Delta: { } delta } ? delta : response.Headers.RetryAfter is null ? null : TimeSpan.Zero;
            Classify(operation, text);
        }
        catch (OperationCanceledException) when (timeout.IsCancellationRequested)
        {
            operation.Outcome = Outcome.Unknown;
            operation.ClientTimeout = true;
            operation.Problem = "client-timeout";
        }
        catch (HttpRequestException ex) when (IsRefused(ex))
        {
            // The instance is not listening (stopped, killed, or not started yet): a load balancer,
            // or the caller, goes to another at once. The outcome stays unknown, though: when a
            // pooled connection breaks before any answer, SocketsHttpHandler sends the request
            // again on a new connection by itself, so a refusal can follow a first send that
            // the instance carried out before it died (seen in kill-instance: a release that
            // committed, recorded as refused, then its repeat answered "already ended").
            operation.Outcome = Outcome.Unknown;
            operation.Problem = Refused;
        }
        catch (HttpRequestException ex)
        {
            // The connection broke after the request may have been sent: reset, or closed
            // before the whole answer came.
            operation.Outcome = Outcome.Unknown;
            operation.Problem = "no-answer";
            operation.Detail = ex.HttpRequestError.ToString();
        }

        operation.Duration = clock.Elapsed;
        operation.CompletedAt = Now;
        return operation;
    }

    internal static void Classify(Operation operation, string text)
    {
        var status = operation.Status;
        JsonElement root = default;
        JsonDocument? document = null;
        try
        {
            if (text.Length > 0)
            {
                document = JsonDocument.Parse(text);
                root = document.RootElement;
            }
        }
        catch (JsonException)
        {
            operation.Detail = "unreadable body";
        }

        using (document)
        {
            if (status is >= 200 and < 300)
            {
                operation.Outcome = Outcome.Ok;
                if (document is null)
                {
                    return;
                }

                if (operation.Kind is OperationKind.Allocate or OperationKind.Renew or OperationKind.GetAllocation)
                {
                    if (operation.Pools is not null)
                    {
                        operation.AnsweredPool = root.GetProperty("poolId").GetString();
                    }

                    operation.Allocation = new AllocationReply(
                        root.GetProperty("allocationId").GetGuid(),
                        root.GetProperty("workerId").GetString()!,
                        root.GetProperty("units").GetInt32(),
                        root.GetProperty("epoch").GetInt64(),
                        root.GetProperty("createdAt").GetDateTimeOffset(),
                        root.GetProperty("expiresAt").ValueKind == JsonValueKind.Null ? null : root.GetProperty("expiresAt").GetDateTimeOffset(),
                        root.GetProperty("active").GetBoolean());
                }
                else if (operation.Kind == OperationKind.Register)
                {
                    operation.WorkerEpoch = root.GetProperty("worker").GetProperty("epoch").GetInt64();
                    operation.Detail = root.GetProperty("status").GetString();
                }

                return;
            }

            var type = document is not null && root.ValueKind == JsonValueKind.Object && root.TryGetProperty("type", out var t) ? t.GetString() : null;
            operation.Problem = type is null ? $"status-{status}" : type[(type.LastIndexOf('/') + 1)..];
            if (document is not null && root.ValueKind == JsonValueKind.Object && root.TryGetProperty("detail", out var detail))
            {
                operation.Detail = detail.GetString();
            }

            operation.Outcome = status switch
            {
                503 when operation.Problem == "unavailable" => Outcome.Fail,
                500 or 502 or 503 or 504 => Outcome.Unknown,
                _ => Outcome.Fail,
            };
        }
    }

    public void Dispose() => _http.Dispose();
}
