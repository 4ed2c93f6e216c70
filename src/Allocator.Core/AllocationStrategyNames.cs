namespace Allocator;

/// <summary>The wire names of <see cref="AllocationStrategy"/> values (<c>skip-locked</c>, <c>strict</c>).</summary>
public static class AllocationStrategyNames
{
    public const string SkipLocked = "skip-locked";
    public const string Strict = "strict";

    public static string ToName(this AllocationStrategy strategy) => strategy switch
    {
        AllocationStrategy.SkipLocked => SkipLocked,
        AllocationStrategy.Strict => Strict,
        _ => throw new ArgumentOutOfRangeException(nameof(strategy), strategy, "Unknown strategy."),
    };

    public static bool TryParse(string? name, out AllocationStrategy strategy)
    {
        switch (name)
        {
            case SkipLocked:
                strategy = AllocationStrategy.SkipLocked;
                return true;
            case Strict:
                strategy = AllocationStrategy.Strict;
                return true;
            default:
                strategy = default;
                return false;
        }
    }
}
