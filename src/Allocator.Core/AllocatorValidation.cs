namespace Allocator;

/// <summary>
/// Argument checks shared by every store and by the host. Each <c>Check*</c> method returns a
/// message that says what is wrong, or <see langword="null"/> when the value is acceptable; each
/// <c>Ensure*</c> method throws <see cref="ArgumentException"/> with that message.
/// </summary>
public static class AllocatorValidation
{
    /// <summary>Pool and worker ids: 1–128 characters from <c>[A-Za-z0-9._:@-]</c>, starting with a letter or digit.</summary>
    public static string? CheckId(string? value, string what)
    {
        if (string.IsNullOrEmpty(value))
        {
            return $"{what} must not be empty.";
        }

        if (value.Length > AllocatorLimits.MaxIdLength)
        {
            return $"{what} is {value.Length} characters long; the maximum is {AllocatorLimits.MaxIdLength}.";
        }

        if (!char.IsAsciiLetterOrDigit(value[0]))
        {
            return $"{what} must start with an ASCII letter or digit.";
        }

        foreach (var c in value)
        {
            if (!(char.IsAsciiLetterOrDigit(c) || c is '.' or '_' or ':' or '@' or '-'))
            {
                return $"{what} may contain only ASCII letters, digits and . _ : @ - (found '{Printable(c)}').";
            }
        }

        return null;
    }

    /// <summary>Session keys: 1–200 characters without control characters.</summary>
    public static string? CheckSessionKey(string? value)
    {
        if (string.IsNullOrEmpty(value))
        {
            return "sessionKey must not be empty.";
        }

        if (value.Length > AllocatorLimits.MaxSessionKeyLength)
        {
            return $"sessionKey is {value.Length} characters long; the maximum is {AllocatorLimits.MaxSessionKeyLength}.";
        }

        return value.Any(char.IsControl) ? "sessionKey must not contain control characters." : null;
    }

    public static string? CheckTags(IReadOnlyList<string>? tags, string what)
    {
        if (tags is null)
        {
            return null;
        }

        if (tags.Count > AllocatorLimits.MaxTags)
        {
            return $"{what} has {tags.Count} entries; the maximum is {AllocatorLimits.MaxTags}.";
        }

        foreach (var tag in tags)
        {
            if (string.IsNullOrEmpty(tag))
            {
                return $"{what} must not contain an empty tag.";
            }

            if (tag.Length > AllocatorLimits.MaxTagLength || tag.Any(char.IsControl) || tag.Any(char.IsWhiteSpace))
            {
                return $"{what} entry '{Truncate(tag)}' must be 1–{AllocatorLimits.MaxTagLength} characters without spaces or control characters.";
            }
        }

        return null;
    }

    public static string? CheckCapacity(int capacity) =>
        capacity is < 1 or > AllocatorLimits.MaxCapacity
            ? $"capacity must be between 1 and {AllocatorLimits.MaxCapacity} (was {capacity})."
            : null;

    public static string? CheckUnits(int units) =>
        units is < 1 or > AllocatorLimits.MaxCapacity
            ? $"units must be between 1 and {AllocatorLimits.MaxCapacity} (was {units})."
            : null;

    public static string? CheckLease(TimeSpan? lease, string what = "lease") =>
        lease is { } l && (l < AllocatorLimits.MinLease || l > AllocatorLimits.MaxLease)
            ? $"{what} must be between {AllocatorLimits.MinLease.TotalSeconds:0} and {AllocatorLimits.MaxLease.TotalSeconds:0} seconds."
            : null;

    public static string? CheckLoadIndex(int? loadIndex) =>
        loadIndex is < 0 or > AllocatorLimits.MaxLoadIndex
            ? $"loadIndex must be between 0 and {AllocatorLimits.MaxLoadIndex} (was {loadIndex})."
            : null;

    public static string? CheckAddress(string? address) =>
        address is { Length: > AllocatorLimits.MaxAddressLength }
            ? $"address is {address.Length} characters long; the maximum is {AllocatorLimits.MaxAddressLength}."
            : address is not null && address.Any(char.IsControl) ? "address must not contain control characters." : null;

    public static string? CheckRequest(AllocationRequest request)
    {
        ArgumentNullException.ThrowIfNull(request);
        return CheckSessionKey(request.SessionKey)
            ?? CheckUnits(request.Units)
            ?? CheckTags(request.RequiredTags, "tags")
            ?? CheckLease(request.Lease)
            ?? CheckLease(request.FallbackLease, "fallbackLease")
            ?? (request.Owner is null ? null : CheckId(request.Owner, "owner"));
    }

