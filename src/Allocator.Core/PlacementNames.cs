namespace Allocator;

/// <summary>The wire names of <see cref="Placement"/> values (<c>spread</c>, <c>pack</c>), also the stores' column values.</summary>
public static class PlacementNames
{
    public const string Spread = "spread";
    public const string Pack = "pack";

    public static string ToName(this Placement placement) => placement switch
    {
        Placement.Spread => Spread,
        Placement.Pack => Pack,
        _ => throw new ArgumentOutOfRangeException(nameof(placement), placement, "Unknown placement."),
    };

    public static bool TryParse(string? name, out Placement placement)
    {
        switch (name)
        {
            case Spread:
                placement = Placement.Spread;
                return true;
            case Pack:
                placement = Placement.Pack;
                return true;
            default:
                placement = default;
                return false;
        }
    }
}
