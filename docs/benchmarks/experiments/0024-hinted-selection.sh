#!/usr/bin/env bash
# ADR 0024, "Selection from a grain-held order": what HOT updates of workers would save, measured
# inside the database. Two databases on the server of eng/postgres.sh, the store's own schema and
# functions, 1,000 workers of capacity 1,000, then rounds of a PL/pgSQL loop (one backend) that
# allocates a batch through allocate_batch and releases it through release_batch, COMMIT after each:
#   today:        allocate_batch as it is (ordered read of workers_pick);
#   hinted:       allocate_batch with the candidate read replaced by a lookup of the batch's n
#                 candidates by primary key (what the pool grain would pass from the order it
#                 holds; here the next n workers round-robin, which is the least-loaded order of
#                 an idle pool of equal workers), workers_pick dropped, so updates can be HOT;
#   hinted+index: the same lookup with workers_pick kept (the lookup's own cost, updates not HOT).
# Prints per step: the backend's CPU, the whole server's CPU (autovacuum included), HOT share.
#
#   bash docs/benchmarks/experiments/0024-hinted-selection.sh [ROUNDS] [BATCHES] [BATCH]   (default 5 300 64)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
rounds=${1:-5} batches=${2:-300} batch=${3:-64}
source "$root/eng/postgres.sh" start >/dev/null
port=$(cat "$root/.pg/port") store="$root/src/Allocator.Storage.PostgreSql" work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
P() { local db=$1; shift; psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d "$db" "$@"; }

# The hinted function, generated from the store's own allocate_batch.
python3 - "$store/Functions/allocate_batch.sql" > "$work/hinted.sql" <<'PY'
import sys
s = open(sys.argv[1]).read().replace('{schema}', 'allocator')
s = s[s.index('CREATE OR REPLACE FUNCTION'):]
s = s.replace('allocator.allocate_batch(', 'allocator.allocate_batch_hinted(', 1)
s = s.replace('p_fallback_lease_ms bigint[])', 'p_fallback_lease_ms bigint[], p_candidates text[])', 1)
scan = "WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh\n                   AND w.capacity - w.load >= p_units[1] AND (v_untagged OR w.tags @> v_tags)\n                 ORDER BY w.score, w.worker_id\n                 LIMIT v_n\n                 FOR NO KEY UPDATE SKIP LOCKED"
assert scan in s
s = s.replace(scan, scan.replace('w.pool_id = p_pool AND', 'w.pool_id = p_pool AND w.worker_id = ANY (p_candidates) AND', 1), 1)
# Rank telemetry would come from the grain's own order: none read here.
i, j = s.index('            ), skipped AS MATERIALIZED ('), s.index('            ), slots AS (')
s = s[:i] + '            ), skipped AS MATERIALIZED (\n                SELECT 0 AS rows, NULL::bigint AS least\n' + s[j:]
print(s)
PY

for db in hint_today hint_hinted; do
  P postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
  P $db -c "CREATE SCHEMA allocator"
  for f in "$store"/Functions/uuid_v7.sql "$store"/Migrations/0*.sql "$store"/Functions/allocate_batch.sql "$store"/Functions/release_batch.sql; do
    sed 's/{schema}/allocator/g' "$f" | P $db -f - >/dev/null 2>&1
  done
  P $db -f "$work/hinted.sql" >/dev/null
  P $db -c "INSERT INTO allocator.pools (pool_id) VALUES ('bench')" \
        -c "INSERT INTO allocator.workers (pool_id, worker_id, address, capacity) SELECT 'bench', 'w-' || lpad(i::text, 4, '0'), '10.1.0.' || (i % 250) || ':3389', 1000 FROM generate_series(1, 1000) i"
  P $db <<'SQL'
CREATE PROCEDURE allocator.bench_loop(n_batches int, batch int, hinted bool) LANGUAGE plpgsql AS $$
DECLARE ids uuid[]; eps bigint[]; cands text[]; keys text[]; k int := (random() * 1000)::int;
  tags jsonb := (SELECT jsonb_agg('[]'::jsonb) FROM generate_series(1, batch));
  units int[] := array_fill(1, ARRAY[batch]); nulls bigint[] := array_fill(NULL::bigint, ARRAY[batch]);
  owners text[] := array_fill(NULL::text, ARRAY[batch]); run text := md5(random()::text);
BEGIN
  FOR b IN 1 .. n_batches LOOP
    keys := ARRAY(SELECT 'bench' || chr(31) || run || '-' || b || '-' || g FROM generate_series(1, batch) g);
    IF hinted THEN
      cands := ARRAY(SELECT 'w-' || lpad((((k + g) % 1000) + 1)::text, 4, '0') FROM generate_series(0, batch - 1) g);
      k := k + batch;
      SELECT array_agg(x.allocation_id), array_agg(x.epoch) INTO ids, eps
        FROM allocator.allocate_batch_hinted('bench', keys, units, tags, nulls, true, '50ms', 86400000, nulls, cands) x;
    ELSE
      SELECT array_agg(x.allocation_id), array_agg(x.epoch) INTO ids, eps
        FROM allocator.allocate_batch('bench', keys, units, tags, nulls, true, '50ms', 86400000, nulls) x;
    END IF;
    IF cardinality(ids) <> batch OR array_position(ids, NULL) IS NOT NULL THEN
      RAISE EXCEPTION 'batch % allocated % of %', b, cardinality(ids), batch;
    END IF;
    COMMIT;
    PERFORM count(*) FROM allocator.release_batch('bench', ids, eps, 'bench_channel', owners);
    COMMIT;
  END LOOP;
END $$;
SQL
done
P hint_hinted -c "DROP INDEX allocator.workers_pick"

# CPU ticks of the postmaster and everything under it (exited children included).
server_ticks() { python3 "$root/eng/pg-server-ticks.py" "$root/.pg/data/postmaster.pid"; }

run() {  # run DB HINTED LABEL
  local db=$1 hinted=$2 label=$3 s0 s1 u0 u1 out
  s0=$(server_ticks); u0=$(P $db -c "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'workers'")
  out=$(P $db <<SQL
SELECT pg_backend_pid() AS pid \gset
\setenv BPID :pid
\! awk '{print \$14 + \$15}' /proc/\$BPID/stat
CALL allocator.bench_loop($batches, $batch, $hinted);
\! awk '{print \$14 + \$15}' /proc/\$BPID/stat
SQL
)
  sleep 3; s1=$(server_ticks); sleep 1
  u1=$(P $db -c "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'workers'")
  echo "$label $(getconf CLK_TCK) $((batches * batch)) $(echo $out) $s0 $s1 ${u0/|/ } ${u1/|/ }" | awk '{
    t = $2; n = $3; printf "%-13s backend %6.1f us/step, server %6.1f us/step, HOT %5.1f%%\n", $1,
      ($5 - $4) / t * 1e6 / n, ($7 - $6) / t * 1e6 / n, 100 * ($11 - $9) / (($10 - $8) > 0 ? ($10 - $8) : 1) }'
}

for r in $(seq "$rounds"); do
  run hint_today false today
  run hint_hinted true hinted
  run hint_today true hinted+index
done
for db in hint_today hint_hinted; do P postgres -c "DROP DATABASE $db"; done
