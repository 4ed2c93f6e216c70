#!/usr/bin/env bash
# A day of allocation_history at scale, loaded directly, then hours of the service's churn; what
# the purge, an allocation and a replay of an ended key cost at that size (docs/benchmarks.md,
# "History at scale"; issue 24).
#
#   eng/history-at-scale.sh [--rows N] [--hours H] [--database NAME] [--keep]
#
#   --rows N        rows in the day loaded (default 50,000,000: about 20 GB with its indexes)
#   --hours H       hours of churn after the load (default 3)
#   --small N       rows of the small history measured before and after (default 480,000; 0: none)
#   --seconds S     length of each pgbench measurement (default 30)
#   --database D    the database to create on the server of eng/postgres.sh (default histscale;
#                   dropped and created again)
#   --keep          leave the database in place afterwards
#
# The schema is the store's own: every file of src/Allocator.Storage.PostgreSql/Migrations, then
# Functions, with {schema} = allocator, in the order the migrator applies them. The day is
# inserted in time order (one hour per transaction, as releases append it), with ids, pools,
# workers and owner-prefixed session keys shaped like the service's. One hour of churn is what
# the service does in an hour with a 24 h retention: the oldest hour purged, the table vacuumed
# (autovacuum's job), an hour of new releases inserted (into the pages the purge freed).
# Before each hour's purge: EXPLAIN (ANALYZE, BUFFERS) of the first batch of Sql/purge_history.sql
# (rolled back), and after the last hour one more. Then pgbench: allocate + release through
# allocate_batch and release_batch (one client), and replays of keys that ended in the last hour.
# All of it three times in one run: a small history, the one at scale, the small one again (the
# two small phases show how much the machine drifted meanwhile).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rows=50000000 small=480000 hours=3 seconds=30 db=histscale keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) rows=$2; shift 2 ;;
    --hours) hours=$2; shift 2 ;;
    --small) small=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --database) db=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done
source "$root/eng/postgres.sh" start >/dev/null
host=127.0.0.1 port=$(cat "$root/.pg/port")
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h $host -p "$port" -U postgres "$@"; }
P() { psql_ -d "$db" "$@"; }
batch=10000 retention_ms=$((24 * 3600 * 1000))
store="$root/src/Allocator.Storage.PostgreSql"
t0="timestamptz '2026-01-01 00:00+00'"

psql_ -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
P -c "CREATE SCHEMA allocator"
for f in "$store"/Functions/uuid_v7.sql "$store"/Migrations/0*.sql "$store"/Functions/allocate_batch.sql "$store"/Functions/release_batch.sql "$store"/Functions/deregister_worker.sql; do
  sed 's/{schema}/allocator/g' "$f" | P -f - >/dev/null 2>&1
done

