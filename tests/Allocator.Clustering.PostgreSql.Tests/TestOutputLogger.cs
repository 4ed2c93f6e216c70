using Microsoft.Extensions.Logging;
using Xunit.Abstractions;

namespace Allocator.Clustering.PostgreSql.Tests;

/// <summary>Sends a silo's warnings and errors to the test's output, so a failed cluster test says why.</summary>
internal sealed class TestOutputLoggerProvider(ITestOutputHelper output, string prefix) : ILoggerProvider
{
    public ILogger CreateLogger(string categoryName) => new Logger(output, prefix, categoryName);

    public void Dispose()
    {
    }

    private sealed class Logger(ITestOutputHelper output, string prefix, string category) : ILogger
    {
        public IDisposable? BeginScope<TState>(TState state)
            where TState : notnull => null;

        public bool IsEnabled(LogLevel logLevel) => logLevel >= LogLevel.Warning;

        public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
        {
            if (!IsEnabled(logLevel))
            {
                return;
            }

            try
            {
                output.WriteLine($"[{prefix}] {logLevel} {category}: {formatter(state, exception)}{(exception is null ? "" : Environment.NewLine + exception)}");
            }
            catch (InvalidOperationException)
            {
                // The test has finished; xunit no longer accepts output for it.
            }
        }
    }
}
