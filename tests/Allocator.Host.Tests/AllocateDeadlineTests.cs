using System.Diagnostics;
using System.Net;
using System.Text;
using Allocator.Storage.InMemory;
using Allocator.Testing;
using Microsoft.Extensions.DependencyInjection;

namespace Allocator.Host.Tests;

/// <summary>
/// Issue 39, hypothesis 5: an allocation's deadline (its wait plus the grain call timeout, inside
/// the HTTP request timeout) covers the whole call, the read of the pool's settings included.
/// </summary>
public sealed class AllocateDeadlineTests
{
    /// <summary>How long the settings read hangs: far past the promise, so a late answer on a busy machine is not taken for it.</summary>
    private static readonly TimeSpan Hang = TimeSpan.FromSeconds(15);

    [Fact]
    public async Task Allocate_SettingsReadHangs_AnsweredUnavailableWithinItsDeadline_NothingHeld()
    {
        var memory = new InMemoryWorkerStore();
        var store = new StoreFaultTests.FaultyStore(memory) { Delay = Hang };
        var host = await TestHost.StartAsync(
            [
                "--Allocator:Timeouts:LockTimeout=00:00:00.2",
                "--Allocator:Timeouts:CommandTimeout=00:00:00.5",
                "--Allocator:Timeouts:GrainCallTimeout=00:00:01",
                "--Allocator:Timeouts:RequestTimeout=00:00:02",
            ],
            builder => builder.Services.AddSingleton<IWorkerStore>(store).AddSingleton<IPoolChangeFeed>(memory));
        await using (host)
        {
            var pool = Unique.Name("deadline");
            await host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
            await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 2));

            // The pool's settings are not cached (its first call on this instance, or any after a
            // settings change) and the database hangs on the read.
            host.Services.GetRequiredService<IPoolSettingsCache>().Invalidate(pool);
            store.HangingReads = true;
            using var http = host.NewHttp(TestHost.BrokerKey);
            http.Timeout = TimeSpan.FromSeconds(30);
            using var body = new StringContent("""{"units":1,"maxWaitMs":500}""", Encoding.UTF8, "application/json");
            body.Headers.Add("Idempotency-Key", "late-settings");
            using var lateness = SchedulingDelay.Start();
            var clock = Stopwatch.StartNew();
            using var answer = await http.PostAsync($"v1/pools/{pool}/allocations", body);
            var took = clock.Elapsed;
            store.HangingReads = false;

            // The promise: the wait (0.5 s) plus the request timeout (2 s) bound the whole call. A
            // second for the test's own steps, plus what the machine kept this process waiting; a
            // call that waited for the read would take the whole hang.
            took.Should().BeLessThan(
                lateness.Bound(promise: TimeSpan.FromSeconds(0.5 + 2), allowance: TimeSpan.FromSeconds(1), defect: Hang),
                "the wait plus the request timeout bound the whole call; the read hung for {0} ({1})", Hang, lateness);
            answer.StatusCode.Should().Be(HttpStatusCode.ServiceUnavailable, await answer.Content.ReadAsStringAsync());
            answer.Headers.RetryAfter.Should().NotBeNull();
            (await answer.Content.ReadAsStringAsync()).Should().Contain("nothing is held", "only the read of the settings ran: nothing was sent to the grain");
            (await memory.GetPoolStatisticsAsync(pool)).ActiveAllocations.Should().Be(0, "nothing was allocated for the request");
        }
    }
}
