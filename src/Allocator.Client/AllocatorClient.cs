using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using System.Text.Json.Serialization.Metadata;

namespace Allocator.Client;

/// <summary>
/// Typed client of the Allocator /v1 API for session brokers, workers and operators. Thread-safe;
/// share one instance per <see cref="HttpClient"/>. Every failure other than "no capacity" on
/// <see cref="AllocateAsync"/> throws <see cref="AllocatorApiException"/> carrying the problem details.
/// </summary>
public sealed class AllocatorClient
{
    public const string ApiKeyHeader = "X-Api-Key";
    public const string IdempotencyKeyHeader = "Idempotency-Key";

    /// <summary>
    /// Set on the requests that are safe to send again after a 429 or 503: allocate (with its
    /// idempotency key, a repeat returns the allocation that committed), release and renew
    /// (fenced by the epoch). The retry handler of <c>AddAllocatorClient</c> retries only these.
    /// </summary>
    public static readonly HttpRequestOptionsKey<bool> SafeToRetry = new("Allocator.SafeToRetry");

    /// <summary>Set by the retry handler on a request it sent again.</summary>
    internal static readonly HttpRequestOptionsKey<bool> Retried = new("Allocator.Retried");

    private readonly HttpClient _http;
    private readonly string? _apiKey;

    /// <param name="http">Its <see cref="HttpClient.BaseAddress"/> must be the service root, e.g. <c>http://127.0.0.1:5080/</c>.</param>
    /// <param name="apiKey">Sent as <c>X-Api-Key</c> on every request; null when auth is off.</param>
    public AllocatorClient(HttpClient http, string? apiKey = null)
    {
        ArgumentNullException.ThrowIfNull(http);
        if (http.BaseAddress is null)
        {
            throw new ArgumentException("The HttpClient needs a BaseAddress (the service root).", nameof(http));
        }

        _http = http;
        _apiKey = apiKey;
    }

    // Pools

    public Task<PoolInfo> PutPoolAsync(string pool, PoolSettings settings, CancellationToken cancellationToken = default) =>
        SendAsync(HttpMethod.Put, PoolPath(pool), settings, ClientJsonContext.Default.PoolSettings, ClientJsonContext.Default.PoolInfo, cancellationToken);

    public Task<PoolStatistics> GetPoolAsync(string pool, CancellationToken cancellationToken = default) =>
        SendAsync<object, PoolStatistics>(HttpMethod.Get, PoolPath(pool), null, null, ClientJsonContext.Default.PoolStatistics, cancellationToken);

    // Workers

    public Task<RegistrationResult> RegisterWorkerAsync(string pool, string worker, WorkerRegistration registration, CancellationToken cancellationToken = default) =>
        SendAsync(HttpMethod.Put, WorkerPath(pool, worker), registration, ClientJsonContext.Default.WorkerRegistration, ClientJsonContext.Default.RegistrationResult, cancellationToken);

    public async Task<IReadOnlyList<RegistrationResult>> RegisterWorkersAsync(string pool, IReadOnlyList<WorkerBatchEntry> workers, CancellationToken cancellationToken = default)
    {
        var result = await SendAsync(HttpMethod.Post, PoolPath(pool) + "/workers", new WorkerBatch(workers),
            ClientJsonContext.Default.WorkerBatch, ClientJsonContext.Default.WorkerBatchResult, cancellationToken).ConfigureAwait(false);
        return result.Results;
    }

    public Task<WorkerInfo> GetWorkerAsync(string pool, string worker, CancellationToken cancellationToken = default) =>
        SendAsync<object, WorkerInfo>(HttpMethod.Get, WorkerPath(pool, worker), null, null, ClientJsonContext.Default.WorkerInfo, cancellationToken);

    public async Task<IReadOnlyList<WorkerInfo>> GetWorkersAsync(string pool, CancellationToken cancellationToken = default) =>
        await SendAsync<object, WorkerInfo[]>(HttpMethod.Get, PoolPath(pool) + "/workers", null, null, ClientJsonContext.Default.WorkerInfoArray, cancellationToken).ConfigureAwait(false);

    public Task<DeregistrationResult> DeregisterWorkerAsync(string pool, string worker, CancellationToken cancellationToken = default) =>
        SendAsync<object, DeregistrationResult>(HttpMethod.Delete, WorkerPath(pool, worker), null, null, ClientJsonContext.Default.DeregistrationResult, cancellationToken);

