using System.Reflection;
using System.Runtime.InteropServices;

namespace Allocator.Grains.Tests.Contract;

/// <summary>
/// The wire identities of a build's grains and Orleans-serialized types, read from its compiled
/// Allocator.Grains assembly without running it (a metadata-only load, so the previous release's
/// assembly can be read beside this one). One line per identity; two builds can share a cluster
/// when every line of the older one is a line of the newer one (ADR 0026):
/// <list type="bullet">
/// <item><c>grain &lt;grain type&gt;</c>: a grain class's <c>[GrainType]</c>, the key of its activations;</item>
/// <item><c>interface &lt;type&gt;</c>: a grain interface, by the name Orleans puts on the wire;</item>
/// <item><c>method &lt;interface&gt;#&lt;id&gt; (&lt;argument types&gt;) -&gt; &lt;result&gt;</c>: a grain method's invoker, as the
/// code generator made it (the id, the arguments in order, the result);</item>
/// <item><c>type &lt;alias&gt;</c> and <c>field &lt;alias&gt; &lt;id&gt; &lt;type&gt;</c>: a <c>[GenerateSerializer]</c> type and each of its <c>[Id]</c> members;</item>
/// <item><c>enum &lt;type&gt; &lt;member&gt;=&lt;value&gt;</c>: the numbers of an enum that crosses as an integer;</item>
/// <item><c>migration-key &lt;key&gt;</c>: a key under which a moving grain hands state to its next activation (<c>MigrationKeys</c>).</item>
/// </list>
/// A method's name is only a comment after <c>//</c>: the wire knows its id.
/// </summary>
internal static class WireContract
{
    /// <summary>Enums whose values the surrogates (Serialization/CoreSurrogates.cs) send as integers.</summary>
    public static readonly string[] IntegerEnums =
    [
        "Allocator.AllocationStatus",
        "Allocator.LeaseStatus",
        "Allocator.RegistrationStatus",
        "Allocator.WorkerState",
        "Allocator.AllocatorErrorKind",
    ];

    /// <summary>Reads the identities of the Allocator.Grains assembly in <paramref name="directory"/> (with its dependencies beside it).</summary>
    public static WireIdentities Read(string directory)
    {
        var assemblies = Directory.GetFiles(directory, "*.dll")
            .Concat(Directory.GetFiles(RuntimeEnvironment.GetRuntimeDirectory(), "*.dll"))
            .GroupBy(Path.GetFileName, StringComparer.OrdinalIgnoreCase)
            .Select(g => g.First());
        using var context = new MetadataLoadContext(new PathAssemblyResolver(assemblies));
        var grains = context.LoadFromAssemblyPath(Path.Combine(directory, "Allocator.Grains.dll"));
        var core = context.LoadFromAssemblyPath(Path.Combine(directory, "Allocator.Core.dll"));

        var lines = new List<string>();
        var versions = new Dictionary<string, int>(StringComparer.Ordinal);
        var missingAliases = new List<string>();
        foreach (var type in grains.GetTypes())
        {
            if (Attribute(type, "Orleans.GrainTypeAttribute") is { } grainType)
            {
                lines.Add($"grain {grainType.ConstructorArguments[0].Value}");
            }

            if (type.IsInterface && type.GetInterfaces().Any(i => i.FullName == "Orleans.IGrain"))
            {
                var name = WireName(type);
                lines.Add($"interface {name}");
                versions[name] = Attribute(type, "Orleans.CodeGeneration.VersionAttribute") is { } version ? Convert.ToInt32(version.ConstructorArguments[0].Value, System.Globalization.CultureInfo.InvariantCulture) : 0;
            }

            foreach (var alias in type.GetCustomAttributesData().Where(a => a.AttributeType.FullName == "Orleans.CompoundTypeAliasAttribute"))
            {
                if (Invoker(type, alias) is { } method)
                {
                    lines.Add(method);
                }
            }

            if (type.Name == "MigrationKeys")
            {
                foreach (var key in type.GetFields(BindingFlags.Public | BindingFlags.Static).Where(f => f.IsLiteral))
                {
                    lines.Add($"migration-key {key.GetRawConstantValue()}");
                }
            }

            if (Attribute(type, "Orleans.GenerateSerializerAttribute") is not null)
            {
                if (Attribute(type, "Orleans.AliasAttribute") is not { } alias)
                {
                    missingAliases.Add(type.FullName!);
                    continue;
                }

                var name = (string)alias.ConstructorArguments[0].Value!;
                lines.Add($"type {name}");
                foreach (var (id, memberType) in Fields(type))
                {
                    lines.Add($"field {name} {id} {Format(memberType)}");
                }
            }
        }

        foreach (var name in IntegerEnums)
        {
            var type = core.GetType(name, throwOnError: true)!;
            foreach (var field in type.GetFields(BindingFlags.Public | BindingFlags.Static))
            {
                lines.Add($"enum {name} {field.Name}={Convert.ToInt64(field.GetRawConstantValue(), System.Globalization.CultureInfo.InvariantCulture)}");
            }
        }

        return new WireIdentities([.. lines.Order(StringComparer.Ordinal)], versions, missingAliases);
    }

    /// <summary>The lines of a contract file: blank lines and <c>#</c> comments skipped, a trailing <c>// …</c> cut.</summary>
    public static IReadOnlyList<string> Parse(IEnumerable<string> fileLines) =>
        [.. fileLines
            .Select(Identity)
            .Where(line => line.Length > 0 && !line.StartsWith('#'))];

