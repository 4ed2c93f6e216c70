using System.Net;
using Allocator.Clustering.PostgreSql;
using Allocator.Grains;
using Allocator.Host.Options;
using Allocator.Host.Telemetry;
using Allocator.Networking;
using Microsoft.Extensions.Options;
using Orleans.Configuration;

namespace Allocator.Host.Cluster;

/// <summary>Makes this process an Orleans silo (co-hosted with Kestrel) that runs Allocator's grains.</summary>
internal static class SiloRegistration
{
    /// <summary>
    /// Adds the silo. Clustering is chosen by <c>Allocator:Cluster:Membership</c>, read (and
    /// checked) here because the silo's ports and membership are fixed before the host is built.
    /// </summary>
    /// <exception cref="InvalidOperationException">The cluster options are invalid.</exception>
    /// <summary>How long a death vote counts, in probe timeouts (<see cref="ClusterMembershipOptions.DeathVoteExpirationTimeout"/>).</summary>
    internal const int VoteLifetimeInProbeTimeouts = 10;

    public static void AddAllocatorSilo(this IHostApplicationBuilder builder)
    {
        var configuration = builder.Configuration;
        var cluster = configuration.GetSection(AllocatorClusterOptions.Section).Get<AllocatorClusterOptions>() ?? new AllocatorClusterOptions();
        if (new AllocatorClusterOptionsValidator().Validate(null, cluster) is { Failed: true } invalid)
        {
            throw new InvalidOperationException(invalid.FailureMessage);
        }

        builder.Services.AddOptions<AllocatorClusterOptions>().Bind(configuration.GetSection(AllocatorClusterOptions.Section));
        var membership = cluster.Membership.Trim().ToLowerInvariant();
        var advertised = IPAddress.Parse(cluster.AdvertisedAddress);
        var siloPort = cluster.SiloPort == 0 ? FreePort.Next(advertised) : cluster.SiloPort;
        // Issue 23: membership lives in the default database (ConnectionStrings:Allocator, or the
        // Allocator:Databases entry named by Allocator:Storage:DefaultDatabase).
        var connectionString = ConfiguredDatabases.Read(configuration).DefaultConnectionString;
        if (membership == ClusterMembership.Postgres && string.IsNullOrWhiteSpace(connectionString))
        {
            throw new InvalidOperationException("Allocator:Cluster:Membership=postgres keeps the cluster's membership in the allocator's PostgreSQL database: set ConnectionStrings:Allocator.");
        }

        // Mutual TLS between silos when Allocator:Cluster:Tls:Enabled: files read now, so a bad one stops the start.
        var tls = SiloTls.Load(cluster.Tls, TimeProvider.System);
        builder.UseOrleans(silo =>
        {
            silo.Configure<ClusterOptions>(o =>
            {
                o.ClusterId = cluster.ClusterId;
                o.ServiceId = cluster.ServiceId;
            });
            silo.Configure<EndpointOptions>(o =>
            {
                o.AdvertisedIPAddress = advertised;
                o.SiloPort = siloPort;
                o.GatewayPort = cluster.GatewayPort;
                if (cluster.SiloListenPort != 0)
                {
                    // Other silos reach this one at SiloPort through a forward (or a proxy).
                    o.SiloListeningEndpoint = new IPEndPoint(advertised, cluster.SiloListenPort);
                }
            });
            if (cluster.BindOutgoingToAdvertisedAddress)
            {
                OutgoingSiloConnections.Use(silo.Services, advertised);
            }

            silo.UseAllocatorTls(tls, advertised, siloPort);

            // A silo told it is dead exits at once (readiness down first), not two seconds later.
            silo.Services.AddSingleton<IFatalErrorHandler, ExitWhenFatal>();

            if (membership == ClusterMembership.Localhost)
            {
                // This silo is its own primary: a cluster of one, with nothing else to run.
                silo.UseDevelopmentClustering(new IPEndPoint(advertised, siloPort));
            }
            else
            {
                // Membership in the allocator's own database, in its own schema (docs/clustering.md).
                silo.UseAllocatorPostgresClustering(o =>
                {
                    o.ConnectionString = connectionString;
                    o.Schema = cluster.MembershipSchema;
                });
            }

            // Failure detection: faster than Orleans' defaults, so that a killed instance's pool
            // grains move within the issue 21 bound, and a hung one's within issue 47's (invariant
            // 14: a hung instance is treated like a dead one; what it may still do on waking is
            // fenced in the store, ADR 0032); the
            // false-suspicion side was measured on busy cores (docs/clustering.md, "Failure
            // detection"; ADR 0021, ADR 0031). Any ClusterMembershipOptions property can be set
            // under Allocator:Cluster:Probing.
            var probing = configuration.GetSection(AllocatorClusterOptions.Section + ":Probing");
            silo.Services.AddOptions<ClusterMembershipOptions>()
                .Configure(o =>
                {
                    o.ProbeTimeout = TimeSpan.FromSeconds(1);
                    o.TableRefreshTimeout = TimeSpan.FromSeconds(10);

                    // An indirect probe never votes here: the intermediary's probe is cancelled at
                    // its deadline, and with WaitForCancellationAcknowledgement (which the pool
                    // grain's callers need) it then waits for the hung silo's acknowledgement, so
                    // the request through it fails as "unknown". A hung silo was never declared
                    // dead among three (issue 47).
                    o.EnableIndirectProbes = false;
                })
                .Bind(probing)
                .PostConfigure(o =>
                {
                    // Votes against a silo are held back while its connection carried a message
                    // within MaxProbeTimeout x NumMissedProbesLimit: 12 s at Orleans' 4 x
                    // ProbeTimeout, the whole detection time of a hung silo among two.
                    if (probing["MaxProbeTimeout"] is null)
                    {
                        o.MaxProbeTimeout = o.ProbeTimeout;
                    }

                    // A vote counts until it expires, also one cast by a silo since declared dead:
                    // a silo cut off votes against the others before it reads its own death, and
                    // for Orleans' two minutes one more vote, by the next silo cut off or paused,
                    // declared a healthy one dead (then, one silo left, the other too). A silo
                    // that still suspects votes again at every failed probe, so ten probe
                    // timeouts keep every live suspicion and drop a departed voter's (issue 47).
                    if (probing["DeathVoteExpirationTimeout"] is null)
                    {
                        o.DeathVoteExpirationTimeout = o.ProbeTimeout * VoteLifetimeInProbeTimeouts;
                    }
                });

            // The trace continues across grain calls when traces are collected. Orleans' call
            // filters that carry it cost every grain call, traced or not (measured: about 15 µs
            // of CPU per allocate + release step at loopback), so they are only added then.
            if (TelemetryRegistration.TracesGrainCalls(configuration))
            {
                silo.AddActivityPropagation();
            }

            // Grain options bind from Allocator:Grains; the grain call timeout is one of the
            // nested timeouts (Allocator:Timeouts), checked at start against the others.
            silo.AddAllocatorGrains();
            silo.AddAllocatorOrleansDashboard(configuration);
            silo.Services.AddOptions<GrainOptions>()
                .Bind(configuration.GetSection(GrainOptions.Section))
                .Configure<IOptions<AllocatorTimeoutOptions>>((grains, timeouts) => grains.CallTimeout = timeouts.Value.GrainCallTimeout);
        });
    }
}
