namespace Allocator.Grains.Serialization;

/// <summary>
/// The keys under which a pool grain's activation hands state to its next one when it moves
/// (Orleans' live migration at a graceful stop). Part of the wire contract (ADR 0026): a silo of
/// the other release may read or write them, so a key never changes meaning, an unknown key is
/// ignored, and a missing one means "nothing to take over".
/// </summary>
internal static class MigrationKeys
{
    /// <summary><see cref="PoolGrainHandOver"/>.</summary>
    public const string PoolGrainHandOver = "allocator.pool-grain.handover";
}

/// <summary>
/// What a moving pool grain's next activation must know to keep its promises (issue 39, #3): the
/// keys whose existing allocation a retry was answered lately (<see cref="AbandonedKeys.AnsweredExisting"/>),
/// and when. Without them a late word that such a key's first caller left would release an
/// allocation the retry's broker holds. Everything else the grain holds is settled before it moves.
/// </summary>
[GenerateSerializer]
[Immutable]
[Alias("allocator.pool-grain-handover")]
internal sealed record PoolGrainHandOver(
    [property: Id(0)] string[] ReplayedKeys,
    [property: Id(1)] DateTimeOffset[] ReplayedAt);
