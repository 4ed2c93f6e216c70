using System.Diagnostics.Metrics;
using Allocator.LoadTests.Integration;

namespace Allocator.LoadTests.Tests.Harness;

public sealed class BatchCounterTests
{
    // Listeners are process-wide and other tests may send HTTP meanwhile: each test looks for its
    // own odd values rather than counting what was recorded.
    [Fact]
    public void HttpServerAndClientTimes_AreCollectedFromTheMeasuredPhaseOn_InMilliseconds()
    {
        using var counter = new BatchCounter();
        using var server = new Meter(BatchCounter.ServerMeterName);
        using var client = new Meter(BatchCounter.ClientMeterName);
        var serverDuration = server.CreateHistogram<double>(BatchCounter.ServerDurationInstrumentName, "s");
        var clientDuration = client.CreateHistogram<double>(BatchCounter.ClientDurationInstrumentName, "s");

        serverDuration.Record(0.111_111_7); // warm-up: left out
        counter.MarkMeasuredStart();
        serverDuration.Record(0.271_828_1);
        clientDuration.Record(0.314_159_2);

        counter.SortedServerTimes().Should().Contain(v => Math.Abs(v - 271.8281) < 1e-6)
            .And.NotContain(v => Math.Abs(v - 111.1117) < 1e-6);
        counter.SortedClientTimes().Should().Contain(v => Math.Abs(v - 314.1592) < 1e-6)
            .And.NotContain(v => Math.Abs(v - 271.8281) < 1e-6, "server and client times are kept apart");
    }

    [Fact]
    public void AnInstrumentOfTheSameNameOnAnotherMeter_IsNotCollected()
    {
        using var counter = new BatchCounter();
        using var other = new Meter("Some.Other.Library");
        counter.MarkMeasuredStart();

        other.CreateHistogram<double>(BatchCounter.ServerDurationInstrumentName, "s").Record(0.424_242_4);

        counter.SortedServerTimes().Should().NotContain(v => Math.Abs(v - 424.2424) < 1e-6);
    }
}
