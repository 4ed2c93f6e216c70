using System.Net;
using System.Net.Sockets;
using Allocator.Storage.SqlServer.Internal;
using Microsoft.Data.SqlClient;
using Microsoft.Extensions.Time.Testing;

namespace Allocator.Storage.SqlServer.Tests;

/// <summary>
/// Opening connections (issue 12, #2), against real SqlClient and a real socket, no SQL Server:
/// a local listener accepts each TCP connection, reads the client's pre-login packet header and
/// closes it, so every open fails in the pre-login handshake after reaching the "server" (read
/// first: a connection closed before the client wrote is sometimes retried inside SqlClient's own
/// connect loop), and the listener counts the attempts.
/// </summary>
public sealed class ConnectionTests : IDisposable
{
    private readonly ClosingListener _listener = new();

    public void Dispose() => _listener.Dispose();

    [Fact]
    public async Task StoreCall_ServerThatDropsEveryConnection_IsUnavailableNothingWritten_AfterFreshOpens()
    {
        // Before the fix the open ran inside the command's try and the SqlException (number 0)
        // was "Other": a raw SqlException, a 500 over HTTP.
        await using var store = new SqlServerWorkerStore(Options(o => o.OpenRetries = 2));

        var error = (await FluentActions.Awaiting(() => store.GetPoolAsync("p")).Should().ThrowAsync<AllocatorException>()).Which;

        error.Kind.Should().Be(AllocatorErrorKind.Unavailable);
        error.OutcomeUnknown.Should().BeFalse("the connection never opened, so nothing was sent");
        error.Message.Should().Contain("3 attempt(s)").And.Contain("nothing was sent");
        error.InnerException.Should().BeOfType<SqlException>();
        _listener.Accepted.Should().Be(3, "one open and two fresh ones (OpenRetries = 2), each reaching the server");
    }

    [Fact]
    public async Task Open_DefaultPoolBlockingPeriod_WouldNotReachTheServerAgain_TheStoresSettingDoes()
    {
        // Why the store sets Pool Blocking Period=NeverBlock: with SqlClient's default (Auto, on
        // for SQL Server) an open after a failed one rethrows the cached error without trying.
        var blocking = new SqlConnectionStringBuilder(Options().ConnectionString) { PoolBlockingPeriod = PoolBlockingPeriod.Auto, ApplicationName = "blocking-" + Guid.NewGuid() }.ConnectionString;
        for (var i = 0; i < 3; i++)
        {
            await FluentActions.Awaiting(() => OpenOnceAsync(blocking)).Should().ThrowAsync<SqlException>();
        }

        _listener.Accepted.Should().Be(1, "the pool's blocking period answered the second and third opens itself");

        var stores = SqlServerWorkerStore.BuildConnectionString(Options(o => o.ConnectionString += ";Application Name=store-" + Guid.NewGuid()));
        for (var i = 0; i < 3; i++)
        {
            await FluentActions.Awaiting(() => OpenOnceAsync(stores)).Should().ThrowAsync<SqlException>();
        }

        _listener.Accepted.Should().Be(4, "with the store's connection string every open reaches the server");
    }

    [Fact]
    public async Task Open_LoginRefusedOrSetupError_IsNotRetried()
    {
        var options = Options(o => o.OpenRetries = 5);
        var calls = 0;
        var policy = new SqlServerRetryPolicy(_ => { calls++; throw new NotSupportedException("Globalization Invariant Mode is not supported."); }, Commands(options), options, TimeProvider.System);

        await FluentActions.Awaiting(() => policy.OpenAsync(CancellationToken.None)).Should().ThrowAsync<NotSupportedException>("a setup error is not a connection failure");
        calls.Should().Be(1);
    }

    [Fact]
    public async Task Open_AllAttemptsTogether_AreBoundedByTheCommandTimeout()
    {
        // Each failed open takes 400 ms of the fake clock; the budget is the 1 s command timeout.
        var time = new FakeTimeProvider();
        var options = Options(o =>
        {
            o.OpenRetries = 100;
            o.OpenRetryDelay = TimeSpan.Zero;
            o.RetryJitter = TimeSpan.Zero;
            o.LockTimeout = TimeSpan.FromMilliseconds(500);
            o.CommandTimeout = TimeSpan.FromSeconds(1);
        });
        var calls = 0;
        var policy = new SqlServerRetryPolicy(_ =>
        {
            calls++;
            time.Advance(TimeSpan.FromMilliseconds(400));
            throw new InvalidOperationException("Timeout expired. The timeout period elapsed prior to obtaining a connection from the pool.");
        }, Commands(options), options, time);

        var error = (await FluentActions.Awaiting(() => policy.OpenAsync(CancellationToken.None)).Should().ThrowAsync<AllocatorException>()).Which;

        calls.Should().Be(3, "attempts start at 0, 400 and 800 ms; at 1,200 ms the 1 s budget is spent");
        error.Kind.Should().Be(AllocatorErrorKind.Unavailable);
        error.OutcomeUnknown.Should().BeFalse();
    }

