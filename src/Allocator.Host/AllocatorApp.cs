using System.Globalization;
using System.Text.Json.Serialization;
using System.Threading.RateLimiting;
using Allocator.Host.Cluster;
using Allocator.Host.Api;
using Allocator.Host.Auth;
using Allocator.Host.Lifecycle;
using Allocator.Host.Options;
using Allocator.Host.Storage;
using Allocator.Host.Telemetry;
using Microsoft.AspNetCore.Http.Timeouts;
using Microsoft.AspNetCore.RateLimiting;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using Microsoft.Extensions.Options;

namespace Allocator.Host;

/// <summary>Builds the Allocator web application; <c>Program</c> and the end-to-end tests share it.</summary>
internal static partial class AllocatorApp
{
    /// <summary>Largest request body accepted (1 MiB); larger ones get 413.</summary>
    public const long MaxRequestBodySize = 1024 * 1024;

    /// <param name="configure">
    /// A hook for tests and the load harness: runs after the default services are added and
    /// before the configured store is; a store registered here (e.g. with <c>AddAllocatorInMemory</c>)
    /// serves instead of the configured one, which is then never created.
    /// </param>
    public static WebApplication Build(string[] args, Action<WebApplicationBuilder>? configure = null)
    {
        var builder = WebApplication.CreateBuilder(args);
        if (builder.Configuration["ALLOCATOR_URLS"] is { Length: > 0 } urls && builder.Configuration["urls"] is null)
        {
            builder.WebHost.UseUrls(urls);
        }

        builder.WebHost.ConfigureKestrel(k =>
        {
            k.Limits.MaxRequestBodySize = MaxRequestBodySize;
            k.AddServerHeader = false;
        });
        builder.AddAllocatorTelemetry();
        builder.Services.AddAllocatorServices(builder.Configuration);
        builder.AddAllocatorSilo();
        configure?.Invoke(builder);
        builder.Services.AddConfiguredStore(builder.Configuration);
        var app = builder.Build();
        app.UseAllocatorPipeline();
        return app;
    }