P <<SQL
CREATE FUNCTION allocator.uuid_v7_at(t timestamptz) RETURNS uuid LANGUAGE sql VOLATILE AS \$\$
  SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send(floor(extract(epoch FROM t) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid \$\$;
-- Hour h of the simulated timeline: per_hour rows ending in time order from $t0 + h hours.
CREATE PROCEDURE allocator.load_hours(h_from int, h_to int, per_hour bigint) LANGUAGE plpgsql AS \$\$
DECLARE h int;
BEGIN
  FOR h IN h_from .. h_to - 1 LOOP
    INSERT INTO allocator.allocation_history
    SELECT allocator.uuid_v7_at(e - interval '5 minutes'), 'pool-' || (i % 50), 'w-' || (i % 1000), '10.0.0.1:3389',
           'broker' || chr(31) || 'session-' || i, 1, i, e - interval '5 minutes', NULL, e, 'released'
      FROM generate_series(h * per_hour, (h + 1) * per_hour - 1) i,
           LATERAL (SELECT $t0 + (i * 3600.0 / per_hour) * interval '1 second' AS e) t;
    COMMIT;
  END LOOP;
END \$\$;
INSERT INTO allocator.pools (pool_id) SELECT 'pool-' || i FROM generate_series(0, 49) i UNION ALL SELECT 'bench';
INSERT INTO allocator.workers (pool_id, worker_id, address, capacity)
SELECT 'bench', 'w-' || lpad(i::text, 4, '0'), '10.1.0.' || (i % 250) || ':3389', 1000 FROM generate_series(1, 1000) i;
SQL

# The purge statement as the service runs it, its retention measured from the simulated clock.
purge=$(sed 's/{schema}/allocator/g; s/now()/$1::timestamptz/; s/\$1 \* interval/0 * interval/' "$store/Sql/purge_history.sql" | grep -v '^--' | tr '\n' ' ')
pgb="pgbench -n -h $host -p $port -U postgres -T $seconds -c 1 -r $db"
cat > /tmp/history-alloc.pgb <<'PGB'
\set k random(1, 1000000000)
SELECT allocation_id AS aid, epoch AS aep FROM allocator.allocate_batch('bench', ARRAY['bench' || chr(31) || 'k-' || :k || '-' || :client_id], ARRAY[1], '[[]]'::jsonb, ARRAY[NULL::bigint], true, '50ms', 86400000, ARRAY[NULL::bigint]) \gset
SELECT count(*) FROM allocator.release_batch('bench', ARRAY[':aid'::uuid], ARRAY[:aep::bigint], 'allocator_bench', ARRAY['bench']);
PGB

# One pgbench run: its latencies, and the WAL it wrote per transaction (pg_stat_wal, server-wide).
measure() {
  local w0 w1 out
  w0=$(P -At -c "SELECT wal_bytes, wal_fpi FROM pg_stat_wal")
  out=$($pgb "$@" 2>&1)
  w1=$(P -At -c "SELECT wal_bytes, wal_fpi FROM pg_stat_wal")
  echo "$out" | grep -E "^latency average|SELECT" | cut -c1-60 | sed 's/^/   /'
  local tx; tx=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
  echo "$w0 $w1 $tx" | awk -F'[| ]' '{ printf "   WAL per transaction: %.0f bytes, %.2f full-page images\n", ($3 - $1) / $5, ($4 - $2) / $5 }'
}

# One phase: a day of per_hour rows an hour loaded into an emptied history, then hours of churn,
# then what a step, a replay and a purge batch cost at that size.
phase() {
  local per_hour=$1 hours=$2 label=$3 start c clock last
  echo "=== $label: $((per_hour * 24)) rows, $hours hours of churn"
  P -c "TRUNCATE allocator.allocation_history"
  start=$(date +%s)
  P -c "CALL allocator.load_hours(0, 24, $per_hour)" -c "VACUUM (ANALYZE) allocator.allocation_history"
  echo "loaded $((per_hour * 24)) rows in $(( $(date +%s) - start )) s: $(P -At -c "SELECT pg_size_pretty(pg_total_relation_size('allocator.allocation_history'))") with indexes"
  for c in $(seq 0 $hours); do
    clock="$t0 + interval '$((24 + c + 1)) hours'"   # the simulated now: hour c just past the retention
    echo "== hour $c of churn: the purge's first batch"
    P <<SQL | grep -E "Execution Time|Buffers|Rows Removed|Heap Blocks|Scan|Delete on|Limit" | sed 's/^/   /'
BEGIN;
PREPARE purge(timestamptz, integer) AS $purge;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE purge(($clock) - interval '24 hours', $batch);
ROLLBACK;
SQL
    [ "$c" = "$hours" ] && break   # the last batch is measured only, not churned
    s=$(date +%s%N); P -c "DELETE FROM allocator.allocation_history WHERE ended_at < ($clock) - interval '24 hours'"; d=$(( ($(date +%s%N) - s) / 1000000 ))
    s=$(date +%s%N); P -c "VACUUM allocator.allocation_history"; v=$(( ($(date +%s%N) - s) / 1000000 ))
    s=$(date +%s%N); P -c "CALL allocator.load_hours($((24 + c)), $((25 + c)), $per_hour)"; i=$(( ($(date +%s%N) - s) / 1000000 ))
    echo "   the hour: purge $d ms, vacuum $v ms, insert $i ms"
  done
  P -c "CHECKPOINT" >/dev/null
  last=$((24 + hours - 1))
  cat > /tmp/history-replay.pgb <<PGB
\set i random($((last * per_hour)), $(((last + 1) * per_hour - 1)))
SELECT count(*) FROM allocator.allocate_batch('pool-' || (:i % 50), ARRAY['broker' || chr(31) || 'session-' || :i], ARRAY[1], '[[]]'::jsonb, ARRAY[NULL::bigint], true, '50ms', 86400000000, ARRAY[NULL::bigint]);
PGB
  echo "== allocate + release (one client, $seconds s; ms per statement)"; measure -f /tmp/history-alloc.pgb
  echo "== the same with wal_compression = lz4 (full-page images compressed)"; PGOPTIONS="-c wal_compression=lz4" measure -f /tmp/history-alloc.pgb
  echo "== replay of a key that ended in the last hour (one client, $seconds s)"; measure -f /tmp/history-replay.pgb
  P -At -c "SELECT '   ' || relname || ': ' || pg_size_pretty(pg_relation_size(oid)) FROM pg_class WHERE relnamespace = 'allocator'::regnamespace AND relname LIKE 'allocation_history%' ORDER BY 1"
}

# Small, at scale, small again: the two small phases bound the machine's drift over the run.
[ "$small" = 0 ] || phase $((small / 24)) 1 "small history"
phase $((rows / 24)) "$hours" "history at scale"
[ "$small" = 0 ] || phase $((small / 24)) 1 "small history again"
rm -f /tmp/history-alloc.pgb /tmp/history-replay.pgb
[ $keep = 1 ] || psql_ -d postgres -c "DROP DATABASE $db"
