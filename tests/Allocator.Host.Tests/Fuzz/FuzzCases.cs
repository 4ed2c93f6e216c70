using System.Globalization;
using System.Text;
using System.Text.Json.Nodes;

namespace Allocator.Host.Tests.Fuzz;

/// <summary>What a body member holds, so that the fuzzer knows its valid values and which values are certainly invalid.</summary>
internal enum FieldKind
{
    Id,
    SessionKey,
    Address,
    Strategy,

    /// <summary>A pool's placement (issue 49): <c>spread</c> or <c>pack</c>.</summary>
    Placement,
    Bool,
    IntRange,
    Tags,
    WorkerEntries,

    /// <summary>A database name of the service (issue 23); the test host's only one is <c>default</c>.</summary>
    Database,

    /// <summary>The pools of a preferred-pools allocate (issue 49): 1 to 8 pool ids, none twice.</summary>
    PoolList,
}

/// <summary>One member of a body: its name, kind, range (numbers) and whether it is required.</summary>
internal sealed record Field(string Name, FieldKind Kind, bool Required, long Min = 0, long Max = 0);

/// <summary>
/// The bodies of the /v1 endpoints that take one, described member by member. A new endpoint
/// with a body and no entry here fails the fuzzer (so no endpoint escapes it).
/// </summary>
internal static class BodyShapes
{
    public static readonly IReadOnlyDictionary<string, Field[]> ByRoute = new Dictionary<string, Field[]>
    {
        ["PUT /v1/pools/{pool}"] =
        [
            new("strategy", FieldKind.Strategy, false),
            new("defaultLeaseSeconds", FieldKind.IntRange, false, 1, 2_592_000),
            new("maxWaitMs", FieldKind.IntRange, false, 0, 600_000),
            new("heartbeatTimeoutSeconds", FieldKind.IntRange, false, 1, 86_400),
            new("serializeRegistrations", FieldKind.Bool, false),
            new("placement", FieldKind.Placement, false),
            new("database", FieldKind.Database, false),
        ],
        ["POST /v1/pools/{pool}/move"] =
        [
            new("database", FieldKind.Database, true),
        ],
        ["PUT /v1/pools/{pool}/workers/{worker}"] =
        [
            new("address", FieldKind.Address, true),
            new("capacity", FieldKind.IntRange, true, 1, AllocatorLimits.MaxCapacity),
            new("tags", FieldKind.Tags, false),
        ],
        ["POST /v1/pools/{pool}/workers"] =
        [
            new("workers", FieldKind.WorkerEntries, true),
        ],
        ["POST /v1/pools/{pool}/workers/{worker}/load"] =
        [
            new("epoch", FieldKind.IntRange, true, 1, long.MaxValue),
            new("loadIndex", FieldKind.IntRange, false, 0, AllocatorLimits.MaxLoadIndex),
        ],
        ["POST /v1/pools/{pool}/allocations"] =
        [
            new("sessionKey", FieldKind.SessionKey, false),
            new("units", FieldKind.IntRange, false, 1, AllocatorLimits.MaxCapacity),
            new("tags", FieldKind.Tags, false),
            new("maxWaitMs", FieldKind.IntRange, false, 0, 600_000),
            new("leaseSeconds", FieldKind.IntRange, false, 1, 2_592_000),
        ],
        ["POST /v1/allocations"] =
        [
            new("pools", FieldKind.PoolList, true),
            new("sessionKey", FieldKind.SessionKey, false),
            new("units", FieldKind.IntRange, false, 1, AllocatorLimits.MaxCapacity),
            new("tags", FieldKind.Tags, false),
            new("maxWaitMs", FieldKind.IntRange, false, 0, 600_000),
            new("leaseSeconds", FieldKind.IntRange, false, 1, 2_592_000),
        ],
        ["POST /v1/pools/{pool}/allocations/{allocationId}/renew"] =
        [
            new("epoch", FieldKind.IntRange, true, 1, long.MaxValue),
            new("leaseSeconds", FieldKind.IntRange, false, 1, 2_592_000),
        ],
    };

    // Entry of POST …/workers.
    public static readonly Field[] WorkerEntry =
    [
        new("workerId", FieldKind.Id, true),
        new("address", FieldKind.Address, true),
        new("capacity", FieldKind.IntRange, true, 1, AllocatorLimits.MaxCapacity),
        new("tags", FieldKind.Tags, false),
    ];
}

/// <summary>
/// Values for the fuzzer: valid ones (to fill the members a case does not break) and values that
/// are certainly invalid for a member's kind, written as raw JSON text so that malformed numbers,
/// escapes and unpaired surrogates reach the server exactly as written.
/// </summary>
internal static class FuzzValues
{
    public static readonly string[] InvalidIds =
    [
        "\"\"", Json(new string('i', 129)), "\"a b\"", "\"-leading\"", "\".dot\"", "\"x\\u0000y\"", "\"x\\u001fy\"",
        "\"\\ud800\"", "\"x\\udc00\"", "\"é\"", "\"a/b\"", "\"a%2Fb\"", "\"日本\"", "123", "true", "[]", "{}",
    ];

