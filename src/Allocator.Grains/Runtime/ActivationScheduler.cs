namespace Allocator.Grains.Runtime;

/// <summary>
/// Runs the tasks of one activation one at a time, in order, on the thread pool. Awaits inside
/// grain code capture this scheduler (it is <see cref="TaskScheduler.Current"/> while a turn
/// runs), so every continuation of grain code is another turn of the same activation.
/// </summary>
internal sealed class ActivationScheduler : TaskScheduler
{
    // Bound on tasks run per thread-pool visit, so one busy activation cannot hog a pool thread.
    private const int TasksPerVisit = 64;

    private readonly Queue<Task> _queue = new();
    private readonly object _sync = new();
    private bool _scheduled;

    public override int MaximumConcurrencyLevel => 1;

    protected override void QueueTask(Task task)
    {
        lock (_sync)
        {
            _queue.Enqueue(task);
            if (_scheduled)
            {
                return;
            }

            _scheduled = true;
        }

        ThreadPool.UnsafeQueueUserWorkItem(static s => ((ActivationScheduler)s!).RunQueued(), this);
    }

    // Never inline: running a task on the caller's thread could overlap the current turn.
    protected override bool TryExecuteTaskInline(Task task, bool taskWasPreviouslyQueued) => false;

    protected override IEnumerable<Task> GetScheduledTasks()
    {
        lock (_sync)
        {
            return [.. _queue];
        }
    }

    private void RunQueued()
    {
        for (var i = 0; i < TasksPerVisit; i++)
        {
            Task? task;
            lock (_sync)
            {
                if (!_queue.TryDequeue(out task))
                {
                    _scheduled = false;
                    return;
                }
            }

            TryExecuteTask(task);
        }

        // More work remains: give the thread back and come again.
        ThreadPool.UnsafeQueueUserWorkItem(static s => ((ActivationScheduler)s!).RunQueued(), this);
    }
}
