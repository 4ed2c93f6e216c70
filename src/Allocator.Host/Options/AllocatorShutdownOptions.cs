namespace Allocator.Host.Options;

/// <summary>
/// How an instance stops on SIGTERM (or Ctrl+C): it leaves its load balancer, lets the requests
/// in flight finish, then hands its pool grains to the other instances. Bound from
/// <c>Allocator:Shutdown</c>; checked at start-up. See docs/operations.md.
/// </summary>
public sealed class AllocatorShutdownOptions
{
    public const string Section = "Allocator:Shutdown";

    /// <summary>
    /// After SIGTERM, how long <c>/health/ready</c> answers 503 while the listener stays open and
    /// serves (answering <c>Connection: close</c>), so that load balancers that follow readiness
    /// stop sending before connections are refused. Default: 5 s. Range 0 to 5 minutes. Behind a
    /// Kubernetes Service, which stops sending to a terminating pod by itself, a <c>preStop</c>
    /// sleep does the same job.
    /// </summary>
    public TimeSpan DrainDelay { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Once the listener is closed, how long the requests in flight may take to finish. Every
    /// request without a wait for capacity ends within <c>Allocator:Timeouts:RequestTimeout</c>,
    /// so this is at least that; a caller still waiting for capacity (<c>maxWaitMs</c>) when it
    /// ends is answered 503 <c>unavailable</c>, nothing held. Default: 20 s.
    /// </summary>
    public TimeSpan RequestDrainTimeout { get; set; } = TimeSpan.FromSeconds(20);

    /// <summary>
    /// How long the Orleans silo may take to stop: its pool grains answer the batches they have
    /// in the store (bounded by the grain call timeout) and move to another instance, and the
    /// silo leaves the cluster. Orleans' shutdown is cut short after it. Default: 15 s; at least
    /// the grain call timeout plus 2 s.
    /// </summary>
    public TimeSpan SiloStopTimeout { get; set; } = TimeSpan.FromSeconds(15);

    /// <summary>
    /// The longest a stop takes: the drain delay, the request drain, the grace Kestrel gets to
    /// close the connections left, and the silo's stop. The host's shutdown timeout; 42 s with
    /// the defaults.
    /// </summary>
    public TimeSpan StopBound => DrainDelay + RequestDrainTimeout + ListenerCloseGrace + SiloStopTimeout;

    /// <summary>After the request drain, how long Kestrel has to close the connections left before it aborts them.</summary>
    internal static TimeSpan ListenerCloseGrace { get; } = TimeSpan.FromSeconds(2);
}
