using System.Text.Json.Nodes;

namespace Allocator.Host.Tests.Contract;

/// <summary>
/// What a newer OpenAPI document breaks for a client written against an older one (issue 38,
/// ADR 0026): the HTTP API only grows within <c>/v1</c>. A break is
/// <list type="bullet">
/// <item>a path or an operation removed, or a success status an operation answered;</item>
/// <item>a required parameter or request field added (or one made required), or a request field
/// removed where unknown members are refused (<c>additionalProperties: false</c>);</item>
/// <item>a response field removed;</item>
/// <item>a type changed: a request that accepts fewer types, a response that may carry more
/// (<c>null</c> included), or another format.</item>
/// </list>
/// Anything else (new paths, operations, optional fields, response fields, statuses) is an addition.
/// </summary>
internal static class OpenApiCompatibility
{
    private static readonly string[] Methods = ["get", "put", "post", "delete", "patch", "head", "options"];

    public static IReadOnlyList<string> Breaks(JsonNode before, JsonNode after)
    {
        var breaks = new List<string>();
        var afterPaths = after["paths"]?.AsObject();
        foreach (var (path, beforeItem) in before["paths"]!.AsObject())
        {
            if (afterPaths?[path] is not { } afterItem)
            {
                breaks.Add($"path removed: {path}");
                continue;
            }

            foreach (var method in Methods.Where(m => beforeItem![m] is not null))
            {
                var where = $"{method.ToUpperInvariant()} {path}";
                if (afterItem[method] is not { } afterOperation)
                {
                    breaks.Add($"operation removed: {where}");
                    continue;
                }

                var context = new Context(before, after, breaks);
                CompareOperation(context, where, beforeItem![method]!, afterOperation);
            }
        }

        return breaks;
    }

    private static void CompareOperation(Context context, string where, JsonNode before, JsonNode after)
    {
        var beforeParameters = Parameters(context.Before, before);
        foreach (var ((@in, name), parameter) in Parameters(context.After, after))
        {
            var required = parameter["required"]?.GetValue<bool>() == true;
            if (!beforeParameters.TryGetValue((@in, name), out var old))
            {
                if (required)
                {
                    context.Breaks.Add($"required parameter added: {where} {@in} '{name}'");
                }

                continue;
            }

            if (required && old["required"]?.GetValue<bool>() != true)
            {
                context.Breaks.Add($"parameter made required: {where} {@in} '{name}'");
            }

            CompareSchema(context, $"{where} {@in} '{name}'", old["schema"], parameter["schema"], request: true, []);
        }

        var beforeBody = Resolve(context.Before, before["requestBody"]);
        var afterBody = Resolve(context.After, after["requestBody"]);
        if (afterBody is not null)
        {
            if (beforeBody is null && afterBody["required"]?.GetValue<bool>() == true)
            {
                context.Breaks.Add($"required request body added: {where}");
            }
            else if (beforeBody is not null)
            {
                CompareSchema(context, $"{where} request", JsonSchema(beforeBody), JsonSchema(afterBody), request: true, []);
            }
        }

        var afterResponses = after["responses"]?.AsObject();
        foreach (var (status, beforeResponse) in before["responses"]?.AsObject() ?? [])
        {
            if (afterResponses?[status] is not { } afterResponse)
            {
                if (status.StartsWith('2'))
                {
                    context.Breaks.Add($"success status removed: {where} {status}");
                }

                continue;
            }

            CompareSchema(context, $"{where} {status}", JsonSchema(Resolve(context.Before, beforeResponse)), JsonSchema(Resolve(context.After, afterResponse)), request: false, []);
        }
    }

