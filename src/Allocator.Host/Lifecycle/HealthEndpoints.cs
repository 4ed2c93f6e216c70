namespace Allocator.Host.Lifecycle;

/// <summary>Where orchestrators and load balancers probe an instance (docs/operations.md).</summary>
internal static class HealthEndpoints
{
    /// <summary>The process serves HTTP; no check runs.</summary>
    public const string Live = "/health/live";

    /// <summary>The store answers within the command timeout and the instance is not stopping.</summary>
    public const string Ready = "/health/ready";
}
