namespace Allocator.Core.Tests;

public sealed class AllocatorValidationTests
{
    [Theory]
    [InlineData("pool-1")]
    [InlineData("host-001.example.com")]
    [InlineData("a")]
    [InlineData("user@realm:42")]
    public void CheckId_AcceptableIds_ReturnNull(string id) =>
        AllocatorValidation.CheckId(id, "workerId").Should().BeNull();

    [Theory]
    [InlineData(null, "must not be empty")]
    [InlineData("", "must not be empty")]
    [InlineData("-leading", "must start with")]
    [InlineData("has space", "may contain only")]
    [InlineData("slash/inside", "may contain only")]
    [InlineData("tab\there", "may contain only")]
    public void CheckId_BadIds_SayWhatIsWrong(string? id, string expected) =>
        AllocatorValidation.CheckId(id, "workerId").Should().Contain("workerId").And.Contain(expected);

    [Fact]
    public void CheckId_Oversized_NamesTheLimit() =>
        AllocatorValidation.CheckId(new string('a', AllocatorLimits.MaxIdLength + 1), "poolId")
            .Should().Contain($"maximum is {AllocatorLimits.MaxIdLength}");

    [Theory]
    [InlineData(0)]
    [InlineData(-1)]
    [InlineData(AllocatorLimits.MaxCapacity + 1)]
    public void CheckCapacity_OutOfRange_IsRejected(int capacity) =>
        AllocatorValidation.CheckCapacity(capacity).Should().Contain("capacity");

    [Fact]
    public void EnsureRequests_EmptyBatch_Throws() =>
        FluentActions.Invoking(() => AllocatorValidation.EnsureRequests([]))
            .Should().Throw<ArgumentException>().WithMessage("*1–*requests*");

    [Fact]
    public void EnsureRegistrations_DuplicateWorker_Throws() =>
        FluentActions.Invoking(() => AllocatorValidation.EnsureRegistrations(
                [new WorkerRegistration("w1", "10.0.0.1", 4), new WorkerRegistration("w1", "10.0.0.2", 4)]))
            .Should().Throw<ArgumentException>().WithMessage("*w1*twice*");
}
