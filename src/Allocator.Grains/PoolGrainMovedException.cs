namespace Allocator.Grains;

/// <summary>
/// A pool grain's answer to a call it did not act on because its silo is stopping and the grain
/// is moving to another silo: nothing was done for the call. <see cref="PoolGrainCaller"/> sends
/// the call again, and Orleans delivers it to the grain's new activation.
/// </summary>
[GenerateSerializer]
[Alias("allocator.pool-grain-moved")]
internal sealed class PoolGrainMovedException : Exception
{
    public PoolGrainMovedException()
        : this("The pool's grain is moving to another silo (this one is stopping); nothing was done for this call. Send it again.")
    {
    }

    public PoolGrainMovedException(string message)
        : base(message)
    {
    }

    public PoolGrainMovedException(string message, Exception innerException)
        : base(message, innerException)
    {
    }
}
