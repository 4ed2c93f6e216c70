using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using System.Text.RegularExpressions;
using Allocator.Client;
using Allocator.Reliability.History;
using Microsoft.Extensions.DependencyInjection;

namespace Allocator.Reliability.Workload;

/// <summary>
/// Session brokers on the .NET client as a broker application registers it
/// (<c>AddAllocatorClient</c>: retries 429 and 503 after <c>Retry-After</c>, allocate with its
/// idempotency key), in front of the cluster's instances like a load balancer that can take one
/// out of rotation (<see cref="Avoid"/>). Every HTTP attempt is recorded in the history for the
/// checker; a call the client gives up on (an exception) is a failed call.
/// </summary>
internal sealed partial class ClientBrokers : IDisposable
{
    private readonly ServiceProvider _services;
    private readonly HistoryRecorder _history;
    private readonly IReadOnlyList<Uri> _instances;
    private readonly string _prefix;
    private readonly string _tenant;
    private readonly int _clients;
    private readonly int? _maxWaitMs;
    private readonly SessionPace? _pace;
    private readonly List<string> _failures = [];
    private long _allocated;
    private long _failed;
    private readonly long[] _unansweredBy;
    private volatile int _avoid = -1;

    /// <param name="tenant">The tenant of <paramref name="apiKey"/>, as the history records each call.</param>
    /// <param name="maxWait">How long an allocation may wait for capacity in the pool's queue (none: answered at once).</param>
    /// <param name="pace">The scenario's pace: a turn before each session (none: as fast as answers come).</param>
    public ClientBrokers(HistoryRecorder history, IReadOnlyList<Uri> instances, string apiKey, string prefix, int clients, string tenant = Cluster.HostCluster.ApiKeyTenant, TimeSpan? maxWait = null, SessionPace? pace = null)
    {
        _pace = pace;
        _history = history;
        _instances = instances;
        _unansweredBy = new long[instances.Count];
        _prefix = prefix;
        _tenant = tenant;
        _clients = clients;
        _maxWaitMs = maxWait is { } wait ? (int)wait.TotalMilliseconds : null;
        var services = new ServiceCollection();
        services.AddAllocatorClient(o =>
        {
            o.BaseAddress = new Uri("http://allocator.invalid/"); // the router picks the instance
            o.ApiKey = apiKey;
            o.Timeout = TimeSpan.FromSeconds(60);
        })
        .AddHttpMessageHandler(() => new Router(this))
        .AddHttpMessageHandler(() => new Recorder(this));
        _services = services.BuildServiceProvider();
    }

    /// <summary>An instance to send nothing to (taken out of rotation), or -1.</summary>
    public int Avoid
    {
        get => _avoid;
        set => _avoid = value;
    }

    public long Allocated => Interlocked.Read(ref _allocated);

    /// <summary>Calls the client gave up on: exceptions out of <see cref="AllocatorClient"/>.</summary>
    public long Failed => Interlocked.Read(ref _failed);

    /// <summary>
    /// Failed calls that got no answer from the instance they were sent to (a reset or refused
    /// connection: the instance exited under them), by instance.
    /// </summary>
    public long UnansweredBy(int instance) => Interlocked.Read(ref _unansweredBy[instance]);

    public IReadOnlyList<string> Failures
    {
        get
        {
            lock (_failures)
            {
                return [.. _failures];
            }
        }
    }

    public Task RunAsync(string pool, CancellationToken stop) =>
        Task.WhenAll(Enumerable.Range(0, _clients).Select(i => Task.Run(() => BrokerAsync(pool, i, stop))));