    [Fact]
    public async Task Open_CallersCancellation_StaysACancellation()
    {
        var options = Options();
        using var cancel = new CancellationTokenSource();
        var policy = new SqlServerRetryPolicy(_ =>
        {
            cancel.Cancel();
            throw new InvalidOperationException("pool wait ended");
        }, Commands(options), options, TimeProvider.System);

        await FluentActions.Awaiting(() => policy.OpenAsync(cancel.Token)).Should().ThrowAsync<OperationCanceledException>();
    }

    [Fact]
    public void BuildConnectionString_SetsNeverBlockAndTheCommandTimeoutAsConnectTimeout_UnlessGiven()
    {
        var built = new SqlConnectionStringBuilder(SqlServerWorkerStore.BuildConnectionString(new SqlServerWorkerStoreOptions
        {
            ConnectionString = "Server=tcp:db,1433;Database=a;User ID=u;Password=p",
            LockTimeout = TimeSpan.FromSeconds(2),
            CommandTimeout = TimeSpan.FromMilliseconds(4500),
        }));
        built.PoolBlockingPeriod.Should().Be(PoolBlockingPeriod.NeverBlock);
        built.ConnectTimeout.Should().Be(5, "the command timeout rounded up to whole seconds, not SqlClient's 15 s");
        built.Password.Should().Be("p");

        var given = new SqlConnectionStringBuilder(SqlServerWorkerStore.BuildConnectionString(new SqlServerWorkerStoreOptions
        {
            ConnectionString = "Server=db;Timeout=7;Pool Blocking Period=AlwaysBlock",
        }));
        given.PoolBlockingPeriod.Should().Be(PoolBlockingPeriod.AlwaysBlock, "an explicit setting wins");
        given.ConnectTimeout.Should().Be(7);
    }

    [Fact]
    public void StatementTimeout_LiesBetweenTheLockAndTheCommandTimeouts()
    {
        var options = new SqlServerWorkerStoreOptions { LockTimeout = TimeSpan.FromSeconds(2), CommandTimeout = TimeSpan.FromSeconds(5) };
        SqlServerWorkerStore.StatementTimeout(options).Should().Be(TimeSpan.FromMilliseconds(3500), "the value the PostgreSQL store gives statement_timeout");
    }

    [Theory]
    [InlineData(";Max Pool Size=16", 16)]
    [InlineData("", 100)] // SqlClient's default
    [InlineData(";Pooling=false", null)]
    public async Task ConnectionLimit_IsTheConnectionStringsPoolSize_UnlessItDoesNotPool(string suffix, int? expected)
    {
        var options = Options();
        options.ConnectionString += suffix;
        await using var store = new SqlServerWorkerStore(options);

        ((IWorkerStore)store).ConnectionLimit.Should().Be(expected);
    }

    private SqlServerWorkerStoreOptions Options(Action<SqlServerWorkerStoreOptions>? configure = null)
    {
        var options = new SqlServerWorkerStoreOptions
        {
            // A pool of its own per test (Application Name), so no cached failure crosses tests.
            ConnectionString = $"Server=tcp:127.0.0.1,{_listener.Port};Database=allocator;User ID=sa;Password=x;TrustServerCertificate=True;Application Name=t-{Guid.NewGuid():N}",
            LockTimeout = TimeSpan.FromSeconds(1),
            CommandTimeout = TimeSpan.FromSeconds(20),
            OpenRetryDelay = TimeSpan.FromMilliseconds(1),
            RetryJitter = TimeSpan.Zero,
        };
        configure?.Invoke(options);
        return options;
    }

    private static SqlServerCommandFactory Commands(SqlServerWorkerStoreOptions options) =>
        new(new SqlScripts(options.Schema, options.LockTimeout, SqlServerWorkerStore.StatementTimeout(options)), options.CommandTimeout);

    private static async Task OpenOnceAsync(string connectionString)
    {
        await using var connection = new SqlConnection(connectionString);
        await connection.OpenAsync();
    }

    /// <summary>Accepts every TCP connection, reads the 8-byte header of the client's first packet and closes it; counts them.</summary>
    private sealed class ClosingListener : IDisposable
    {
        private readonly TcpListener _listener = new(IPAddress.Loopback, 0);
        private readonly CancellationTokenSource _stop = new();
        private int _accepted;

        public ClosingListener()
        {
            _listener.Start();
            _ = AcceptAsync();
        }

        public int Port => ((IPEndPoint)_listener.LocalEndpoint).Port;

        public int Accepted => Volatile.Read(ref _accepted);

        public void Dispose()
        {
            _stop.Cancel();
            _listener.Stop();
            _stop.Dispose();
        }

        private async Task AcceptAsync()
        {
            try
            {
                while (!_stop.IsCancellationRequested)
                {
                    using var client = await _listener.AcceptTcpClientAsync(_stop.Token);
                    Interlocked.Increment(ref _accepted);
                    var header = new byte[8];
                    await client.GetStream().ReadAtLeastAsync(header, header.Length, throwOnEndOfStream: false, _stop.Token);
                    client.Client.LingerState = new LingerOption(true, 0);
                }
            }
            catch (Exception ex) when (ex is OperationCanceledException or ObjectDisposedException or SocketException or IOException)
            {
                // Stopped.
            }
        }
    }
}
