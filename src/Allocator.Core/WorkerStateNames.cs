namespace Allocator;

public static class WorkerStateNames
{
    public static string ToName(this WorkerState state) => state switch
    {
        WorkerState.Available => "available",
        WorkerState.Draining => "draining",
        WorkerState.Offline => "offline",
        _ => throw new ArgumentOutOfRangeException(nameof(state), state, "Unknown worker state."),
    };
}
