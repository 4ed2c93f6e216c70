using System.Reflection;
using Allocator.Host.Storage;
using Allocator.Storage.InMemory;
using Allocator.Storage.PostgreSql;
using Allocator.Storage.SqlServer;

namespace Allocator.Host.Tests;

/// <summary>
/// <see cref="IWorkerStore"/> grows by members with a default body (so that a store written
/// against an earlier version still compiles). A store or a decorator that does not implement such
/// a member itself falls back to the default without a word: a decorator that does not forward the
/// activation fence's members would silently drop the fence (issue 47).
/// </summary>
public sealed class WorkerStoreImplementationsTests
{
    /// <summary>The members a store must implement itself to keep its activation fences (issue 47, ADR 0032).</summary>
    private static readonly string[] FenceMembers =
        [nameof(IWorkerStore.ClaimPoolActivationAsync), nameof(IWorkerStore.ReleaseAbandonedAsync), nameof(IWorkerStore.AllocateFencedAsync)];

    [Fact]
    public void TheRoutingStore_ForwardsEveryMember_NoneLeftToItsDefault()
    {
        var defaulted = DefaultedMembers(typeof(RoutingWorkerStore));

        DefaultedMembers(typeof(InMemoryWorkerStore)).Should().Contain(nameof(IWorkerStore.AllocateAsync),
            "the check sees a default left in place (the in-memory store reports every outcome when the call completes, as the default does)");

        defaulted.Should().BeEmpty("a decorator forwards every member to the store it routes to; the default would bypass that store's own implementation");
    }

    [Theory]
    [InlineData(typeof(InMemoryWorkerStore))]
    [InlineData(typeof(PostgresWorkerStoreOptions))]
    [InlineData(typeof(SqlServerWorkerStoreOptions))]
    public void EveryStore_ImplementsTheActivationFenceItself(Type ofAssembly)
    {
        var store = ofAssembly.Assembly.GetTypes().Single(t => t.IsClass && !t.IsAbstract && typeof(IWorkerStore).IsAssignableFrom(t));

        var defaulted = DefaultedMembers(store);

        defaulted.Should().NotContain(FenceMembers, $"{store.Name} keeps activation fences: with the defaults, a superseded activation's statements would not be refused");
    }

    /// <summary>The members of <see cref="IWorkerStore"/> that <paramref name="type"/> leaves to their default body.</summary>
    private static List<string> DefaultedMembers(Type type)
    {
        var map = type.GetInterfaceMap(typeof(IWorkerStore));
        return [.. map.TargetMethods.Where(m => m.DeclaringType == typeof(IWorkerStore) && !m.IsPrivate).Select(m => m.Name)];
    }
}
