namespace Allocator.Grains.Tests;

/// <summary>One pool at a time may try for a request waiting in several pools; none after it is served.</summary>
public sealed class ClaimBookTests
{
    [Fact]
    public async Task FirstAsk_IsGrantedAtOnce_TheNextWaitsUntilTheHolderGivesBack()
    {
        var book = new ClaimBook();
        var attempt = book.Begin();

        var a = await book.Ask("a", attempt);
        var b = book.Ask("b", attempt);

        a.Should().BePositive();
        b.IsCompleted.Should().BeFalse("pool a holds the claim: pool b waits its turn");
        book.Holder.Should().Be("a");

        book.GiveBack("a", attempt, a);

        (await b).Should().BeGreaterThan(a);
        book.Holder.Should().Be("b");
    }

    [Fact]
    public async Task End_RefusesTheAsksWaiting_AndEveryLaterAsk()
    {
        var book = new ClaimBook();
        var attempt = book.Begin();
        await book.Ask("a", attempt);
        var b = book.Ask("b", attempt);

        book.End();

        (await b).Should().Be(0, "the request was served (or is over): no other pool may allocate for it");
        (await book.Ask("c", attempt)).Should().Be(0);
        book.Holder.Should().BeNull();
    }

    [Fact]
    public async Task AStaleGiveBack_FromBeforeTheSamePoolAskedAgain_ChangesNothing()
    {
        var book = new ClaimBook();
        var attempt = book.Begin();
        var first = await book.Ask("a", attempt);

        // Pool a parked the request (give-back sent), woke it again and asked before the give-back arrived.
        var second = await book.Ask("a", attempt);
        var b = book.Ask("b", attempt);
        book.GiveBack("a", attempt, first);

        second.Should().BeGreaterThan(first);
        b.IsCompleted.Should().BeFalse("pool a is trying under its second grant: a give-back of its first must not let b try too");
        book.Holder.Should().Be("a");

        book.GiveBack("a", attempt, second);
        (await b).Should().BePositive();
    }

    [Fact]
    public async Task Left_ByTheHolder_PassesTheClaimOn_AndRefusesTheLeaversAsks()
    {
        var book = new ClaimBook();
        var attempt = book.Begin();
        await book.Ask("a", attempt);
        var b = book.Ask("b", attempt);
        var c = book.Ask("c", attempt);

        book.Left("b");
        book.Left("a");

        (await b).Should().Be(0, "pool b's call has ended");
        (await c).Should().BePositive();
        book.Holder.Should().Be("c");
    }

    [Fact]
    public async Task AnAskOfAnEarlierAttempt_IsRefused()
    {
        var book = new ClaimBook();
        var earlier = book.Begin();
        book.Begin();

        (await book.Ask("a", earlier)).Should().Be(0);
        (await book.Ask("a", Guid.NewGuid())).Should().Be(0);
    }
}