    private async Task BrokerAsync(string pool, int index, CancellationToken stop)
    {
        var client = _services.GetRequiredService<AllocatorClient>();
        var random = new Random(HashCode.Combine(_prefix, index));
        for (var session = 0; !stop.IsCancellationRequested; session++)
        {
            if (_pace is not null && !await _pace.WaitTurnAsync(stop))
            {
                break;
            }

            var key = $"{_prefix}-{index}-{session}";
            var request = new AllocateRequest { LeaseSeconds = 30, MaxWaitMs = _maxWaitMs };

            // A failed call leaves the key unsettled: the broker asks again with the same key.
            AllocationInfo? held = null;
            for (var attempt = 0; held is null && attempt < 20; attempt++)
            {
                try
                {
                    var result = await client.AllocateAsync(pool, request, key, CancellationToken.None);
                    if (result.Allocation is not { Active: true } allocation)
                    {
                        // No capacity, or the key's allocation has ended: an attempt whose outcome was
                        // unknown (its caller gave up while its batch was in the store) committed, and the
                        // service released it for the caller that was gone. Nothing is held: the next session.
                        break;
                    }

                    held = allocation;
                }
                catch (Exception ex) when (ex is AllocatorApiException or HttpRequestException or TaskCanceledException)
                {
                    Fail($"allocate {key}", ex);
                }
            }

            if (held is null)
            {
                continue;
            }

            Interlocked.Increment(ref _allocated);
            await Task.Delay(random.Next(20, 150), CancellationToken.None);
            var unanswered = false;
            for (var attempt = 0; attempt < 20; attempt++)
            {
                try
                {
                    await client.ReleaseAsync(pool, held.AllocationId, held.Epoch, CancellationToken.None);
                    break;
                }
                catch (AllocatorApiException ex) when (unanswered && ex.Type == ProblemTypes.Conflict)
                {
                    // A release whose answer was lost (the instance exited under it), repeated, found
                    // the allocation ended: the first attempt committed (docs/api.md), as the client
                    // itself concludes when its own retry meets this.
                    break;
                }
                catch (Exception ex) when (ex is AllocatorApiException or HttpRequestException or TaskCanceledException)
                {
                    unanswered = ex is HttpRequestException or TaskCanceledException;
                    Fail($"release {held.AllocationId}", ex);
                }
            }
        }
    }

    private void Fail(string what, Exception ex)
    {
        Interlocked.Increment(ref _failed);
        if (ex is HttpRequestException && ex.Data[UnansweredInstance] is int instance && instance >= 0)
        {
            Interlocked.Increment(ref _unansweredBy[instance]);
        }

        lock (_failures)
        {
            if (_failures.Count < 5)
            {
                _failures.Add(string.Create(CultureInfo.InvariantCulture, $"{TimeProvider.System.GetUtcNow():HH:mm:ss.fff} {what}: {ex.GetType().Name}: {ex.Message}"));
            }
        }
    }

    public void Dispose() => _services.Dispose();

    /// <summary>Sends each request to an instance in rotation, at random.</summary>
    private sealed class Router(ClientBrokers owner) : DelegatingHandler
    {
        protected override Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        {
            var count = owner._instances.Count;
            var avoid = owner.Avoid;
            var pick = Random.Shared.Next(avoid >= 0 ? count - 1 : count);
            if (avoid >= 0 && pick >= avoid)
            {
                pick++;
            }

            var target = new UriBuilder(request.RequestUri!) { Host = owner._instances[pick].Host, Port = owner._instances[pick].Port };
            request.RequestUri = target.Uri;
            request.Options.Set(InstanceKey, pick);
            return base.SendAsync(request, cancellationToken);
        }
    }

    private static readonly HttpRequestOptionsKey<int> InstanceKey = new("allocator.instance");

    /// <summary>The key under which a call that got no answer carries its instance (<see cref="Exception.Data"/>).</summary>
    private const string UnansweredInstance = "allocator.unanswered-instance";

