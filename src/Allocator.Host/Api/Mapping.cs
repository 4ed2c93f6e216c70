namespace Allocator.Host.Api;

internal static class Mapping
{
    public static PoolResponse ToResponse(this Pool pool, string database) => new(
        pool.PoolId,
        pool.Settings.Strategy.ToName(),
        Seconds(pool.Settings.DefaultLease),
        (int)pool.Settings.MaxWait.TotalMilliseconds,
        Seconds(pool.Settings.HeartbeatTimeout),
        pool.Settings.SerializeRegistrations,
        database,
        pool.Settings.Placement.ToName());

    public static PoolStatisticsResponse ToResponse(this PoolStatistics s, int waiters, string grainSilo, string database, Demand.DemandEstimate? demand) => new(
        s.PoolId,
        s.Settings.Strategy.ToName(),
        Seconds(s.Settings.DefaultLease),
        (int)s.Settings.MaxWait.TotalMilliseconds,
        s.Workers,
        s.AvailableWorkers,
        s.Capacity,
        s.Load,
        s.FreeSlots,
        s.ActiveAllocations,
        s.MinLoad,
        s.MaxLoad,
        s.LoadSpread,
        s.Utilization,
        waiters,
        grainSilo,
        database,
        s.Settings.Placement.ToName(),
        demand);

    public static WorkerResponse ToResponse(this Worker w) => new(
        w.PoolId, w.WorkerId, w.Address, w.Capacity, w.Load, w.ReportedLoadIndex, w.State.ToName(), w.Tags, w.Epoch, w.LastHeartbeat);

    public static RegistrationResponse ToResponse(this RegistrationOutcome o) => new(
        o.WorkerId,
        o.Status switch
        {
            RegistrationStatus.Created => "created",
            RegistrationStatus.Updated => "updated",
            _ => "capacity-below-load",
        },
        o.Worker.ToResponse());

    public static AllocationResponse ToResponse(this Allocation a) => new(
        a.AllocationId, a.PoolId, a.WorkerId, a.Address, a.SessionKey, a.Units, a.Epoch, a.CreatedAt, a.ExpiresAt, a.EndedAt, a.IsActive);

    private static int? Seconds(TimeSpan? value) => value is { } v ? (int)v.TotalSeconds : null;
}
