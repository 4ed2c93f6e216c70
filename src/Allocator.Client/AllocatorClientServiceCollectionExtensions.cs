using System.Net;
using Allocator.Client;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Http.Resilience;
using Microsoft.Extensions.Options;
using Polly;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Registers <see cref="AllocatorClient"/> on <c>IHttpClientFactory</c>.</summary>
public static class AllocatorClientServiceCollectionExtensions
{
    /// <summary>The name of the <see cref="HttpClient"/> the client is built on (and of its options).</summary>
    public const string HttpClientName = "Allocator.Client";

    /// <summary>
    /// Registers a typed <see cref="AllocatorClient"/> on <c>IHttpClientFactory</c>: base address,
    /// <c>X-Api-Key</c> and timeout from <paramref name="configure"/> (validated when the first
    /// client is created), and a retry handler (Microsoft.Extensions.Http.Resilience) that honours
    /// <c>Retry-After</c> on 429 and 503 for the calls that are safe to repeat only: allocate (it
    /// carries its idempotency key), release and renew. At most <see cref="AllocatorClientOptions.MaxRetries"/>
    /// retries, never a <c>Retry-After</c> above <see cref="AllocatorClientOptions.MaxRetryAfter"/>,
    /// all within <see cref="AllocatorClientOptions.Timeout"/>. Every other call fails on its first
    /// 429 or 503.
    /// </summary>
    /// <returns>The client's builder, to add handlers (added handlers run inside the retry: once per attempt).</returns>
    public static IHttpClientBuilder AddAllocatorClient(this IServiceCollection services, Action<AllocatorClientOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(services);
        ArgumentNullException.ThrowIfNull(configure);
        services.AddOptions<AllocatorClientOptions>(HttpClientName).Configure(configure);
        services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<AllocatorClientOptions>, OptionsValidator>());

        var builder = services.AddHttpClient(HttpClientName)
            .ConfigureHttpClient((sp, http) =>
            {
                var options = Options(sp);
                http.BaseAddress = options.BaseAddress;
                http.Timeout = options.Timeout;
                if (options.ApiKey is not null)
                {
                    http.DefaultRequestHeaders.TryAddWithoutValidation(AllocatorClient.ApiKeyHeader, options.ApiKey);
                }
            });
        builder.AddResilienceHandler("retry-after", (pipeline, context) =>
        {
            var options = Options(context.ServiceProvider);
            pipeline.AddRetry(new HttpRetryStrategyOptions
            {
                MaxRetryAttempts = Math.Max(1, options.MaxRetries),
                ShouldRetryAfterHeader = false,
                ShouldHandle = args => ValueTask.FromResult(
                    options.MaxRetries > 0
                    && args.Outcome.Result is { } response
                    && ShouldRetry(response, options)),
                DelayGenerator = args => ValueTask.FromResult<TimeSpan?>(
                    args.Outcome.Result is { } response ? RetryDelay(response, options) : options.DefaultRetryDelay),
                OnRetry = args =>
                {
                    args.Outcome.Result?.RequestMessage?.Options.Set(AllocatorClient.Retried, true);
                    return ValueTask.CompletedTask;
                },
            });
        });
        builder.AddTypedClient(http => new AllocatorClient(http));
        return builder;
    }

    private sealed class OptionsValidator : IValidateOptions<AllocatorClientOptions>
    {
        public ValidateOptionsResult Validate(string? name, AllocatorClientOptions options) =>
            name != HttpClientName ? ValidateOptionsResult.Skip
            : options.Validate() is { Count: > 0 } errors ? ValidateOptionsResult.Fail(errors)
            : ValidateOptionsResult.Success;
    }

    private static AllocatorClientOptions Options(IServiceProvider services) =>
        services.GetRequiredService<IOptionsMonitor<AllocatorClientOptions>>().Get(HttpClientName);

    /// <summary>A 429 or 503 to a call marked safe to repeat, whose wait is within the budget.</summary>
    internal static bool ShouldRetry(HttpResponseMessage response, AllocatorClientOptions options) =>
        response.StatusCode is HttpStatusCode.TooManyRequests or HttpStatusCode.ServiceUnavailable
        && response.RequestMessage is { } request
        && request.Options.TryGetValue(AllocatorClient.SafeToRetry, out var safe) && safe
        && RetryDelay(response, options) <= options.MaxRetryAfter;

    /// <summary><c>Retry-After</c> (seconds or a date), else the default delay.</summary>
    internal static TimeSpan RetryDelay(HttpResponseMessage response, AllocatorClientOptions options) =>
        response.Headers.RetryAfter switch
        {
            { Delta: { } delta } => delta,
            { Date: { } date } when response.Headers.Date is { } now => date - now > TimeSpan.Zero ? date - now : TimeSpan.Zero,
            _ => options.DefaultRetryDelay,
        };
}
