using Allocator.Grains.Runtime;
using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

public sealed class ActivationRuntimeTests
{
    [Fact]
    public async Task Turns_OfOneActivation_NeverOverlap()
    {
        var time = new ManualTimeProvider();
        await using var runtime = new ActivationRuntime(time, TimeSpan.FromMinutes(5));
        TurnGrain? grain = null;
        await runtime.InvokeAsync("k", c => grain = new TurnGrain(c), g => Task.FromResult(0), CancellationToken.None);

        // Calls, posts from other threads and timer ticks all race for the same activation.
        var calls = Enumerable.Range(0, 200)
            .Select(_ => Task.Run(() => runtime.InvokeAsync("k", c => new TurnGrain(c), g => g.WorkAsync(), CancellationToken.None)))
            .ToList();
        var posts = Enumerable.Range(0, 200).Select(_ => Task.Run(() => grain!.Context.Post(grain.Touch))).ToList();
        for (var i = 0; i < 20; i++)
        {
            time.Advance(TimeSpan.FromSeconds(1));
        }

        await Wait.ForAsync(Task.WhenAll(calls.Concat(posts)), "all calls and posts");
        await Wait.UntilAsync(() => grain!.Touches == 200 && grain.Ticks == 20, "every post and timer tick to run");

        grain!.Overlaps.Should().Be(0, "an activation runs one turn at a time");
        grain.Segments.Should().Be(600);
    }

    [Fact]
    public async Task Activation_IsCreatedOncePerKey()
    {
        await using var runtime = new ActivationRuntime(new ManualTimeProvider(), TimeSpan.FromMinutes(5));
        var created = 0;

        var results = await Task.WhenAll(Enumerable.Range(0, 50).Select(i => Task.Run(() =>
            runtime.InvokeAsync(i % 2 == 0 ? "a" : "b", c => { Interlocked.Increment(ref created); return new TurnGrain(c); }, g => Task.FromResult(g.Context.Key), CancellationToken.None))));

        created.Should().Be(2);
        runtime.ActivationCount.Should().Be(2);
        results.Should().Contain(["a", "b"]);
    }

    [Fact]
    public async Task IdleActivation_IsDeactivatedAndTimersStop()
    {
        var time = new ManualTimeProvider();
        await using var runtime = new ActivationRuntime(time, TimeSpan.FromSeconds(10));
        TurnGrain? grain = null;
        await runtime.InvokeAsync("k", c => grain = new TurnGrain(c), g => Task.FromResult(0), CancellationToken.None);

        time.Advance(TimeSpan.FromSeconds(5));
        runtime.ActivationCount.Should().Be(1, "idle for 5 s of 10");
        await Wait.UntilAsync(() => grain!.Ticks == 5, "five timer ticks");
        time.Advance(TimeSpan.FromSeconds(5));

        await Wait.UntilAsync(() => grain!.Deactivated, "the idle activation to be deactivated");
        runtime.ActivationCount.Should().Be(0);
        var ticks = grain!.Ticks;
        time.Advance(TimeSpan.FromSeconds(5));
        grain.Ticks.Should().Be(ticks, "timers stop with the activation");

        TurnGrain? second = null;
        await runtime.InvokeAsync("k", c => second = new TurnGrain(c), g => Task.FromResult(0), CancellationToken.None);
        second.Should().NotBeNull().And.NotBeSameAs(grain, "the next call activates the grain again");
    }

    [Fact]
    public async Task StopAsync_RefusesNewCalls()
    {
        var runtime = new ActivationRuntime(new ManualTimeProvider(), TimeSpan.FromMinutes(5));
        TurnGrain? grain = null;
        await runtime.InvokeAsync("k", c => grain = new TurnGrain(c), g => Task.FromResult(0), CancellationToken.None);

        await Wait.ForAsync(runtime.StopAsync(), "the runtime to stop");

        grain!.Deactivated.Should().BeTrue();
        var call = () => runtime.InvokeAsync("k", c => new TurnGrain(c), g => Task.FromResult(0), CancellationToken.None);
        (await call.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.Unavailable);
    }

    [Fact]
    public async Task InvokeAsync_CallerCancels_ReturnsWithoutWaitingForTheGrain()
    {
        await using var runtime = new ActivationRuntime(new ManualTimeProvider(), TimeSpan.FromMinutes(5));
        var never = new TaskCompletionSource<int>();
        using var cts = new CancellationTokenSource();

        var call = runtime.InvokeAsync("k", c => new TurnGrain(c), g => never.Task, cts.Token);
        await cts.CancelAsync();

        var wait = () => Wait.ForAsync(call, "the canceled call");
        await wait.Should().ThrowAsync<OperationCanceledException>();
        never.SetResult(0);
    }

    /// <summary>Detects overlapping turns with an atomic counter; its own state needs no lock.</summary>
    private sealed class TurnGrain : IGrainLifecycle
    {
        private int _active;

        public TurnGrain(IGrainContext context) => Context = context;

        public IGrainContext Context { get; }

        public int Overlaps { get; private set; }

        public int Segments { get; private set; }

        public int Touches { get; private set; }

        public int Ticks { get; private set; }

        public bool Deactivated { get; private set; }

        public Task OnActivateAsync(CancellationToken cancellationToken)
        {
            Context.RegisterTimer(
                () =>
                {
                    Enter();
                    Ticks++;
                    Leave();
                    return Task.CompletedTask;
                },
                TimeSpan.FromSeconds(1),
                TimeSpan.FromSeconds(1));
            return Task.CompletedTask;
        }

        public Task OnDeactivateAsync(DeactivationReason reason, CancellationToken cancellationToken)
        {
            Deactivated = true;
            return Task.CompletedTask;
        }

        public async Task<int> WorkAsync()
        {
            for (var i = 0; i < 3; i++)
            {
                Enter();
                Segments++;
                Thread.SpinWait(200);
                Leave();
                await Task.Yield(); // the next segment is a new turn of the same activation
            }

            return Segments;
        }

        public void Touch()
        {
            Enter();
            Touches++;
            Leave();
        }

        private void Enter()
        {
            if (Interlocked.Increment(ref _active) != 1)
            {
                Overlaps++;
            }
        }

        private void Leave() => Interlocked.Decrement(ref _active);
    }
}
