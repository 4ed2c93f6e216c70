using Allocator.LoadTests;
using Allocator.LoadTests.Cli;
using Allocator.LoadTests.Harness;

try
{
    var commandLine = CommandLine.Parse(args);
    using var cancellation = new CancellationTokenSource();
    Console.CancelKeyPress += (_, e) =>
    {
        e.Cancel = true;
        cancellation.Cancel();
    };
    return await LoadTestProgram.RunAsync(commandLine, args, Console.Out, Console.Error, cancellation.Token, LiveProgressDisplay.ForTerminal());
}
catch (ArgumentException e)
{
    Console.Error.WriteLine(e.Message);
    Console.Error.WriteLine(CommandLine.Usage);
    return ExitCodes.Usage;
}