    public Task DrainWorkerAsync(string pool, string worker, CancellationToken cancellationToken = default) =>
        SendAsync<object, object>(HttpMethod.Post, WorkerPath(pool, worker) + "/drain", null, null, null, cancellationToken);

    public Task UndrainWorkerAsync(string pool, string worker, CancellationToken cancellationToken = default) =>
        SendAsync<object, object>(HttpMethod.Post, WorkerPath(pool, worker) + "/undrain", null, null, null, cancellationToken);

    /// <summary>Heartbeat with an optional load index (0–10000); <paramref name="epoch"/> is the worker's registration epoch.</summary>
    public Task ReportLoadAsync(string pool, string worker, long epoch, int? loadIndex = null, CancellationToken cancellationToken = default) =>
        SendAsync<LoadReport, object>(HttpMethod.Post, WorkerPath(pool, worker) + "/load", new LoadReport(epoch, loadIndex), ClientJsonContext.Default.LoadReport, null, cancellationToken);

    // Allocations

    /// <summary>
    /// Allocates on the least-loaded eligible worker. Retrying with the same
    /// <paramref name="idempotencyKey"/> returns the same allocation (<see cref="AllocateStatus.Existing"/>).
    /// "No capacity" is a result, not an exception.
    /// </summary>
    public async Task<AllocateResult> AllocateAsync(string pool, AllocateRequest request, string idempotencyKey, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(request);
        ArgumentException.ThrowIfNullOrEmpty(idempotencyKey);
        using var message = NewRequest(HttpMethod.Post, PoolPath(pool) + "/allocations");
        message.Headers.TryAddWithoutValidation(IdempotencyKeyHeader, idempotencyKey);
        message.Options.Set(SafeToRetry, true);
        message.Content = JsonContent.Create(request, ClientJsonContext.Default.AllocateRequest);
        return await SendAllocateAsync(message, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// Allocates in the first of <paramref name="pools"/> (1 to 8, in order of preference) with
    /// room; <see cref="AllocationInfo.PoolId"/> says which answered. The idempotency key stays one
    /// allocation across the whole list: a retry with the same key and pools returns it wherever
    /// it was made. With <see cref="AllocateRequest.MaxWaitMs"/>, a request that finds every pool
    /// full waits in all of them and is served by the first to free a slot. A service before
    /// 1.1.0 answers 404 (<see cref="AllocatorApiException"/>).
    /// </summary>
    public async Task<AllocateResult> AllocateAnyAsync(IReadOnlyList<string> pools, AllocateRequest request, string idempotencyKey, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(pools);
        ArgumentNullException.ThrowIfNull(request);
        ArgumentException.ThrowIfNullOrEmpty(idempotencyKey);
        using var message = NewRequest(HttpMethod.Post, "v1/allocations");
        message.Headers.TryAddWithoutValidation(IdempotencyKeyHeader, idempotencyKey);
        message.Options.Set(SafeToRetry, true);
        var body = new AllocateAnyBody(pools, request.Units, request.Tags, request.MaxWaitMs, request.LeaseSeconds);
        message.Content = JsonContent.Create(body, ClientJsonContext.Default.AllocateAnyBody);
        return await SendAllocateAsync(message, cancellationToken).ConfigureAwait(false);
    }

    private async Task<AllocateResult> SendAllocateAsync(HttpRequestMessage message, CancellationToken cancellationToken)
    {
        using var response = await _http.SendAsync(message, HttpCompletionOption.ResponseHeadersRead, cancellationToken).ConfigureAwait(false);
        switch (response.StatusCode)
        {
            case HttpStatusCode.Created:
            case HttpStatusCode.OK:
                var allocation = await ReadAsync(response, ClientJsonContext.Default.AllocationInfo, cancellationToken).ConfigureAwait(false);
                return new AllocateResult(response.StatusCode == HttpStatusCode.Created ? AllocateStatus.Allocated : AllocateStatus.Existing, allocation, null);
            default:
                var error = await AllocatorApiException.FromResponseAsync(response, cancellationToken).ConfigureAwait(false);
                if (error.Type == ProblemTypes.NoCapacity)
                {
                    return new AllocateResult(AllocateStatus.NoCapacity, null, error.Detail);
                }

                throw error;
        }
    }

    public Task<AllocationInfo> GetAllocationAsync(string pool, Guid allocationId, CancellationToken cancellationToken = default) =>
        SendAsync<object, AllocationInfo>(HttpMethod.Get, AllocationPath(pool, allocationId), null, null, ClientJsonContext.Default.AllocationInfo, cancellationToken);

    /// <summary>Releases an allocation; <paramref name="epoch"/> must be its current epoch (stale: problem type stale-epoch).</summary>
    /// <remarks>
    /// When the retry handler sent the release again (after a 503 whose outcome was unknown) and the
    /// repeat finds the allocation already ended, the release is reported as done: the first
    /// attempt committed, or the allocation ended anyway (lease expiry, deregistration) and its
    /// slots are free either way.
    /// </remarks>
    public Task ReleaseAsync(string pool, Guid allocationId, long epoch, CancellationToken cancellationToken = default) =>
        SendAsync<object, object>(HttpMethod.Delete, AllocationPath(pool, allocationId) + "?epoch=" + epoch.ToString(CultureInfo.InvariantCulture), null, null, null, cancellationToken, safeToRetry: true);

    /// <summary>Extends the lease from now; the answer carries the new epoch to use from then on.</summary>
    public Task<AllocationInfo> RenewAsync(string pool, Guid allocationId, long epoch, int? leaseSeconds = null, CancellationToken cancellationToken = default) =>
        SendAsync(HttpMethod.Post, AllocationPath(pool, allocationId) + "/renew", new RenewRequest(epoch, leaseSeconds),
            ClientJsonContext.Default.RenewRequest, ClientJsonContext.Default.AllocationInfo, cancellationToken, safeToRetry: true);

    // Health

    /// <summary>True when <c>/health/ready</c> answers 200 (the store answers).</summary>
    public async Task<bool> IsReadyAsync(CancellationToken cancellationToken = default)
    {
        using var response = await _http.GetAsync("health/ready", cancellationToken).ConfigureAwait(false);
        return response.IsSuccessStatusCode;
    }

    private async Task<TResponse> SendAsync<TRequest, TResponse>(
        HttpMethod method,
        string path,
        TRequest? body,
        JsonTypeInfo<TRequest>? requestType,
        JsonTypeInfo<TResponse>? responseType,
        CancellationToken cancellationToken,
        bool safeToRetry = false)
    {
        using var message = NewRequest(method, path);
        if (safeToRetry)
        {
            message.Options.Set(SafeToRetry, true);
        }

        if (body is not null && requestType is not null)
        {
            message.Content = JsonContent.Create(body, requestType);
        }

        using var response = await _http.SendAsync(message, HttpCompletionOption.ResponseHeadersRead, cancellationToken).ConfigureAwait(false);
        if (!response.IsSuccessStatusCode)
        {
            var error = await AllocatorApiException.FromResponseAsync(response, cancellationToken).ConfigureAwait(false);
            if (method == HttpMethod.Delete && safeToRetry && error.Type == ProblemTypes.Conflict
                && message.Options.TryGetValue(Retried, out var retried) && retried)
            {
                return default!;
            }

            throw error;
        }

        return responseType is null ? default! : await ReadAsync(response, responseType, cancellationToken).ConfigureAwait(false);
    }

    private static async Task<T> ReadAsync<T>(HttpResponseMessage response, JsonTypeInfo<T> type, CancellationToken cancellationToken) =>
        await response.Content.ReadFromJsonAsync(type, cancellationToken).ConfigureAwait(false)
            ?? throw new AllocatorApiException(response.StatusCode, new Problem { Detail = "The service answered with an empty body." });

    private HttpRequestMessage NewRequest(HttpMethod method, string path)
    {
        var message = new HttpRequestMessage(method, new Uri(path, UriKind.Relative));
        if (_apiKey is not null)
        {
            message.Headers.TryAddWithoutValidation(ApiKeyHeader, _apiKey);
        }

        return message;
    }

    private static string PoolPath(string pool) => "v1/pools/" + Uri.EscapeDataString(pool);

    private static string WorkerPath(string pool, string worker) => PoolPath(pool) + "/workers/" + Uri.EscapeDataString(worker);

    private static string AllocationPath(string pool, Guid allocationId) => PoolPath(pool) + "/allocations/" + allocationId.ToString("D");
}
