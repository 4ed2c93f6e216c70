using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

/// <summary>
/// Invariant 11, held means held: an allocation answered active to a broker ends only by that
/// broker's release, its lease's expiry or its worker's deregistration, never by the grain's own
/// clean-up of a call it took for abandoned.
/// </summary>
public sealed class HeldMeansHeldTests
{

}
