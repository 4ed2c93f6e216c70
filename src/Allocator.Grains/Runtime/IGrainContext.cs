namespace Allocator.Grains.Runtime;

/// <summary>
/// What the activation layer offers a grain: its key, time, timers and a way to run work in its
/// own turn. Grains receive it in their constructor (as Orleans injects <c>IGrainContext</c> and
/// <c>ITimerRegistry</c>), so grain classes hold no hosting code.
/// </summary>
internal interface IGrainContext
{
    /// <summary>The grain's key (the pool id).</summary>
    string Key { get; }

    TimeProvider TimeProvider { get; }

    /// <summary>
    /// Calls <paramref name="callback"/> in a turn of this activation after
    /// <paramref name="dueTime"/>, then every <paramref name="period"/>
    /// (<see cref="Timeout.InfiniteTimeSpan"/> for once). Timers stop when the activation is
    /// deactivated or the returned handle is disposed; they do not keep an activation alive.
    /// </summary>
    IDisposable RegisterTimer(Func<Task> callback, TimeSpan dueTime, TimeSpan period);

    /// <summary>
    /// Runs <paramref name="work"/> in a later turn of this activation. Safe to call from any
    /// thread (store notifications, cancellation callbacks). Ignored once deactivated.
    /// </summary>
    void Post(Action work);
}

/// <summary>Optional activation and deactivation hooks of a grain, called in its own turns.</summary>
internal interface IGrainLifecycle
{
    Task OnActivateAsync(CancellationToken cancellationToken);

    /// <summary>
    /// Ends the activation: a grain finishes or fails every call it holds. When
    /// <paramref name="cancellationToken"/> fires, stop waiting and fail what is left.
    /// </summary>
    Task OnDeactivateAsync(DeactivationReason reason, CancellationToken cancellationToken);
}

internal enum DeactivationReason
{
    /// <summary>No calls for the idle timeout.</summary>
    Idle,

    /// <summary>The runtime is stopping.</summary>
    Shutdown,
}