    public static readonly string[] InvalidSessionKeys =
    [
        "\"\"", Json(new string('k', 201)), "\"a\\u0000b\"", "\"tab\\tkey\"", "\"\\ud800\"", "\"\\udfff\\ud800\"", "7", "[\"k\"]", "{}",
    ];

    public static readonly string[] InvalidAddresses =
    [
        Json(new string('a', 513)), "\"a\\u0001b\"", "\"line\\nbreak\"", "\"\\ud800\"", "\"ok\\udc00\"", "\"\"", "\"   \"", "42", "[]", "{}", "false",
    ];

    public static readonly string[] InvalidStrategies = ["\"random\"", "\"\"", "\"skip-locked\\u0000\"", "\"\\ud800\"", "1", "[]", "{}", "true"];

    public static readonly string[] InvalidPlacements = ["\"binpack\"", "\"\"", "\"Pack\"", "\"pack \"", "\"sp\\u0000read\"", "1", "[]", "{}", "true"];

    public static readonly string[] InvalidDatabases = ["\"nope\"", "\"\"", "\"default \"", "\"de\\u0000fault\"", "\"\\ud800\"", "1", "[]", "{}", "true"];

    /// <summary>Pool lists no request may name: empty, not a list, bad ids, a pool twice, over 8, a pool that does not exist (404).</summary>
    public static readonly string[] InvalidPoolLists =
    [
        "[]", "{}", "\"pool\"", "1", "[1]", "[null]", "[\"\"]", "[\"a b\"]", "[\"x\\u0000\"]", "[[\"p\"]]", "[{}]",
        $"[\"{TestHost.WorkerKeyPool}\",\"{TestHost.WorkerKeyPool}\"]",
        "[" + string.Join(',', Enumerable.Range(0, 9).Select(i => $"\"p{i}\"")) + "]",
        "[\"fz-no-such-pool\"]",
    ];

    public static readonly string[] InvalidBools = ["\"true\"", "1", "0", "[]", "{}", "\"\""];

    public static readonly string[] InvalidTags =
    [
        "[null]", "[\"\"]", "[\"a b\"]", "[\"a\\u0000\"]", "[\"\\ud800\"]", "[1]", "[[\"x\"]]", "[{}]", "\"gpu\"", "{}", "5",
        "[" + string.Join(',', Enumerable.Range(0, 33).Select(i => $"\"t{i}\"")) + "]",
        "[" + Json(new string('t', 65)) + "]",
    ];

    /// <summary>Certainly invalid for a member of <paramref name="field"/>'s kind.</summary>
    public static string[] InvalidFor(Field field)
    {
        var values = field.Kind switch
        {
            FieldKind.Id => InvalidIds,
            FieldKind.SessionKey => InvalidSessionKeys,
            FieldKind.Address => InvalidAddresses,
            FieldKind.Strategy => InvalidStrategies,
            FieldKind.Placement => InvalidPlacements,
            FieldKind.Bool => InvalidBools,
            FieldKind.Tags => InvalidTags,
            FieldKind.WorkerEntries => InvalidWorkerLists(),
            FieldKind.Database => InvalidDatabases,
            FieldKind.PoolList => InvalidPoolLists,
            _ => InvalidNumbers(field),
        };
        return field.Required ? [.. values, "null"] : values;
    }

    private static string[] InvalidNumbers(Field field)
    {
        List<string> values =
        [
            "\"1\"", "1.5", "1e309", "-1e309", "1e2", "99999999999999999999999", "-9223372036854775809", "9223372036854775808",
            "true", "[]", "{}", "\"\"", "NaN", "Infinity", "-", "0x10", "01",
        ];
        if (field.Min > long.MinValue)
        {
            values.Add((field.Min - 1).ToString(CultureInfo.InvariantCulture));
            values.Add(long.MinValue.ToString(CultureInfo.InvariantCulture));
        }

        if (field.Max < long.MaxValue)
        {
            values.Add((field.Max + 1).ToString(CultureInfo.InvariantCulture));
            values.Add(int.MaxValue.ToString(CultureInfo.InvariantCulture));
            values.Add(((long)int.MaxValue + 1).ToString(CultureInfo.InvariantCulture));
        }

        return [.. values];
    }

