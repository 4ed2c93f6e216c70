namespace Allocator.LoadTests.Tests;

/// <summary>
/// Tests that measure wall time run alone, not beside other test classes, so that a busy shared
/// machine bends their (generous) bounds less.
/// </summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class TimingSensitive
{
    public const string Name = "timing-sensitive";
}
