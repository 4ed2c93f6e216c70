#!/usr/bin/env bash
# Runs Allocator as a service on a local PostgreSQL, with a demo pool to try it on.
#
#   eng/run.sh
#
# - Uses ConnectionStrings__Allocator when set; otherwise starts the throwaway PostgreSQL
#   cluster of eng/postgres.sh (installing PostgreSQL from Debian's packages if needed).
# - Listens on http://127.0.0.1:5080, or on ALLOCATOR_URLS.
# - Creates an admin API key for the demo (or uses ALLOCATOR_DEMO_KEY), a pool "demo" with
#   four workers, and prints ready-to-paste curl lines and the API reference page's address.
# - Ctrl+C or SIGTERM stops everything this script started.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

urls="${ALLOCATOR_URLS:-http://127.0.0.1:5080}"
base="${urls%%;*}"
base="${base%/}"

started_postgres=0
host_pid=""
cleanup() {
  trap - INT TERM EXIT
  if [ -n "$host_pid" ] && kill -0 "$host_pid" 2>/dev/null; then
    kill -TERM "$host_pid" 2>/dev/null || true
    wait "$host_pid" 2>/dev/null || true
  fi
  if [ "$started_postgres" = 1 ]; then eng/postgres.sh stop >/dev/null || true; fi
  echo "allocator: stopped"
}
trap cleanup INT TERM EXIT

if [ -z "${ConnectionStrings__Allocator:-}" ]; then
  eng/postgres.sh status | grep -q "running on" || started_postgres=1
  ConnectionStrings__Allocator="$(eng/postgres.sh start)"
  export ConnectionStrings__Allocator
fi

key="${ALLOCATOR_DEMO_KEY:-demo-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}"
export ALLOCATOR_DEMO_KEY="$key"

echo "allocator: building"
dotnet build src/Allocator.Host/Allocator.Host.csproj -c Release -nologo -v q -clp:ErrorsOnly
out="$root/src/Allocator.Host/bin/Release/net10.0"
dotnet "$out/Allocator.Host.dll" --contentRoot "$out" --urls "$urls" &
host_pid=$!

for _ in $(seq 1 120); do
  if curl -fsS "$base/health/ready" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$host_pid" 2>/dev/null; then echo "allocator: the host exited during start-up (see above)"; exit 1; fi
  sleep 0.5
done
curl -fsS "$base/health/ready" >/dev/null || { echo "allocator: not ready after 60 s"; exit 1; }

api() { curl -fsS -H "X-Api-Key: $key" -H "Content-Type: application/json" "$@" >/dev/null; }
api -X PUT "$base/v1/pools/demo" -d '{"strategy":"skip-locked","maxWaitMs":5000,"defaultLeaseSeconds":3600}'
api -X POST "$base/v1/pools/demo/workers" -d '{"workers":[
  {"workerId":"host-1","address":"10.0.0.1:3389","capacity":4,"tags":["gpu"]},
  {"workerId":"host-2","address":"10.0.0.2:3389","capacity":4},
  {"workerId":"host-3","address":"10.0.0.3:3389","capacity":4},
  {"workerId":"host-4","address":"10.0.0.4:3389","capacity":8}]}'

cat <<TXT

Allocator is running on $base (PostgreSQL: ${ConnectionStrings__Allocator%%;Username*}).
A pool "demo" has four workers. Your admin key for this run:

X-Api-Key: $key

Try:
  curl -s -H "X-Api-Key: $key" -H "Idempotency-Key: session-1" -H "Content-Type: application/json" -X POST $base/v1/pools/demo/allocations -d '{"units":1}'
  curl -s -H "X-Api-Key: $key" -H "Content-Type: application/json" -X POST $base/v1/pools/demo/allocations -d '{"sessionKey":"gpu-session","tags":["gpu"]}'
  curl -s -H "X-Api-Key: $key" $base/v1/pools/demo
  curl -s -H "X-Api-Key: $key" -X DELETE "$base/v1/pools/demo/allocations/<allocationId>?epoch=<epoch>"
  curl -s $base/openapi/v1.json

API reference (browse and try the API with the key above): $base/scalar/v1

Ctrl+C stops the service$( [ "$started_postgres" = 1 ] && echo " and the PostgreSQL it started").
TXT

wait "$host_pid"