    /// <summary>A line without its trailing comment.</summary>
    public static string Identity(string line)
    {
        var comment = line.IndexOf("//", StringComparison.Ordinal);
        return (comment < 0 ? line : line[..comment]).Trim();
    }

    /// <summary>What <paramref name="now"/> broke of <paramref name="before"/>: each line of before that now lacks.</summary>
    public static IReadOnlyList<string> Broken(IEnumerable<string> before, WireIdentities now)
    {
        var current = now.Lines.Select(Identity).ToHashSet(StringComparer.Ordinal);
        return [.. before.Select(Identity).Where(line => !current.Contains(line))];
    }

    /// <summary><c>method …</c> for a grain method's invoker (<c>[CompoundTypeAlias("inv", GrainReference, interface, id)]</c>).</summary>
    private static string? Invoker(Type invokable, CustomAttributeData alias)
    {
        var args = alias.ConstructorArguments;
        if (args.Count != 1 || args[0].Value is not IReadOnlyCollection<CustomAttributeTypedArgument> path
            || path.Select(p => p.Value).ToList() is not [string kind, Type proxy, Type @interface, string id]
            || kind != "inv" || proxy.FullName != "Orleans.Runtime.GrainReference")
        {
            return null;
        }

        var arguments = invokable.GetFields(BindingFlags.Public | BindingFlags.Instance)
            .Where(f => f.Name.StartsWith("arg", StringComparison.Ordinal))
            .OrderBy(f => int.Parse(f.Name[3..], System.Globalization.CultureInfo.InvariantCulture))
            .Select(f => f.FieldType)
            .ToList();
        var result = Result(invokable.BaseType!);
        // The name is only a comment: the method that pins this id, else the one signature that fits.
        var methods = @interface.GetMethods();
        var pinned = methods.Where(m => m.GetCustomAttributesData().Any(a => a.AttributeType.FullName == "Orleans.AliasAttribute" && (string?)a.ConstructorArguments[0].Value == id)).ToList();
        var fitting = methods.Where(m => m.GetParameters().Select(p => p.ParameterType).SequenceEqual(arguments) && Result(m.ReturnType) == result).ToList();
        var name = pinned is [var p] ? p.Name : fitting is [var f] ? f.Name : "?";
        return $"method {WireName(@interface)}#{id} ({string.Join(", ", arguments.Select(Format))}) -> {result} // {name}";
    }

    /// <summary>
    /// The result an invoker's base class carries (<c>TaskRequest&lt;T&gt;</c>, <c>TaskRequest</c>), or a
    /// method's task type: <c>Task&lt;T&gt;</c> or <c>Task</c>.
    /// </summary>
    private static string Result(Type type) =>
        type.IsGenericType ? $"Task<{Format(type.GetGenericArguments()[0])}>" : "Task";

    private static IEnumerable<(uint Id, Type Type)> Fields(Type type)
    {
        const BindingFlags all = BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Instance | BindingFlags.DeclaredOnly;
        var members = type.GetFields(all).Select(f => (Member: (MemberInfo)f, Type: f.FieldType))
            .Concat(type.GetProperties(all).Select(p => (Member: (MemberInfo)p, Type: p.PropertyType)));
        foreach (var (member, memberType) in members)
        {
            if (member.GetCustomAttributesData().FirstOrDefault(a => a.AttributeType.FullName == "Orleans.IdAttribute") is { } id)
            {
                yield return ((uint)id.ConstructorArguments[0].Value!, memberType);
            }
        }
    }

    private static CustomAttributeData? Attribute(Type type, string fullName) =>
        type.GetCustomAttributesData().FirstOrDefault(a => a.AttributeType.FullName == fullName);

    /// <summary>How Orleans names a type on the wire without an alias: its full name and assembly.</summary>
    private static string WireName(Type type) => $"{type.FullName},{type.Assembly.GetName().Name}";

    /// <summary>A type as C# writes it (<c>System.TimeSpan?</c>, <c>System.String[]</c>, <c>Task&lt;T&gt;</c>).</summary>
    internal static string Format(Type type)
    {
        if (type.IsArray)
        {
            return Format(type.GetElementType()!) + "[]";
        }

        if (type.IsGenericType)
        {
            var arguments = type.GetGenericArguments().Select(Format).ToList();
            if (type.GetGenericTypeDefinition().FullName == "System.Nullable`1")
            {
                return arguments[0] + "?";
            }

            var name = type.GetGenericTypeDefinition().FullName!;
            return $"{name[..name.IndexOf('`', StringComparison.Ordinal)]}<{string.Join(", ", arguments)}>";
        }

        return type.FullName ?? type.Name;
    }
}

/// <summary>A build's wire identities (<see cref="WireContract.Read"/>).</summary>
/// <param name="Lines">Every identity, sorted.</param>
/// <param name="InterfaceVersions">Each grain interface's <c>[Version]</c> (0 without one).</param>
/// <param name="SerializedTypesWithoutAlias">Serialized types named only by their CLR name (no stable identity).</param>
internal sealed record WireIdentities(IReadOnlyList<string> Lines, IReadOnlyDictionary<string, int> InterfaceVersions, IReadOnlyList<string> SerializedTypesWithoutAlias);