    internal static IServiceCollection AddAllocatorServices(this IServiceCollection services, IConfiguration configuration)
    {
        services.TryAddTimeProvider();
        services.AddOptions<AllocatorTimeoutOptions>().Bind(configuration.GetSection(AllocatorTimeoutOptions.Section)).ValidateOnStart();
        var databases = ConfiguredDatabases.Read(configuration);
        services.AddSingleton(databases);
        services.AddOptions<AllocatorStorageOptions>().Bind(configuration.GetSection(AllocatorStorageOptions.Section))
            .PostConfigure(o => o.ConnectionString ??= databases.DefaultConnectionString).ValidateOnStart();
        services.AddOptions<AllocatorAuthOptions>().Bind(configuration.GetSection(AllocatorAuthOptions.Section)).ValidateOnStart();
        services.AddOptions<AllocatorRateLimitOptions>().Bind(configuration.GetSection(AllocatorRateLimitOptions.Section)).ValidateOnStart();
        services.AddSingleton<IValidateOptions<AllocatorTimeoutOptions>, TimeoutOptionsValidator>();
        services.AddSingleton<IValidateOptions<AllocatorStorageOptions>, StorageOptionsValidator>();
        services.AddSingleton<IValidateOptions<AllocatorAuthOptions>, AuthOptionsValidator>();
        services.AddSingleton<IValidateOptions<AllocatorRateLimitOptions>, RateLimitOptionsValidator>();
        services.AddSingleton<IValidateOptions<AllocatorClusterOptions>, AllocatorClusterOptionsValidator>();
        services.AddOptions<AllocatorDemandOptions>().Bind(configuration.GetSection(AllocatorDemandOptions.Section)).ValidateOnStart();
        services.AddSingleton<IValidateOptions<AllocatorDemandOptions>, DemandOptionsValidator>();


        services.AddSingleton<ApiKeyRegistry>();
        services.AddSingleton<ApiMetrics>();
        services.AddSingleton<PoolGauges>();
        services.AddHostedService<LeaseReaper>();
        services.AddSingleton<ReplicationWatch>();
        services.AddHostedService(sp => sp.GetRequiredService<ReplicationWatch>());
        services.AddHostedService<StartupReport>();
        services.AddHealthChecks()
            .AddCheck<StoreHealthCheck>(StoreHealthCheck.Name, tags: ["ready"])
            .AddCheck<DrainingHealthCheck>(DrainingHealthCheck.Name, tags: ["ready"]);
        services.AddGracefulStop(configuration);
        services.AddOpenApi(o =>
        {
            o.AddDocumentTransformer<ApiKeySecurityTransformer>();
            o.AddDocumentTransformer<ProblemTypesTransformer>();
            o.AddOperationTransformer<ProblemTypesTransformer>();
            o.AddOperationTransformer<ExamplesTransformer>();
        });
        services.AddProblemDetails(o => o.CustomizeProblemDetails = context =>
        {
            // Framework-made problems (no route, wrong method) get our stable types too.
            if (context.ProblemDetails.Type is null || context.ProblemDetails.Type.StartsWith("https://tools.ietf.org/", StringComparison.Ordinal))
            {
                var (type, title) = Problems.ForStatus(context.ProblemDetails.Status ?? context.HttpContext.Response.StatusCode);
                context.ProblemDetails.Type = type;
                context.ProblemDetails.Title = title;
            }

            context.ProblemDetails.Detail ??= Problems.DefaultDetail(context.ProblemDetails.Status ?? context.HttpContext.Response.StatusCode, context.HttpContext.Request);

            // A 503 is transient (the store or the grain could not answer in time): say when to
            // come back, so clients that honour Retry-After pace their retries.
            if ((context.ProblemDetails.Status ?? context.HttpContext.Response.StatusCode) == StatusCodes.Status503ServiceUnavailable
                && !context.HttpContext.Response.Headers.ContainsKey(Microsoft.Net.Http.Headers.HeaderNames.RetryAfter))
            {
                context.HttpContext.Response.Headers.RetryAfter = "1";
            }
        });

        services.ConfigureHttpJsonOptions(o =>
        {
            // Strict input: unknown members, numbers in strings, nulls for non-nullable members
            // and missing required members are all 400s, never silently ignored.
            o.SerializerOptions.UnmappedMemberHandling = JsonUnmappedMemberHandling.Disallow;
            o.SerializerOptions.NumberHandling = JsonNumberHandling.Strict;
            o.SerializerOptions.RespectNullableAnnotations = true;
            o.SerializerOptions.RespectRequiredConstructorParameters = true;
            o.SerializerOptions.AllowDuplicateProperties = false;
        });

        // Malformed bodies throw BadHttpRequestException, which ProblemMiddleware turns into a problem.
        services.Configure<RouteHandlerOptions>(o => o.ThrowOnBadRequest = true);

        services.AddRequestTimeouts();
        services.AddOptions<RequestTimeoutOptions>().Configure<IOptions<AllocatorTimeoutOptions>>((o, timeouts) =>
        {
            o.DefaultPolicy = new RequestTimeoutPolicy
            {
                Timeout = timeouts.Value.RequestTimeout,
                TimeoutStatusCode = StatusCodes.Status504GatewayTimeout,
                WriteTimeoutResponse = context => Problems.Make(StatusCodes.Status504GatewayTimeout, Problems.Timeout, "The request timed out.",
                    $"The request did not finish within {timeouts.Value.RequestTimeout.TotalSeconds:0.###} s.").ExecuteAsync(context),
            };
        });

        services.AddRateLimiter(_ => { });
        services.AddOptions<RateLimiterOptions>().Configure<IOptions<AllocatorRateLimitOptions>>((o, limits) =>
        {
            var settings = limits.Value;
            if (settings.Disabled)
            {
                // No limiter at all, so the middleware passes requests straight through: even a
                // no-op partition costs a lookup under the partitioned limiter's lock per request
                // (seen as lock contention in a CPU profile of wide-250 at 2,600 requests/s).
                return;
            }

            o.GlobalLimiter = PartitionedRateLimiter.Create<HttpContext, string>(context =>
            {
                if (context.GetEndpoint()?.Metadata.GetMetadata<ScopeRequirement>() is null)
                {
                    return RateLimitPartition.GetNoLimiter("open");
                }

                // Callers with a valid key each have a bucket; requests without one share a much
                // smaller bucket per client address, so bad keys cannot flood the service and
                // never drain a valid caller's bucket (even from the same address).
                var (partition, authenticated) = ApiKeyMiddleware.PartitionOf(context);
                return RateLimitPartition.GetTokenBucketLimiter(partition, _ => new TokenBucketRateLimiterOptions
                {
                    TokenLimit = authenticated ? settings.Burst : settings.UnauthenticatedBurst,
                    TokensPerPeriod = authenticated ? settings.PermitsPerSecond : settings.UnauthenticatedPermitsPerSecond,
                    ReplenishmentPeriod = TimeSpan.FromSeconds(1),
                    QueueLimit = 0,
                    AutoReplenishment = true,
                });
            });
            o.OnRejected = (rejected, cancellationToken) =>
            {
                var retryAfter = rejected.Lease.TryGetMetadata(MetadataName.RetryAfter, out var after) ? after : TimeSpan.FromSeconds(1);
                var seconds = Math.Max(1, (int)Math.Ceiling(retryAfter.TotalSeconds));
                rejected.HttpContext.Response.Headers.RetryAfter = seconds.ToString(CultureInfo.InvariantCulture);
                var detail = ApiKeyMiddleware.PartitionOf(rejected.HttpContext).Authenticated
                    ? $"This caller exceeded {settings.PermitsPerSecond} requests per second (burst {settings.Burst}); retry after {seconds} s."
                    : $"Too many requests without a valid API key from this address (more than {settings.UnauthenticatedPermitsPerSecond} per second, burst {settings.UnauthenticatedBurst}); retry after {seconds} s with a valid {ApiKeyMiddleware.HeaderName}.";
                return new ValueTask(Problems.Make(StatusCodes.Status429TooManyRequests, Problems.RateLimited, "Too many requests.", detail).ExecuteAsync(rejected.HttpContext));
            };
        });
        return services;
    }

