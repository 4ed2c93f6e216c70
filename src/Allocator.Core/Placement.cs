namespace Allocator;

/// <summary>Which of the eligible workers a pool fills first (issue 49).</summary>
public enum Placement
{
    /// <summary>
    /// The least-loaded worker that fits: each session gets the most room. The default
    /// (breadth-first in Azure Virtual Desktop's words, <c>Distributed</c> in Agones').
    /// </summary>
    Spread = 0,

    /// <summary>
    /// The most-loaded worker that still fits: workers fill one after another, so idle ones can be
    /// powered off or scaled down (depth-first, <c>Packed</c>). A batch fills the fullest worker
    /// first, then the next.
    /// </summary>
    Pack = 1,
}
