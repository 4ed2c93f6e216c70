using Allocator.Storage.SqlServer.Internal;
using Microsoft.SqlServer.TransactSql.ScriptDom;

namespace Allocator.Storage.SqlServer.Tests;

/// <summary>
/// Every embedded T-SQL script, rendered as the store sends it, parses as T-SQL (SQL Server 2022
/// grammar, Microsoft's own parser): the first check a script edited without a SQL Server engine
/// at hand gets. Parsing is not running: names, types and plans are checked only by the
/// conformance run against a server (docs/sqlserver.md).
/// </summary>
public sealed class ParsedSqlTests
{
    public static TheoryData<string> Operations => [.. SqlScripts.RawOperations.Keys.Order(StringComparer.Ordinal)];

    public static TheoryData<int> Migrations => [.. SqlScripts.Migrations.Select(m => m.Version)];

    [Theory]
    [MemberData(nameof(Operations))]
    public void Operation_Parses(string name)
    {
        var text = new SqlScripts("allocator", TimeSpan.FromSeconds(2), TimeSpan.FromSeconds(5))[name].Text;

        Parse(text).Should().BeEmpty($"{name}.sql must be valid T-SQL");
    }

    [Theory]
    [MemberData(nameof(Migrations))]
    public void Migration_Parses(int version)
    {
        var migration = SqlScripts.Migrations.Single(m => m.Version == version);

        Parse(migration.RawText.Replace("{schema}", "[allocator]", StringComparison.Ordinal)).Should().BeEmpty($"migration {migration.Name} must be valid T-SQL");
    }

    [Fact]
    public void ThePurge_TakesTheOldestEndedRowsInIndexOrder()
    {
        // Issue 24: a TOP without ORDER BY lets the optimizer scan the table under a row goal;
        // PostgreSQL's planner did, and each purge batch reread every live row.
        var text = new SqlScripts("allocator", TimeSpan.FromSeconds(2), TimeSpan.FromSeconds(5))["reap_expired"].Text;
        var finder = new CommonTableExpressions();
        Parse(text, out _).Accept(finder);

        var purge = finder.Found.Should().ContainSingle(c => c.ExpressionName.Value == "old").Subject.QueryExpression.Should().BeOfType<QuerySpecification>().Subject;
        purge.TopRowFilter.Should().NotBeNull();
        var order = purge.OrderByClause.Should().NotBeNull().And.Subject.As<OrderByClause>().OrderByElements.Should().ContainSingle().Subject;
        order.SortOrder.Should().NotBe(SortOrder.Descending);
        order.Expression.Should().BeOfType<ColumnReferenceExpression>().Which.MultiPartIdentifier.Identifiers[^1].Value.Should().Be("ended_at");
    }

    [Fact]
    public void AScriptWithAnError_IsCaught()
    {
        Parse("SELECT a FROM t WHERE").Should().NotBeEmpty("the check must be able to fail");
    }

    private static List<string> Parse(string text)
    {
        Parse(text, out var errors);
        return [.. errors.Select(e => $"line {e.Line}, column {e.Column}: {e.Message}")];
    }

    private static TSqlFragment Parse(string text, out IList<ParseError> errors)
    {
        using var reader = new StringReader(text);
        return new TSql160Parser(initialQuotedIdentifiers: true).Parse(reader, out errors);
    }

    private sealed class CommonTableExpressions : TSqlFragmentVisitor
    {
        public List<CommonTableExpression> Found { get; } = [];

        public override void Visit(CommonTableExpression node) => Found.Add(node);
    }
}
