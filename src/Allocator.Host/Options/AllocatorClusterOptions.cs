namespace Allocator.Host.Options;

/// <summary>
/// How this instance's Orleans silo finds the others. Bound from <c>Allocator:Cluster</c>;
/// checked at start-up. See docs/clustering.md.
/// </summary>
public sealed class AllocatorClusterOptions
{
    public const string Section = "Allocator:Cluster";

    /// <summary>
    /// <c>localhost</c>: a single instance, nothing else to run (the default). <c>postgres</c>:
    /// several instances form one cluster whose membership lives in the allocator's PostgreSQL
    /// database (<c>ConnectionStrings:Allocator</c>), in schema <see cref="MembershipSchema"/>.
    /// </summary>
    public string Membership { get; set; } = ClusterMembership.Localhost;

    /// <summary>Instances with the same cluster id form one cluster. Default: <c>allocator</c>.</summary>
    public string ClusterId { get; set; } = "allocator";

    /// <summary>Identifies the service across deployments (kept when the cluster id changes). Default: <c>allocator</c>.</summary>
    public string ServiceId { get; set; } = "allocator";

    /// <summary>
    /// TCP port silos talk to each other on. Default: 11111. Each instance on one machine needs
    /// its own. 0 (localhost membership only) takes a free port at start, for tests and
    /// in-process hosts.
    /// </summary>
    public int SiloPort { get; set; } = 11111;

    /// <summary>
    /// TCP port for external Orleans clients. Default: 0, no gateway: callers use HTTP, and the
    /// host calls grains through its own silo.
    /// </summary>
    public int GatewayPort { get; set; }

    /// <summary>
    /// The address other silos reach this one at. Default: 127.0.0.1 (all instances on one
    /// machine); set the machine's address when instances run on several machines.
    /// </summary>
    public string AdvertisedAddress { get; set; } = "127.0.0.1";

    /// <summary>
    /// The port the silo listens on when other silos reach it through a port forward, a NAT or a
    /// proxy at <see cref="SiloPort"/>, the port it advertises. Default: 0, listen on
    /// <see cref="SiloPort"/>.
    /// </summary>
    public int SiloListenPort { get; set; }

    /// <summary>
    /// Connections this silo opens to other silos leave from <see cref="AdvertisedAddress"/>, not
    /// from the address the operating system picks for the route. On a machine with several
    /// addresses, the silo network then sees each silo at one address in both directions (its
    /// firewall rules, and the fault scenario that cuts one silo off from the others). Default: off.
    /// </summary>
    public bool BindOutgoingToAdvertisedAddress { get; set; }

    /// <summary>Schema of the membership tables in <c>postgres</c> mode. Default: <c>allocator_cluster</c>.</summary>
    public string MembershipSchema { get; set; } = "allocator_cluster";

    /// <summary>Mutual TLS between silos (<c>Allocator:Cluster:Tls</c>). Default: off.</summary>
    public AllocatorClusterTlsOptions Tls { get; set; } = new();
}

internal static class ClusterMembership
{
    public const string Localhost = "localhost";
    public const string Postgres = "postgres";
}