    internal static void UseAllocatorPipeline(this WebApplication app)
    {
        // Outermost first: problems cover everything inside.
        app.UseDraining();
        app.UseMiddleware<ProblemMiddleware>();
        app.UseStatusCodePages(); // Empty 4xx answers from the framework (404 no route, 405) get a problem body.
        app.UseRouting();
        app.UseMiddleware<ApiKeyMiddleware>();      // who is calling (answers nothing)
        app.UseRateLimiter();                        // per key; per client address without a valid key
        app.UseMiddleware<ApiKeyAuthorization>();    // 401 / 403
        app.UseRequestTimeouts();

        app.MapHealthChecks(HealthEndpoints.Live, new() { Predicate = _ => false });
        // Both name every database and its state (issue 23); degraded (some databases down) stays 200.
        app.MapHealthChecks(HealthEndpoints.Ready, new() { Predicate = check => check.Tags.Contains("ready"), ResultStatusCodes = { [HealthStatus.Unhealthy] = 503 }, ResponseWriter = StoreHealthCheck.WriteAsync });
        app.MapHealthChecks("/health", new() { ResultStatusCodes = { [HealthStatus.Unhealthy] = 503 }, ResponseWriter = StoreHealthCheck.WriteAsync });
        app.MapOpenApi();
        app.MapApiReference();
        app.MapAllocatorOrleansDashboard();

        var v1 = app.MapGroup("/v1");
        v1.ProducesProblem(StatusCodes.Status400BadRequest)
            .ProducesProblem(StatusCodes.Status401Unauthorized)
            .ProducesProblem(StatusCodes.Status403Forbidden)
            .ProducesProblem(StatusCodes.Status404NotFound)
            .ProducesProblem(StatusCodes.Status429TooManyRequests)
            .ProducesProblem(StatusCodes.Status503ServiceUnavailable);
        v1.MapGroup(string.Empty).WithTags("Pools").MapPoolEndpoints();
        v1.MapGroup(string.Empty).WithTags("Workers").MapWorkerEndpoints();
        v1.MapGroup(string.Empty).WithTags("Allocations").MapAllocationEndpoints();
        v1.MapGroup(string.Empty).WithTags("Allocations").MapPreferredAllocationEndpoints();
    }

    private static void TryAddTimeProvider(this IServiceCollection services)
    {
        if (!services.Any(d => d.ServiceType == typeof(TimeProvider)))
        {
            services.AddSingleton(TimeProvider.System);
        }
    }
}
