#!/usr/bin/env bash
# The database's own cost of an allocate + release step, two builds of the store's SQL side by side
# (issue 24). Two databases on the server of eng/postgres.sh, one with the schema and functions of
# git revision BASE, one with the working tree's; 1,000 workers of capacity 1,000 in one pool; then
# rounds, alternating the two, of a PL/pgSQL loop in one backend: allocate a batch of BATCH
# requests through allocate_batch, COMMIT, release it through release_batch, COMMIT. No client,
# no network: what the functions themselves cost. Prints per step the backend's CPU and the
# whole server's (autovacuum included), from /proc.
#
#   bash eng/function-loop.sh BASE [ROUNDS] [BATCHES] [BATCH]   (default 5 300 64)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${1:?a git revision to compare with} rounds=${2:-5} batches=${3:-300} batch=${4:-64}
source "$root/eng/postgres.sh" start >/dev/null
port=$(cat "$root/.pg/port") store=src/Allocator.Storage.PostgreSql work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
P() { local db=$1; shift; psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d "$db" "$@"; }

mkdir -p "$work/base" "$work/head"
git -C "$root" archive "$base" "$store/Migrations" "$store/Functions" | tar -x -C "$work/base"
(cd "$root" && tar -c "$store/Migrations" "$store/Functions") | tar -x -C "$work/head"

for build in base head; do
  db=loop_$build
  P postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
  P $db -c "CREATE SCHEMA allocator"
  for f in "$work/$build/$store"/Functions/uuid_v7.sql "$work/$build/$store"/Migrations/0*.sql \
           "$work/$build/$store"/Functions/allocate_batch.sql "$work/$build/$store"/Functions/release_batch.sql; do
    # The migrations that build indexes CONCURRENTLY cannot run in a transaction: psql runs each alone.
    sed 's/{schema}/allocator/g' "$f" | P $db -f - >/dev/null
  done
  P $db -c "INSERT INTO allocator.pools (pool_id) VALUES ('bench')" \
        -c "INSERT INTO allocator.workers (pool_id, worker_id, address, capacity) SELECT 'bench', 'w-' || lpad(i::text, 4, '0'), '10.1.0.' || (i % 250) || ':3389', 1000 FROM generate_series(1, 1000) i"
  P $db <<'SQL'
CREATE PROCEDURE allocator.bench_loop(n_batches int, batch int) LANGUAGE plpgsql AS $$
DECLARE ids uuid[]; eps bigint[]; keys text[];
  tags jsonb := (SELECT jsonb_agg('[]'::jsonb) FROM generate_series(1, batch));
  units int[] := array_fill(1, ARRAY[batch]); nulls bigint[] := array_fill(NULL::bigint, ARRAY[batch]);
  owners text[] := array_fill(NULL::text, ARRAY[batch]); run text := md5(random()::text);
BEGIN
  FOR b IN 1 .. n_batches LOOP
    keys := ARRAY(SELECT 'bench' || chr(31) || run || '-' || b || '-' || g FROM generate_series(1, batch) g);
    SELECT array_agg(x.allocation_id), array_agg(x.epoch) INTO ids, eps
      FROM allocator.allocate_batch('bench', keys, units, tags, nulls, true, '50ms', 86400000, nulls) x;
    IF cardinality(ids) <> batch OR array_position(ids, NULL) IS NOT NULL THEN
      RAISE EXCEPTION 'batch % allocated % of %', b, cardinality(ids), batch;
    END IF;
    COMMIT;
    PERFORM count(*) FROM allocator.release_batch('bench', ids, eps, 'bench_channel', owners) r WHERE r.status = 'released';
    COMMIT;
  END LOOP;
  IF EXISTS (SELECT 1 FROM allocator.workers WHERE load <> 0) THEN
    RAISE EXCEPTION 'loads left after the loop';
  END IF;
END $$;
SQL
done

# CPU ticks of the postmaster and everything under it (exited children included).
server_ticks() { python3 "$root/eng/pg-server-ticks.py" "$root/.pg/data/postmaster.pid"; }

run() {  # run BUILD
  local db=loop_$1 s0 s1 out
  s0=$(server_ticks)
  out=$(P $db <<SQL
SELECT pg_backend_pid() AS pid \gset
\setenv BPID :pid
\! awk '{print \$14 + \$15}' /proc/\$BPID/stat
CALL allocator.bench_loop($batches, $batch);
\! awk '{print \$14 + \$15}' /proc/\$BPID/stat
SQL
)
  sleep 2; s1=$(server_ticks)
  echo "$1 $(getconf CLK_TCK) $((batches * batch)) $(echo $out) $s0 $s1" | awk '{
    t = $2; n = $3; printf "%-5s batch '"$batch"': backend %6.1f us/step, server %6.1f us/step\n", $1,
      ($5 - $4) / t * 1e6 / n, ($7 - $6) / t * 1e6 / n }'
}

echo "base = $(git -C "$root" rev-parse --short "$base"), head = working tree; $rounds rounds of $batches batches of $batch"
for r in $(seq "$rounds"); do
  run base
  run head
done
for build in base head; do P postgres -c "DROP DATABASE loop_$build"; done