    public static string? CheckRegistration(WorkerRegistration registration)
    {
        ArgumentNullException.ThrowIfNull(registration);
        return CheckId(registration.WorkerId, "workerId")
            ?? CheckCapacity(registration.Capacity)
            ?? CheckAddress(registration.Address)
            ?? CheckTags(registration.Tags, "tags");
    }

    public static void EnsurePoolId(string? poolId) => Throw(CheckId(poolId, "poolId"), nameof(poolId));

    public static void EnsureWorkerId(string? workerId) => Throw(CheckId(workerId, "workerId"), nameof(workerId));

    /// <summary>Validates a whole allocation batch before anything is written.</summary>
    public static void EnsureRequests(IReadOnlyList<AllocationRequest> requests)
    {
        ArgumentNullException.ThrowIfNull(requests);
        if (requests.Count == 0 || requests.Count > AllocatorLimits.MaxBatchSize)
        {
            throw new ArgumentException($"A batch holds 1–{AllocatorLimits.MaxBatchSize} requests (was {requests.Count}).", nameof(requests));
        }

        for (var i = 0; i < requests.Count; i++)
        {
            if (CheckRequest(requests[i]) is { } error)
            {
                throw new ArgumentException($"Request {i}: {error}", nameof(requests));
            }
        }
    }

    /// <summary>Validates a whole release batch before anything is written (ids and epochs are the store's to judge).</summary>
    public static void EnsureReleases(IReadOnlyList<LeaseRelease> releases)
    {
        ArgumentNullException.ThrowIfNull(releases);
        if (releases.Count == 0 || releases.Count > AllocatorLimits.MaxBatchSize)
        {
            throw new ArgumentException($"A release batch holds 1–{AllocatorLimits.MaxBatchSize} releases (was {releases.Count}).", nameof(releases));
        }
    }

    /// <summary>Validates a whole registration batch before anything is written.</summary>
    public static void EnsureRegistrations(IReadOnlyList<WorkerRegistration> registrations)
    {
        ArgumentNullException.ThrowIfNull(registrations);
        if (registrations.Count == 0 || registrations.Count > AllocatorLimits.MaxRegistrationBatch)
        {
            throw new ArgumentException($"A registration batch holds 1–{AllocatorLimits.MaxRegistrationBatch} workers (was {registrations.Count}).", nameof(registrations));
        }

        var seen = new HashSet<string>(StringComparer.Ordinal);
        foreach (var registration in registrations)
        {
            if (CheckRegistration(registration) is { } error)
            {
                throw new ArgumentException($"Worker '{Truncate(registration.WorkerId)}': {error}", nameof(registrations));
            }

            if (!seen.Add(registration.WorkerId))
            {
                throw new ArgumentException($"Worker '{registration.WorkerId}' appears twice in one registration batch.", nameof(registrations));
            }
        }
    }

    public static void EnsureSettings(PoolSettings settings)
    {
        ArgumentNullException.ThrowIfNull(settings);
        Throw(CheckLease(settings.DefaultLease, "defaultLease"), nameof(settings));
        if (settings.MaxWait < TimeSpan.Zero || settings.MaxWait > AllocatorLimits.MaxWait)
        {
            throw new ArgumentException($"maxWait must be between 0 and {AllocatorLimits.MaxWait.TotalSeconds:0} seconds.", nameof(settings));
        }

        if (settings.HeartbeatTimeout is { } h && (h < TimeSpan.FromSeconds(1) || h > TimeSpan.FromDays(1)))
        {
            throw new ArgumentException("heartbeatTimeout must be between 1 second and 1 day.", nameof(settings));
        }

        if (!Enum.IsDefined(settings.Strategy))
        {
            throw new ArgumentException($"Unknown strategy {(int)settings.Strategy}.", nameof(settings));
        }

        if (!Enum.IsDefined(settings.Placement))
        {
            throw new ArgumentException($"Unknown placement {(int)settings.Placement}.", nameof(settings));
        }
    }

    private static void Throw(string? error, string paramName)
    {
        if (error is not null)
        {
            throw new ArgumentException(error, paramName);
        }
    }

    private static string Printable(char c) => char.IsControl(c) ? $"\\u{(int)c:x4}" : c.ToString();

    private static string Truncate(string? value) =>
        value is null ? "" : value.Length <= 40 ? value : string.Concat(value.AsSpan(0, 40), "…");
}
