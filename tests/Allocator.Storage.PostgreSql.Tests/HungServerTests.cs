using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using Allocator.Testing;
using Microsoft.Extensions.Logging;
using Npgsql;

namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>
/// A database server that hangs (connections open, nothing answers; the db-frozen scenario).
/// Npgsql cancels a statement by opening a second connection to the server and waiting for it,
/// synchronously, on the thread that cancels: against a hung server that thread is held for the
/// connection timeout. On the shared thread pool a few of those stalled the pools of every other
/// database (ADR 0027's stall, ADR 0029), so the store cancels its statements on threads of its own.
/// </summary>
public sealed class HungServerTests : PostgresStoreTestBase
{
    [Fact]
    public async Task StatementOnAHungServer_MeetsItsDeadline_IsCancelledOffTheThreadPool_AndIsUnavailableWithOutcomeUnknown()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 1);
        await using var hang = StartProxy();
        var cancels = new CancelLog();
        await using var store = await StoreThroughAsync(hang, cancels);
        (await store.GetWorkersAsync("p")).Should().HaveCount(1, "the connection works before the freeze");

        hang.Partition();
        var watch = Stopwatch.StartNew();
        var error = (await FluentActions.Awaiting(() => store.GetWorkersAsync("p").WaitAsync(TimeSpan.FromSeconds(30)))
            .Should().ThrowAsync<AllocatorException>()).Which;

        error.Kind.Should().Be(AllocatorErrorKind.Unavailable);
        error.OutcomeUnknown.Should().BeTrue("the statement was sent and never answered: it may have run");
        watch.Elapsed.Should().BeGreaterThan(TimeSpan.FromSeconds(0.9), "the statement had its 1 s command timeout");
        hang.Accepted.Should().BeGreaterThan(1, "the driver opened a connection of its own to send the cancel request");
        cancels.Sent.Should().NotBeEmpty("the driver sent a cancel request for the statement")
            .And.OnlyContain(onThreadPool => !onThreadPool, "a cancel request blocks its thread while the server hangs: never a shared thread-pool thread");
    }

    [Fact]
    public async Task CallerCancelsAStatementOnAHungServer_CancelReturnsAtOnce_AndTheCancelRequestIsSentOffTheThreadPool()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 1);

        // A fresh proxy and store each attempt: one whose run the machine kept too far behind is not judged (ADR 0030).
        await SchedulingDelay.JudgeAsync(async _ =>
        {
            await using var hang = StartProxy();
            var cancels = new CancelLog();
            await using var store = await StoreThroughAsync(hang, cancels, commandTimeout: TimeSpan.FromSeconds(2));
            (await store.GetWorkersAsync("p")).Should().HaveCount(1);
            using var caller = new CancellationTokenSource();

            hang.Partition();
            var call = store.GetWorkersAsync("p", caller.Token);
            await Task.Delay(TimeSpan.FromMilliseconds(300));
            call.IsCompleted.Should().BeFalse("the server hangs");
            using var lateness = SchedulingDelay.Start();
            var cancelTook = await Task.Run(() =>
            {
                var watch = Stopwatch.StartNew();
                caller.Cancel();
                return watch.Elapsed;
            });

            // The promise: Cancel() returns at once. Half a second, plus what the machine kept this
            // process waiting while it ran; a cancel request sent on the caller's thread would first
            // wait for the hung server's connection, up to its 2 s connection timeout (the command
            // timeout here).
            var bound = lateness.Bound(promise: TimeSpan.Zero, allowance: TimeSpan.FromSeconds(0.5), defect: TimeSpan.FromSeconds(2));
            await FluentActions.Awaiting(() => call.WaitAsync(TimeSpan.FromSeconds(30))).Should().ThrowAsync<OperationCanceledException>();
            cancelTook.Should().BeLessThan(bound, "the caller's thread (a grain turn, a timer) must not wait for the hung server's answer to the cancel request ({0})", lateness);
            cancels.Sent.Should().NotBeEmpty().And.OnlyContain(onThreadPool => !onThreadPool);
        });
    }

    /// <summary>A proxy in front of the test PostgreSQL; partitioned, it is a server that hangs to the store behind it.</summary>
    private static PartitionProxy StartProxy()
    {
        var target = new NpgsqlConnectionStringBuilder(PostgresTestDatabase.ConnectionString);
        var address = Dns.GetHostAddresses(target.Host!).First(a => a.AddressFamily == AddressFamily.InterNetwork);
        return PartitionProxy.Start(new IPEndPoint(address, target.Port));
    }

    private async Task<PostgresWorkerStore> StoreThroughAsync(PartitionProxy hang, ILoggerFactory logs, TimeSpan? commandTimeout = null) =>
        await PostgresTestDatabase.CreateStoreAsync(Schema, o =>
        {
            o.DataSource = null;
            // The cancel's own connection waits up to the connection timeout (the command timeout, 1 s here).
            o.ConnectionString = new NpgsqlConnectionStringBuilder(PostgresTestDatabase.ConnectionString)
            {
                Host = "127.0.0.1",
                Port = hang.EndPoint.Port,
                CancellationTimeout = 500,
            }.ConnectionString;
            o.ApplyMigrations = false;
            o.ListenForChanges = false;
            o.LockTimeout = TimeSpan.FromMilliseconds(200);
            o.CommandTimeout = commandTimeout ?? TimeSpan.FromSeconds(1);
            o.TransientRetries = 0;
            o.LoggerFactory = logs;
        });

    /// <summary>Records, for each cancel request Npgsql sends, whether its thread was a thread-pool thread.</summary>
    private sealed class CancelLog : ILoggerFactory, ILogger
    {
        private readonly ConcurrentQueue<bool> _sent = new();

        public IReadOnlyCollection<bool> Sent => [.. _sent];

        public ILogger CreateLogger(string categoryName) => this;

        public void AddProvider(ILoggerProvider provider)
        {
        }

        public void Dispose()
        {
        }

        public IDisposable? BeginScope<TState>(TState state)
            where TState : notnull => null;

        public bool IsEnabled(LogLevel logLevel) => true;

        public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
        {
            // "Sending PostgreSQL cancellation...", logged on the thread that then opens the cancel connection and waits.
            if (eventId.Id == NpgsqlEventId.CancellingCommand)
            {
                _sent.Enqueue(Thread.CurrentThread.IsThreadPoolThread);
            }
        }
    }
}