    /// <summary>Records each attempt (allocate and release) in the history, as the raw clients do.</summary>
    private sealed partial class Recorder(ClientBrokers owner) : DelegatingHandler
    {
        protected override async Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        {
            var operation = await DescribeAsync(request, cancellationToken);
            if (operation is null)
            {
                return await base.SendAsync(request, cancellationToken);
            }

            owner._history.Add(operation);
            var clock = Stopwatch.StartNew();
            try
            {
                var response = await base.SendAsync(request, cancellationToken);
                await response.Content.LoadIntoBufferAsync(cancellationToken);
                operation.Status = (int)response.StatusCode;
                operation.RetryAfter = response.Headers.RetryAfter is { Delta: { } delta } ? delta : response.Headers.RetryAfter is null ? null : TimeSpan.Zero;
                ApiClient.Classify(operation, await response.Content.ReadAsStringAsync(cancellationToken));
                return response;
            }
            catch (HttpRequestException ex)
            {
                operation.Outcome = Outcome.Unknown; // even when refused: see ApiClient.SendAsync
                operation.Problem = ApiClient.IsRefused(ex) ? ApiClient.Refused : "no-answer";
                operation.Detail = ex.HttpRequestError.ToString();
                ex.Data[UnansweredInstance] = operation.Instance;
                throw;
            }
            catch (OperationCanceledException)
            {
                operation.Outcome = Outcome.Unknown;
                operation.ClientTimeout = true;
                operation.Problem = "client-timeout";
                throw;
            }
            finally
            {
                operation.Duration = clock.Elapsed;
                operation.CompletedAt = TimeProvider.System.GetUtcNow();
            }
        }

        private async Task<Operation?> DescribeAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        {
            var path = request.RequestUri!.AbsolutePath;
            var instance = request.Options.TryGetValue(InstanceKey, out var i) ? i : -1;
            var now = TimeProvider.System.GetUtcNow();
            if (request.Method == HttpMethod.Post && AllocatePath().Match(path) is { Success: true } allocate)
            {
                using var body = JsonDocument.Parse(await request.Content!.ReadAsStringAsync(cancellationToken));
                var root = body.RootElement;
                return new Operation
                {
                    Id = owner._history.NextId(),
                    Client = owner._prefix,
                    Tenant = owner._tenant,
                    Instance = instance,
                    Kind = OperationKind.Allocate,
                    Pool = allocate.Groups["pool"].Value,
                    Key = request.Headers.GetValues("Idempotency-Key").Single(),
                    Units = root.TryGetProperty("units", out var units) && units.ValueKind == JsonValueKind.Number ? units.GetInt32() : 1,
                    Lease = root.TryGetProperty("leaseSeconds", out var lease) && lease.ValueKind == JsonValueKind.Number ? TimeSpan.FromSeconds(lease.GetInt32()) : null,
                    MaxWait = root.TryGetProperty("maxWaitMs", out var wait) && wait.ValueKind == JsonValueKind.Number ? TimeSpan.FromMilliseconds(wait.GetInt32()) : TimeSpan.Zero,
                    InvokedAt = now,
                };
            }

            if (request.Method == HttpMethod.Delete && ReleasePath().Match(path) is { Success: true } release)
            {
                var epoch = long.Parse(request.RequestUri.Query.TrimStart('?').Split('&').Single(p => p.StartsWith("epoch=", StringComparison.Ordinal))["epoch=".Length..], CultureInfo.InvariantCulture);
                return new Operation
                {
                    Id = owner._history.NextId(),
                    Client = owner._prefix,
                    Tenant = owner._tenant,
                    Instance = instance,
                    Kind = OperationKind.Release,
                    Pool = release.Groups["pool"].Value,
                    AllocationId = Guid.Parse(release.Groups["id"].Value),
                    Epoch = epoch,
                    InvokedAt = now,
                };
            }

            return null;
        }

        [GeneratedRegex("^/v1/pools/(?<pool>[^/]+)/allocations$")]
        private static partial Regex AllocatePath();

        [GeneratedRegex("^/v1/pools/(?<pool>[^/]+)/allocations/(?<id>[0-9a-f-]{36})$")]
        private static partial Regex ReleasePath();
    }
}
