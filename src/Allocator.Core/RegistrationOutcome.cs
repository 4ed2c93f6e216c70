namespace Allocator;

public sealed record RegistrationOutcome(string WorkerId, RegistrationStatus Status, Worker Worker);
