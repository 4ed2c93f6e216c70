-- What the audit looked at, printed with its verdict.
SELECT (SELECT count(*) FROM {schema}.workers WHERE @pool_id::text IS NULL OR pool_id = @pool_id::text) AS workers,
       (SELECT count(*) FROM {schema}.allocations WHERE @pool_id::text IS NULL OR pool_id = @pool_id::text) AS active_allocations,
       (SELECT count(*) FROM {schema}.allocations WHERE @pool_id::text IS NULL OR pool_id = @pool_id::text)
     + (SELECT count(*) FROM {schema}.allocation_history WHERE @pool_id::text IS NULL OR pool_id = @pool_id::text) AS allocations;
