namespace Allocator.Grains.Tests.Unserializable;

/// <summary>No [GenerateSerializer], no surrogate: Orleans cannot send it between silos.</summary>
public sealed class NotSerializable
{
    public int Value { get; set; }
}

/// <summary>A grain interface that takes a type Orleans cannot serialize.</summary>
public interface IUnserializableGrain : IGrainWithStringKey
{
    Task<int> TakeAsync(NotSerializable value);
}

public sealed class UnserializableGrain : Grain, IUnserializableGrain
{
    public Task<int> TakeAsync(NotSerializable value) => Task.FromResult(value.Value);
}
