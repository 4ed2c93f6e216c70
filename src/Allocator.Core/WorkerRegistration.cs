namespace Allocator;

/// <summary>What a worker says about itself when it registers.</summary>
public sealed record WorkerRegistration(string WorkerId, string Address, int Capacity, IReadOnlyList<string>? Tags = null);
