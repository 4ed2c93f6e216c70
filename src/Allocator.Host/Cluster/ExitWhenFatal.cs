using Allocator.Host.Lifecycle;

namespace Allocator.Host.Cluster;

/// <summary>
/// What the silo does on a fatal error, above all on reading in the membership table that it
/// was declared dead ("I have been told I am dead"): readiness goes down and the process exits
/// after <see cref="Grace"/>, rather than after Orleans' own two seconds.
/// </summary>
/// <remarks>
/// A silo declared dead has been superseded: its grains live elsewhere and every call still
/// routed to it hangs or is cut when it exits. Orleans' handler waits two seconds for loggers
/// before it fails fast; for those two seconds brokers' calls in flight here hang (a cut-off
/// instance of two kept them 2.2 s past its death) and a woken instance runs its old activations.
/// The reason is written to standard error at once, as Orleans' handler does, so nothing is
/// lost that a logger would have flushed.
/// </remarks>
internal sealed partial class ExitWhenFatal(Draining draining, ILogger<ExitWhenFatal> logger, Action<string, Exception?> exit) : IFatalErrorHandler
{
    /// <summary>How long the process lives on after a fatal error: for the console logger's queue, and for readiness to be read as down.</summary>
    internal static TimeSpan Grace { get; } = TimeSpan.FromMilliseconds(200);

    public ExitWhenFatal(Draining draining, ILogger<ExitWhenFatal> logger)
        : this(draining, logger, Environment.FailFast)
    {
    }

    public bool IsUnexpected(Exception exception) => exception is not ThreadAbortException;

    public void OnFatalException(object? sender, string? context, Exception? exception)
    {
        var message = $"Fatal error from {sender?.GetType().Name ?? "(unknown)"}: {context ?? "(no context)"}";
        draining.Begin();
        LogFatal(logger, exception, message);
        Console.Error.WriteLine($"allocator: {message}{(exception is null ? "" : Environment.NewLine + exception)}");
        Console.Error.Flush();
        Thread.Sleep(Grace);
        exit(message, exception);
    }

    [LoggerMessage(Level = LogLevel.Critical, Message = "{Message}; this instance exits now.")]
    private static partial void LogFatal(ILogger logger, Exception? exception, string message);
}
