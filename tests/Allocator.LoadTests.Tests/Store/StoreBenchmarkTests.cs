using Allocator.Storage.InMemory;
using Allocator.LoadTests.Store;

namespace Allocator.LoadTests.Tests.Store;

public sealed class StoreBenchmarkTests
{
    [Fact]
    public async Task Run_InMemoryStore_MeasuresSingleAndBatchedWithAFreshStorePerRun()
    {
        var schemas = new List<string>();
        var options = new StoreBenchmarkOptions(Workers: 20, Capacity: 1_000, Runs: 2, RunLength: TimeSpan.FromMilliseconds(100), BatchSize: 8);
        var output = new StringWriter();

        var results = await new StoreBenchmark(
            schema =>
            {
                schemas.Add(schema);
                return Task.FromResult<IWorkerStore>(new InMemoryWorkerStore());
            },
            options,
            output).RunAsync(CancellationToken.None);

        results.Select(r => r.Mode).Should().Equal("single", "batched");
        results.Should().OnlyContain(r => r.RatesPerRun.Count == 2 && r.MedianRate > 0 && r.PerCall.Count > 0);
        results[1].BatchSize.Should().Be(8);
        schemas.Should().HaveCount(5, "one warm-up run and two runs per mode").And.OnlyHaveUniqueItems();
        output.ToString().Should().Contain("single (batch of 1): median").And.Contain("batched (batch of 8): median");
    }

    [Fact]
    public async Task Run_WithRemoveStore_RemovesEveryStoreItCreatedAfterItsRun()
    {
        var created = new List<string>();
        var removed = new List<string>();
        var options = new StoreBenchmarkOptions(Workers: 20, Capacity: 1_000, Runs: 1, RunLength: TimeSpan.FromMilliseconds(50), BatchSize: 4);

        await new StoreBenchmark(
            schema =>
            {
                // A store is never created while an earlier one is still there.
                removed.Should().Equal(created);
                created.Add(schema);
                return Task.FromResult<IWorkerStore>(new InMemoryWorkerStore());
            },
            options,
            TextWriter.Null,
            schema =>
            {
                removed.Add(schema);
                return Task.CompletedTask;
            }).RunAsync(CancellationToken.None);

        created.Should().HaveCount(3);
        removed.Should().Equal(created);
    }
}