    /// <summary>
    /// Compares two schemas at one place. A request schema must accept whatever it accepted (no
    /// new required member, no type narrowed); a response schema must still carry what it
    /// carried (no member removed, no type widened).
    /// </summary>
    private static void CompareSchema(Context context, string where, JsonNode? before, JsonNode? after, bool request, HashSet<(string?, string?)> seen)
    {
        if (before is null || after is null)
        {
            return;
        }

        // A recursive schema is compared once per pair of definitions.
        if (!seen.Add((before["$ref"]?.GetValue<string>() ?? before.GetPath(), after["$ref"]?.GetValue<string>() ?? after.GetPath())))
        {
            return;
        }

        before = Resolve(context.Before, before)!;
        after = Resolve(context.After, after)!;

        var (beforeTypes, afterTypes) = (Types(before), Types(after));
        if (beforeTypes.Count > 0 && afterTypes.Count > 0)
        {
            var narrowedOrWidened = request ? beforeTypes.Except(afterTypes) : afterTypes.Except(beforeTypes);
            if (narrowedOrWidened.Any())
            {
                context.Breaks.Add($"type changed: {where}: [{string.Join(", ", beforeTypes)}] -> [{string.Join(", ", afterTypes)}]");
                return;
            }
        }

        if (before["format"]?.GetValue<string>() is { } format && after["format"]?.GetValue<string>() is { } newFormat && format != newFormat)
        {
            context.Breaks.Add($"type changed: {where}: format {format} -> {newFormat}");
        }

        var beforeProperties = before["properties"]?.AsObject();
        var afterProperties = after["properties"]?.AsObject();
        var beforeRequired = Required(before);
        var afterRequired = Required(after);
        if (request)
        {
            foreach (var name in afterRequired.Where(n => !beforeRequired.Contains(n)))
            {
                context.Breaks.Add(beforeProperties?[name] is null ? $"required request field added: {where} '{name}'" : $"request field made required: {where} '{name}'");
            }

            if (after["additionalProperties"]?.GetValueKind() == System.Text.Json.JsonValueKind.False)
            {
                foreach (var (name, _) in beforeProperties ?? [])
                {
                    if (afterProperties?[name] is null)
                    {
                        context.Breaks.Add($"request field removed (unknown members are refused): {where} '{name}'");
                    }
                }
            }
        }
        else
        {
            foreach (var (name, _) in beforeProperties ?? [])
            {
                if (afterProperties?[name] is null)
                {
                    context.Breaks.Add($"response field removed: {where} '{name}'");
                }
            }
        }

        foreach (var (name, beforeProperty) in beforeProperties ?? [])
        {
            if (afterProperties?[name] is { } afterProperty)
            {
                CompareSchema(context, $"{where}.{name}", beforeProperty, afterProperty, request, seen);
            }
        }

        CompareSchema(context, $"{where}[]", before["items"], after["items"], request, seen);
    }

    private static Dictionary<(string In, string Name), JsonNode> Parameters(JsonNode document, JsonNode operation) =>
        (operation["parameters"]?.AsArray() ?? [])
            .Select(p => Resolve(document, p)!)
            .ToDictionary(p => (p["in"]!.GetValue<string>(), p["name"]!.GetValue<string>().ToLowerInvariant()), p => p);

    /// <summary>The schema of a request body's or response's JSON content (problem+json included), if any.</summary>
    private static JsonNode? JsonSchema(JsonNode? bodyOrResponse) =>
        bodyOrResponse?["content"]?.AsObject().Where(c => c.Key.Contains("json", StringComparison.Ordinal)).Select(c => c.Value?["schema"]).FirstOrDefault(s => s is not null);

    /// <summary>The non-null JSON types a schema allows ("type": "x" or ["x", "null"]); null is a type here too.</summary>
    private static List<string> Types(JsonNode schema) => schema["type"] switch
    {
        JsonValue value => [value.GetValue<string>()],
        JsonArray array => [.. array.Select(t => t!.GetValue<string>()).Order(StringComparer.Ordinal)],
        _ => [],
    };

    private static HashSet<string> Required(JsonNode schema) =>
        [.. schema["required"]?.AsArray().Select(n => n!.GetValue<string>()) ?? []];

    /// <summary>Follows a local <c>$ref</c> (<c>#/components/…</c>) to what it names.</summary>
    private static JsonNode? Resolve(JsonNode document, JsonNode? node)
    {
        for (var hops = 0; node?["$ref"]?.GetValue<string>() is { } reference && hops < 32; hops++)
        {
            node = reference.TrimStart('#').Split('/', StringSplitOptions.RemoveEmptyEntries)
                .Aggregate((JsonNode?)document, (current, segment) => current?[segment.Replace("~1", "/", StringComparison.Ordinal).Replace("~0", "~", StringComparison.Ordinal)]);
        }

        return node;
    }

    private sealed record Context(JsonNode Before, JsonNode After, List<string> Breaks);
}