    private static string[] InvalidWorkerLists()
    {
        var good = "{\"workerId\":\"fz-new\",\"address\":\"10.9.9.9:1\",\"capacity\":1}";
        return
        [
            "[]", "[null]", $"[{good},null]", "[1]", "[\"w\"]", "[[]]", "{}", "\"workers\"",
            $"[{good},{good}]", // one id twice
            "[{\"workerId\":\"fz-new\",\"address\":\"a\"}]", // capacity missing
            "[{\"workerId\":\"fz-new\",\"address\":\"a\",\"capacity\":1,\"extra\":1}]",
            "[" + string.Join(',', Enumerable.Range(0, AllocatorLimits.MaxRegistrationBatch + 1).Select(i => $"{{\"workerId\":\"n{i}\",\"address\":\"a\",\"capacity\":1}}")) + "]",
        ];
    }

    /// <summary>A valid value for the member (the fuzzer fills untouched members with these).</summary>
    public static string ValidFor(Field field, Random random) => field.Kind switch
    {
        FieldKind.Id => Json("fz-" + random.Next(1000, 9999).ToString(CultureInfo.InvariantCulture)),
        FieldKind.SessionKey => Json("fuzz-" + random.Next().ToString(CultureInfo.InvariantCulture)),
        FieldKind.Address => Json("10.0.0." + random.Next(1, 250).ToString(CultureInfo.InvariantCulture) + ":3389"),
        FieldKind.Strategy => random.Next(2) == 0 ? "\"skip-locked\"" : "\"strict\"",
        FieldKind.Placement => random.Next(2) == 0 ? "\"spread\"" : "\"pack\"",
        FieldKind.Bool => random.Next(2) == 0 ? "true" : "false",
        FieldKind.Tags => random.Next(2) == 0 ? "[]" : "[\"gpu\"]",
        FieldKind.WorkerEntries => "[{\"workerId\":\"fz-new\",\"address\":\"10.9.9.9:1\",\"capacity\":1}]",
        FieldKind.Database => random.Next(2) == 0 ? "\"default\"" : "\"DEFAULT\"",
        FieldKind.PoolList => $"[\"{TestHost.WorkerKeyPool}\"]",
        _ => Math.Clamp(field.Min + random.Next(0, 3), field.Min, field.Max).ToString(CultureInfo.InvariantCulture),
    };

    public static string Json(string value) => JsonValue.Create(value).ToJsonString();
}

/// <summary>Whole-body garbage: each is invalid whatever the endpoint expects.</summary>
internal static class BadBodies
{
    public static IEnumerable<(string Name, byte[] Bytes)> All(string validBody)
    {
        yield return ("empty", []);
        yield return ("null", "null"u8.ToArray());
        yield return ("array", "[]"u8.ToArray());
        yield return ("number", "1"u8.ToArray());
        yield return ("string", "\"{}\""u8.ToArray());
        yield return ("open brace", "{"u8.ToArray());
        yield return ("close brace", "}"u8.ToArray());
        yield return ("truncated", Encoding.UTF8.GetBytes(validBody[..Math.Max(1, validBody.Length / 2)]));
        yield return ("trailing garbage", Encoding.UTF8.GetBytes(validBody + "x"));
        yield return ("two documents", Encoding.UTF8.GetBytes(validBody + validBody));
        yield return ("unknown member", Encoding.UTF8.GetBytes(validBody.TrimEnd('}') + (validBody.Length > 2 ? "," : "") + "\"zzz\":1}"));
        yield return ("comment", Encoding.UTF8.GetBytes("/* c */" + validBody));
        yield return ("trailing comma", Encoding.UTF8.GetBytes(validBody.TrimEnd('}') + (validBody.Length > 2 ? "," : "") + "}"));
        yield return ("single quotes", Encoding.UTF8.GetBytes(validBody.Replace('"', '\'')));
        yield return ("nested 10000 deep", Encoding.UTF8.GetBytes(new string('[', 10_000) + new string(']', 10_000)));
        yield return ("nested objects 200 deep", Encoding.UTF8.GetBytes(string.Concat(Enumerable.Repeat("{\"a\":", 200)) + "1" + new string('}', 200)));
        yield return ("invalid UTF-8", [(byte)'{', (byte)'"', 0xC3, 0x28, (byte)'"', (byte)':', (byte)'1', (byte)'}']);
        yield return ("lone surrogate bytes", [(byte)'{', (byte)'"', 0xED, 0xA0, 0x80, (byte)'"', (byte)':', (byte)'1', (byte)'}']);
        yield return ("NUL bytes", [0, 0, 0, 0]);
        yield return ("UTF-16 body", Encoding.Unicode.GetBytes(validBody));
        yield return ("BOM and garbage", [0xEF, 0xBB, 0xBF, (byte)'x']);
        yield return ("2 MiB", Encoding.UTF8.GetBytes("{\"tags\":[\"" + new string('x', 2 * 1024 * 1024) + "\"]}"));
    }
}
