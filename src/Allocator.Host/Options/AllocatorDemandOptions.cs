namespace Allocator.Host.Options;

/// <summary>
/// How a pool's demand becomes the workers an autoscaler should run (issue 49; the formula is in
/// docs/placement.md, "Demand"). Bound from <c>Allocator:Demand</c>; checked at start-up. The
/// window the demand is counted over is the grains' (<c>Allocator:Grains:DemandWindow</c>).
/// </summary>
public sealed class AllocatorDemandOptions
{
    public const string Section = "Allocator:Demand";

    /// <summary>
    /// Idle room kept on top of the demand, as a share of it: 0.2 asks for a fifth more slots than
    /// are in use, waited for and refused. Default: 0.2. Range 0 to 10.
    /// </summary>
    public double BufferFraction { get; set; } = 0.2;

    /// <summary>
    /// Seconds of arrivals to keep room for on top (the time a new worker takes to start, so that
    /// the room is there when it is needed): the units asked for per second over the window, times
    /// this. Arrivals only, not departures, so it errs towards more workers. Default: 0 (off).
    /// Range 0 to 3,600.
    /// </summary>
    public double HeadroomSeconds { get; set; }

    /// <summary>The fewest workers ever asked for, demand or none. Default: 0. Range 0 to 1,000,000.</summary>
    public int MinimumWorkers { get; set; }
}
