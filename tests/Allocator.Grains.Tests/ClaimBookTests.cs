namespace Allocator.Grains.Tests;

/// <summary>One call at a time may try for a request waiting in several pools; none after it is served, none given up on.</summary>
public sealed class ClaimBookTests
{
    [Fact]
    public async Task FirstAsk_IsGrantedAtOnce_TheNextWaitsUntilTheHolderGivesBack()
    {
        var book = new ClaimBook();
        book.Begin();
        var (a, b) = (book.Issue(), book.Issue());

        var first = await book.Ask(a);
        var second = book.Ask(b);

        first.Should().BePositive();
        second.IsCompleted.Should().BeFalse("call a holds the claim: call b waits its turn");
        book.Holds(a).Should().BeTrue();

        book.GiveBack(a, first);

        (await second).Should().BeGreaterThan(first);
        book.Holds(b).Should().BeTrue();
    }

    [Fact]
    public async Task End_RefusesTheAsksWaiting_AndEveryLaterAsk()
    {
        var book = new ClaimBook();
        book.Begin();
        var (a, b, c) = (book.Issue(), book.Issue(), book.Issue());
        await book.Ask(a);
        var waiting = book.Ask(b);

        book.End();

        (await waiting).Should().Be(0, "the request was served (or is over): no other pool may allocate for it");
        (await book.Ask(c)).Should().Be(0);
        book.Holds(a).Should().BeFalse();
    }

    [Fact]
    public async Task AStaleGiveBack_FromBeforeTheSameCallAskedAgain_ChangesNothing()
    {
        var book = new ClaimBook();
        book.Begin();
        var (a, b) = (book.Issue(), book.Issue());
        var first = await book.Ask(a);

        // Call a's pool parked the request (give-back sent), woke it again and asked before the give-back arrived.
        var second = await book.Ask(a);
        var waiting = book.Ask(b);
        book.GiveBack(a, first);

        second.Should().BeGreaterThan(first);
        waiting.IsCompleted.Should().BeFalse("call a is trying under its second grant: a give-back of its first must not let b try too");
        book.Holds(a).Should().BeTrue();

        book.GiveBack(a, second);
        (await waiting).Should().BePositive();
    }

    [Fact]
    public async Task Drop_ByTheHolder_PassesTheClaimOn_AndRefusesTheDroppedCallsAsks()
    {
        var book = new ClaimBook();
        book.Begin();
        var (a, b, c) = (book.Issue(), book.Issue(), book.Issue());
        await book.Ask(a);
        var fromB = book.Ask(b);
        var fromC = book.Ask(c);

        book.Drop(b);
        book.Drop(a);

        (await fromB).Should().Be(0, "call b was given up on");
        (await fromC).Should().BePositive();
        book.Holds(c).Should().BeTrue();
    }

    [Fact]
    public async Task ADroppedCall_ThatLivesOnElsewhere_IsNeverGrantedTheClaim_ItsResendIs()
    {
        var book = new ClaimBook();
        book.Begin();
        var lost = book.Issue();

        // Its answer was lost with a silo that left; the call itself was forwarded and lives on.
        book.Drop(lost);
        var resend = book.Issue();

        (await book.Ask(lost)).Should().Be(0, "a call given up on must never allocate: its caller was told nothing of it");
        (await book.Ask(resend)).Should().BePositive();
    }

    [Fact]
    public async Task ATicketNeverIssued_OrFromAnEarlierWait_IsRefused()
    {
        var book = new ClaimBook();
        book.Begin();
        var earlier = book.Issue();
        book.Begin();

        (await book.Ask(earlier)).Should().Be(0);
        (await book.Ask(Guid.NewGuid())).Should().Be(0);
    }
}
