using System.Reflection;
using Xunit.Abstractions;
using Xunit.Sdk;

[assembly: TestFramework("Allocator.Storage.SqlServer.Tests.Infrastructure.SqlServerTestFramework", "Allocator.Storage.SqlServer.Tests")]

namespace Allocator.Storage.SqlServer.Tests.Infrastructure;

/// <summary>
/// Marks a test class whose tests need a live SQL Server. Without
/// <c>ALLOCATOR_SQLSERVER_CONNECTION</c> every test of the class, inherited ones included, is
/// reported as skipped with the reason (a plain <c>Skip</c> cannot reach the conformance suite's
/// facts, which are declared in the abstract base class).
/// </summary>
[AttributeUsage(AttributeTargets.Class, Inherited = true)]
public sealed class RequiresSqlServerAttribute : Attribute;

/// <summary>The connection string of the SQL Server the tests may use, if any.</summary>
public static class SqlServerTestEnvironment
{
    public const string Variable = "ALLOCATOR_SQLSERVER_CONNECTION";

    public static string? ConnectionString => Environment.GetEnvironmentVariable(Variable) is { Length: > 0 } value ? value : null;

    public static string SkipReason =>
        $"{Variable} is not set: no SQL Server to run against (see docs/sqlserver.md for the container command line).";
}

/// <summary>xUnit 2's framework with one change at discovery: see <see cref="RequiresSqlServerAttribute"/>.</summary>
public sealed class SqlServerTestFramework(IMessageSink messageSink) : XunitTestFramework(messageSink)
{
    protected override ITestFrameworkDiscoverer CreateDiscoverer(IAssemblyInfo assemblyInfo) =>
        new Discoverer(assemblyInfo, SourceInformationProvider, DiagnosticMessageSink);

    private sealed class Discoverer(IAssemblyInfo assemblyInfo, ISourceInformationProvider sourceProvider, IMessageSink diagnosticMessageSink)
        : XunitTestFrameworkDiscoverer(assemblyInfo, sourceProvider, diagnosticMessageSink)
    {
        protected override bool FindTestsForMethod(ITestMethod testMethod, bool includeSourceInformation, IMessageBus messageBus, ITestFrameworkDiscoveryOptions discoveryOptions)
        {
            if (SqlServerTestEnvironment.ConnectionString is null
                && testMethod.TestClass.Class.ToRuntimeType()?.GetCustomAttribute<RequiresSqlServerAttribute>() is not null
                && testMethod.Method.GetCustomAttributes(typeof(FactAttribute)).Any())
            {
                var skipped = new XunitSkippedDataRowTestCase(
                    DiagnosticMessageSink,
                    discoveryOptions.MethodDisplayOrDefault(),
                    discoveryOptions.MethodDisplayOptionsOrDefault(),
                    testMethod,
                    SqlServerTestEnvironment.SkipReason);
                return ReportDiscoveredTestCase(skipped, includeSourceInformation, messageBus);
            }

            return base.FindTestsForMethod(testMethod, includeSourceInformation, messageBus, discoveryOptions);
        }
    }
}
