#!/usr/bin/env bash
# Runs Allocator as a service on a local PostgreSQL, with a demo pool to try it on.
#
#   eng/run.sh                   one instance (a single-silo Orleans cluster, nothing else to run)
#   eng/run.sh --instances 3     three instances on one database, one Orleans cluster with its
#                                membership in PostgreSQL (docs/clustering.md); an instance that
#                                exits is started again (eng/rolling-restart.sh, docs/operations.md)
#   eng/run.sh --dashboard       also the Aspire dashboard on http://127.0.0.1:18888, a trace,
#                                metrics and log viewer the instances export to (eng/dashboard.sh,
#                                docs/observability.md); combines with --instances
#   eng/run.sh --orleans-dashboard   also Orleans' dashboard at /orleans on every instance (silos,
#                                grains, call rates; admin key as the Basic password)
#   eng/run.sh --databases 2     pools placed over two PostgreSQL databases (docs/postgresql.md,
#                                "Several databases"): the second is a cluster of its own in
#                                .pg/db2/ (eng/postgres.sh --name db2) unless Allocator__Databases__db2
#                                is set; a pool "demo-2" lives there. Up to 4.
#   eng/run.sh --standby         PostgreSQL with a streaming standby (eng/postgres.sh standby, in
#                                .pg/standby/; each further database of --databases its own): the
#                                service connects through one connection string naming both, and
#                                follows whichever is the primary. Synchronous; --standby=async for
#                                an asynchronous one. Prints how to fail over by hand (docs/postgresql.md,
#                                "A standby on this machine")
#   eng/run.sh --tls             silos talk over mutual TLS, with a throwaway self-signed certificate
#                                made by openssl for this run and shared by the instances (each
#                                trusts only it; deleted when the script stops); combines with
#                                --instances (docs/clustering.md)
#   eng/run.sh --verbose         every line the instances log on the console too (Orleans' and
#                                ASP.NET Core's start-up: some 200 lines per instance)
#
# - Uses ConnectionStrings__Allocator when set; otherwise starts the throwaway PostgreSQL
#   cluster of eng/postgres.sh (installing PostgreSQL from Debian's packages if needed).
# - One instance listens on http://127.0.0.1:5080, or on ALLOCATOR_URLS, its silo on port 11111
#   (or ALLOCATOR_SILO_BASE_PORT). With --instances N,
#   instance i (0-based) listens on http://127.0.0.1:(5080+i) and its silo on port 11111+i;
#   ALLOCATOR_BASE_PORT and ALLOCATOR_SILO_BASE_PORT move both ranges. Their current pids and
#   addresses go to artifacts/run/instance-i.pid and .url.
# - Each instance's full log goes to artifacts/run/instance-i.log. The console gets a short
#   start-up summary and, while the service runs, only the warnings and errors (warn, fail, crit)
#   and anything else written to stderr, prefixed "instance i |" when there are several;
#   --verbose shows every line.
# - Creates an admin API key for the demo (or uses ALLOCATOR_DEMO_KEY), a pool "demo" with
#   four workers, and prints ready-to-paste curl lines and the API reference page's address.
# - ALLOCATOR_NO_BUILD=1 skips the build (the end-to-end tests build first).
# - Arguments after -- go to every instance (e.g. -- --Logging:LogLevel:Allocator=Debug).
# - Ctrl+C or SIGTERM stops everything this script started.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

instances=1
databases=1
dashboard=0
orleans_dashboard=0
tls=0
standby=""
verbose=0
host_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --instances) instances="${2:-}"; shift 2 ;;
    --instances=*) instances="${1#*=}"; shift ;;
    --databases) databases="${2:-}"; shift 2 ;;
    --databases=*) databases="${1#*=}"; shift ;;
    --dashboard) dashboard=1; shift ;;
    --orleans-dashboard) orleans_dashboard=1; shift ;;
    --tls) tls=1; shift ;;
    --standby|--standby=sync) standby=sync; shift ;;
    --standby=async) standby=async; shift ;;
    --verbose) verbose=1; shift ;;
    --) shift; host_args=("$@"); break ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "eng/run.sh: unknown argument '$1' (see eng/run.sh --help)" >&2; exit 2 ;;
  esac
done
if ! [[ "$instances" =~ ^[1-9][0-9]*$ ]] || [ "$instances" -gt 16 ]; then
  echo "eng/run.sh: --instances must be between 1 and 16" >&2; exit 2
fi
if ! [[ "$databases" =~ ^[1-4]$ ]]; then
  echo "eng/run.sh: --databases must be between 1 and 4" >&2; exit 2
fi
if [ -n "$standby" ] && [ -n "${ConnectionStrings__Allocator:-}" ]; then
  # Its standby would be one of eng/postgres.sh's, of a server this script did not start.
  echo "eng/run.sh: --standby starts eng/postgres.sh's clusters and their standbys; unset ConnectionStrings__Allocator" >&2; exit 2
fi
standby_args=(); standby_words="a synchronous"
if [ "$standby" = async ]; then standby_args=(--async); standby_words="an asynchronous"; fi

if [ "$orleans_dashboard" = 1 ]; then host_args+=("--Allocator:OrleansDashboard:Enabled=true"); fi
if [ "$dashboard" = 1 ]; then
  source eng/dashboard.sh
  dashboard_check || exit 2
fi

base_port="${ALLOCATOR_BASE_PORT:-5080}"
silo_base_port="${ALLOCATOR_SILO_BASE_PORT:-11111}"
if [ "$instances" = 1 ]; then
  urls=("${ALLOCATOR_URLS:-http://127.0.0.1:$base_port}")
else
  urls=()
  for i in $(seq 0 $((instances - 1))); do urls+=("http://127.0.0.1:$((base_port + i))"); done
fi

started_postgres=0
started_clusters=()
pids=()
tls_dir=""
out_fds=()
err_fds=()
copiers=()
# Whether process $1 still runs (a zombie child does not: kill -0 would say it does).
alive() { [ -e "/proc/$1" ] && ! grep -qs '^State:[[:space:]]*Z' "/proc/$1/status"; }
cleanup() {
  # A second Ctrl+C (or the terminal closing) must not cut the stop short: PostgreSQL would be
  # left running. The waits below are bounded.
  trap - EXIT
  trap '' INT TERM HUP
  local instance_pids=() pid fd
  # Supervised instances: no more restarts, then SIGTERM to each instance (a graceful stop).
  if [ "$instances" -gt 1 ] && [ -d artifacts/run ]; then
    touch artifacts/run/stopping
    for file in artifacts/run/instance-*.pid; do
      [ -e "$file" ] && instance_pids+=("$(cat "$file")")
    done
    for pid in "${instance_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  fi
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  # A supervisor exits at once; an instance takes a few seconds to drain and stop. Wait for each
  # (at most 60 s), so that nothing outlives the script and PostgreSQL is not stopped under it.
  for pid in "${pids[@]}" "${instance_pids[@]}"; do
    for _ in $(seq 1 600); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  # The log copiers end once no process holds their pipes: the last lines (the instances' stop,
  # its warnings) are written and shown before "stopped".
  for fd in "${out_fds[@]}" "${err_fds[@]}"; do exec {fd}>&-; done
  for pid in "${copiers[@]}"; do
    for _ in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    wait "$pid" 2>/dev/null || true
  done
  if [ -n "$tls_dir" ]; then rm -rf "$tls_dir"; fi
  if [ "$dashboard" = 1 ]; then dashboard_stop; fi
  # A cluster's stop stops its standby too; a standby alone is stopped after its primary is told
  # not to wait for it.
  if [ "$started_postgres" = 1 ]; then eng/postgres.sh stop >/dev/null || true; fi
  for name in "${started_clusters[@]}"; do eng/postgres.sh stop --name "$name" >/dev/null || true; done
  echo "allocator: stopped"
}
trap cleanup INT TERM HUP EXIT

pg_origin="from ConnectionStrings__Allocator"
if [ -z "${ConnectionStrings__Allocator:-}" ]; then
  pg_origin="eng/postgres.sh's, already running"
  eng/postgres.sh status | grep -q "running on" || { started_postgres=1; pg_origin="started for this run, in .pg/"; }
  if [ -z "$standby" ]; then
    ConnectionStrings__Allocator="$(eng/postgres.sh start)"
  else
    eng/postgres.sh status --name standby | grep -q "running on" || started_clusters+=(standby)
    # Its last line names both servers (Target Session Attributes=primary).
    ConnectionStrings__Allocator="$(eng/postgres.sh standby "${standby_args[@]}" | tail -n 1)"
    pg_origin="$pg_origin, with $standby_words standby in .pg/standby/"
  fi
  export ConnectionStrings__Allocator
fi

# Further databases (issue 23): the one above is "default" and holds the pool directory.
for i in $(seq 2 "$databases"); do
  var="Allocator__Databases__db$i"
  if [ -z "${!var:-}" ]; then
    eng/postgres.sh status --name "db$i" | grep -q "running on" || started_clusters+=("db$i")
    if [ -z "$standby" ]; then
      printf -v "$var" '%s' "$(eng/postgres.sh start --name "db$i")"
    else
      eng/postgres.sh status --name "db$i-standby" | grep -q "running on" || started_clusters+=("db$i-standby")
      printf -v "$var" '%s' "$(eng/postgres.sh standby --name "db$i" "${standby_args[@]}" | tail -n 1)"
    fi
  fi
  export "$var"
done

if [ "$tls" = 1 ]; then
  command -v openssl >/dev/null || { echo "eng/run.sh: --tls needs openssl (apt-get install openssl)" >&2; exit 2; }
  # One certificate for every instance of this run: with no other trust setting, each silo accepts
  # only peers presenting its own certificate. Never reused: made here, deleted on exit.
  tls_dir="$(mktemp -d "${TMPDIR:-/tmp}/allocator-tls.XXXXXX")"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=allocator-local-cluster" -addext "extendedKeyUsage=serverAuth,clientAuth" \
    -keyout "$tls_dir/silo.key" -out "$tls_dir/silo.pem" 2>/dev/null
  host_args+=("--Allocator:Cluster:Tls:Enabled=true" "--Allocator:Cluster:Tls:CertificatePath=$tls_dir/silo.pem" "--Allocator:Cluster:Tls:KeyPath=$tls_dir/silo.key")
fi

key="${ALLOCATOR_DEMO_KEY:-demo-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}"
export ALLOCATOR_DEMO_KEY="$key"

out="$root/src/Allocator.Host/bin/Release/net10.0"
now() { date +%s.%N; }
since() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f s", e - s }'; }
started="$(now)"
if [ "${ALLOCATOR_NO_BUILD:-0}" != 1 ]; then
  echo "allocator: building"
  if [ "$verbose" = 1 ]; then
    dotnet build src/Allocator.Host/Allocator.Host.csproj -c Release -nologo -v q -clp:ErrorsOnly
  else
    # dotnet build prints a success summary whatever -clp says: shown only when it fails.
    build_started="$(now)"
    if ! build_output="$(dotnet build src/Allocator.Host/Allocator.Host.csproj -c Release -nologo -v q -clp:ErrorsOnly 2>&1)"; then
      printf '%s\n' "$build_output" >&2; exit 1
    fi
    echo "allocator: built in $(since "$build_started")"
  fi
fi

if [ "$dashboard" = 1 ]; then
  echo "allocator: starting the Aspire dashboard"
  dashboard_start || exit 1
  echo "allocator: Aspire dashboard on $dashboard_url (OTLP $dashboard_otlp_url, log artifacts/run/dashboard.log)"
fi

# Each instance's output goes whole to artifacts/run/instance-i.log. The console gets its stderr:
# the console logger writes warnings and errors there (LogToStandardErrorThreshold), and the
# runtime its own failures (an unhandled exception), while Orleans' and ASP.NET Core's ~200 lines
# of start-up stay in the file. --verbose copies stdout to the console as well. The pipes are
# opened after the build and the dashboard, so that none of their processes holds one open.
close_fds() { local fd; for fd; do exec {fd}>&-; done; }
# Copies its input to log file $1 and to the console's fd $2, each line after prefix $3. Deaf to
# Ctrl+C and SIGTERM: it ends when the instance has closed its output, so that what the instance
# says while it stops still arrives (cleanup waits for it).
copy_out() {
  trap '' INT TERM
  close_fds "${out_fds[@]}" "${err_fds[@]}" # the other instances' pipes, inherited
  tee -a "$1" | sed -u "s/^/$3/" >&"$2"
}
mkdir -p artifacts/run
if [ "$verbose" = 0 ]; then
  export Logging__Console__LogToStandardErrorThreshold="${Logging__Console__LogToStandardErrorThreshold:-Warning}"
fi
for i in "${!urls[@]}"; do
  log="artifacts/run/instance-$i.log"
  : >"$log"
  prefix=""; if [ "$instances" -gt 1 ]; then prefix="instance $i | "; fi
  exec {fd}> >(copy_out "$log" 2 "$prefix"); err_fds+=("$fd"); copiers+=("$!")
  if [ "$verbose" = 1 ]; then
    exec {fd}> >(copy_out "$log" 1 "$prefix"); copiers+=("$!")
  else
    exec {fd}>>"$log"
  fi
  out_fds+=("$fd")
done
if [ "$instances" = 1 ]; then
  echo "allocator: starting the service; its full log goes to artifacts/run/instance-0.log"
else
  echo "allocator: starting $instances instances; their full logs go to artifacts/run/instance-0..$((instances - 1)).log"
fi
if [ "$verbose" = 0 ]; then echo "allocator: only warnings and errors are shown here (eng/run.sh --verbose: every line)"; fi
launched="$(now)"

if [ "$instances" = 1 ]; then
  dotnet "$out/Allocator.Host.dll" --contentRoot "$out" --urls "${urls[0]}" \
    --Allocator:Cluster:SiloPort="$silo_base_port" "${host_args[@]}" >&"${out_fds[0]}" 2>&"${err_fds[0]}" &
  pids+=($!)
else
  # One Orleans cluster: membership in the same database; a fresh cluster id per run, so rows
  # left by an earlier run's instances are never mistaken for live ones.
  cluster_id="allocator-local-$(date +%s)"
  rm -f artifacts/run/stopping artifacts/run/instance-*.pid artifacts/run/instance-*.url

  # Runs instance $1 and starts it again (same ports) whenever it exits, as an orchestrator
  # restarts a container: a SIGTERM to one instance is then a restart of that instance.
  supervise() {
    local i="$1" j
    trap 'exit 0' INT TERM
    for j in "${!urls[@]}"; do
      if [ "$j" != "$i" ]; then close_fds "${out_fds[$j]}" "${err_fds[$j]}"; fi
    done
    while [ ! -e artifacts/run/stopping ]; do
      # Each instance is a resource of its own in a telemetry backend.
      OTEL_RESOURCE_ATTRIBUTES="service.instance.id=instance-$i${OTEL_RESOURCE_ATTRIBUTES:+,$OTEL_RESOURCE_ATTRIBUTES}" \
      dotnet "$out/Allocator.Host.dll" --contentRoot "$out" --urls "${urls[$i]}" \
        --Allocator:Cluster:Membership=postgres \
        --Allocator:Cluster:ClusterId="$cluster_id" \
        --Allocator:Cluster:SiloPort=$((silo_base_port + i)) \
        "${host_args[@]}" >&"${out_fds[$i]}" 2>&"${err_fds[$i]}" &
      echo $! >"artifacts/run/instance-$i.pid"
      if wait $!; then code=0; else code=$?; fi
      # Exit code 1: the configuration or the start-up failed; starting again would not help.
      if [ "$code" = 1 ]; then exit 1; fi
    done
  }

  for i in $(seq 0 $((instances - 1))); do
    echo "${urls[$i]%%;*}" >"artifacts/run/instance-$i.url"
    supervise "$i" &
    pids+=($!)
  done
fi

# The pid of instance $1's current process.
instance_pid() {
  if [ "$instances" = 1 ]; then echo "${pids[0]}"; else cat "artifacts/run/instance-$1.pid" 2>/dev/null || echo 0; fi
}

for i in "${!urls[@]}"; do
  base="${urls[$i]%%;*}"; base="${base%/}"
  for _ in $(seq 1 120); do
    if curl -fsS "$base/health/ready" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$(instance_pid "$i")" 2>/dev/null; then
      echo "allocator: instance $i exited during start-up (its full log: artifacts/run/instance-$i.log)"; exit 1
    fi
    sleep 0.5
  done
  curl -fsS "$base/health/ready" >/dev/null || { echo "allocator: instance $i not ready after 60 s (its full log: artifacts/run/instance-$i.log)"; exit 1; }
  echo "allocator: instance $i ready in $(since "$launched"): $base, silo port $((silo_base_port + i)), pid $(instance_pid "$i")"
done

base="${urls[0]%%;*}"; base="${base%/}"
api() { curl -fsS -H "X-Api-Key: $key" -H "Content-Type: application/json" "$@" >/dev/null; }
# With several databases "demo" is placed in the default one by name (the rule would pick the emptiest).
demo_database=""; if [ "$databases" -gt 1 ]; then demo_database=',"database":"default"'; fi
api -X PUT "$base/v1/pools/demo" -d '{"strategy":"skip-locked","maxWaitMs":5000,"defaultLeaseSeconds":3600'"$demo_database"'}'
api -X POST "$base/v1/pools/demo/workers" -d '{"workers":[
  {"workerId":"host-1","address":"10.0.0.1:3389","capacity":4,"tags":["gpu"]},
  {"workerId":"host-2","address":"10.0.0.2:3389","capacity":4},
  {"workerId":"host-3","address":"10.0.0.3:3389","capacity":4},
  {"workerId":"host-4","address":"10.0.0.4:3389","capacity":8}]}'
if [ "$databases" -gt 1 ]; then
  api -X PUT "$base/v1/pools/demo-2" -d '{"strategy":"skip-locked","maxWaitMs":5000,"defaultLeaseSeconds":3600,"database":"db2"}'
  api -X POST "$base/v1/pools/demo-2/workers" -d '{"workers":[
    {"workerId":"host-5","address":"10.0.1.5:3389","capacity":4},
    {"workerId":"host-6","address":"10.0.1.6:3389","capacity":4}]}'
fi

# The end of the start-up summary: what the service runs on, as the first instance reports it
# (/health: each database's state, and the version where the host reports one).
health="$(curl -fsS "$base/health" 2>/dev/null || true)"
database_states="$(sed -n 's/.*"databases":{\([^}]*\)}.*/\1/p' <<<"$health" | sed 's/"\([^"]*\)":"\([^"]*\)"/\1 \2/g; s/,/, /g')"
version="$(sed -n 's/.*"version":"\([^"]*\)".*/\1/p' <<<"$health")"
# How each database replicates its commits (issue 48), as PostgreSQL reports it.
replication="$(sed -n 's/.*"replication":{\([^}]*\)}.*/\1/p' <<<"$health" | sed 's/"\([^"]*\)":"\([^"]*\)"/\1 \2/g; s/,/, /g')"
echo "allocator: store: PostgreSQL ${ConnectionStrings__Allocator%%;Username*} ($pg_origin)${database_states:+; databases: $database_states}${replication:+; replication: $replication}"
if [ "$instances" = 1 ]; then
  echo "allocator: cluster: one silo$( [ "$tls" = 1 ] && echo ", mutual TLS on its port")"
else
  echo "allocator: cluster: $instances silos (ports $silo_base_port-$((silo_base_port + instances - 1))$( [ "$tls" = 1 ] && echo ", mutual TLS")), membership in PostgreSQL, cluster id $cluster_id"
fi
if [ -n "$version" ]; then echo "allocator: version $version"; fi
echo "allocator: started in $(since "$started")"

echo
if [ "$instances" = 1 ]; then
  echo "Allocator is running on $base (PostgreSQL: ${ConnectionStrings__Allocator%%;Username*})."
else
  echo "Allocator is running as $instances instances of one cluster (PostgreSQL: ${ConnectionStrings__Allocator%%;Username*}):"
  for i in "${!urls[@]}"; do
    echo "  instance $i: ${urls[$i]}  silo port $((silo_base_port + i))  pid $(instance_pid "$i")  log artifacts/run/instance-$i.log"
  done
fi
cat <<TXT
A pool "demo" has four workers. Your admin key for this run:

X-Api-Key: $key

Try:
  curl -s -H "X-Api-Key: $key" -H "Idempotency-Key: session-1" -H "Content-Type: application/json" -X POST $base/v1/pools/demo/allocations -d '{"units":1}'
  curl -s -H "X-Api-Key: $key" -H "Content-Type: application/json" -X POST $base/v1/pools/demo/allocations -d '{"sessionKey":"gpu-session","tags":["gpu"]}'
  curl -s -H "X-Api-Key: $key" $base/v1/pools/demo
  curl -s -H "X-Api-Key: $key" -X DELETE "$base/v1/pools/demo/allocations/<allocationId>?epoch=<epoch>"
  curl -s $base/openapi/v1.json

API reference (browse and try the API with the key above): $base/scalar/v1
$( [ "$dashboard" = 1 ] && echo "Trace viewer (Aspire dashboard; allocate, then open Traces): $dashboard_url/traces" )
$( [ "$orleans_dashboard" = 1 ] && echo "Orleans dashboard (any user name, the key above as the password): $base/orleans/" )
$( [ "$tls" = 1 ] && echo "Silo ports: mutual TLS with a throwaway certificate, SHA-256 $(openssl x509 -in "$tls_dir/silo.pem" -noout -fingerprint -sha256 | cut -d= -f2 | tr -d :)" )

Ctrl+C stops the service$( [ "$started_postgres" = 1 ] && echo " and the PostgreSQL it started").
TXT
if [ "$databases" -gt 1 ]; then
  cat <<TXT

Pools are placed over $databases databases: default (ConnectionStrings__Allocator, with the pool directory)$(for i in $(seq 2 "$databases"); do printf ', db%s' "$i"; done).
"demo" lives in default, "demo-2" (two workers) in db2. See where a pool lives, place a new one, move an empty one:
  curl -s $base/health
  curl -s -H "X-Api-Key: $key" $base/v1/pools/demo-2
  curl -s -H "X-Api-Key: $key" -H "Content-Type: application/json" -X PUT $base/v1/pools/placed -d '{"database":"db2"}'
  curl -s -H "X-Api-Key: $key" -H "Content-Type: application/json" -X PUT $base/v1/pools/by-rule -d '{}'
  curl -s -H "X-Api-Key: $key" -H "Content-Type: application/json" -X POST $base/v1/pools/placed/move -d '{"database":"default"}'
A pool with workers does not move (409): drain them, let their allocations end, deregister them, then move (docs/postgresql.md, "Moving a pool").
TXT
fi

if [ -n "$standby" ]; then
  # The folder whose server is the primary now (after a failover of an earlier run: .pg/standby/).
  primary_data=".pg/data"; standby_data=".pg/standby/data"
  if eng/postgres.sh status | grep -q "(a standby)"; then primary_data=".pg/standby/data"; standby_data=".pg/data"; fi
  cat <<TXT

PostgreSQL runs as a primary and $standby_words standby ($primary_data and $standby_data; eng/postgres.sh status
says which is which); the service connects through both and follows the primary. To fail over by hand:
  kill -9 \$(head -1 $primary_data/postmaster.pid)   # the primary dies: calls answer 503 (retry with the same key)
  eng/postgres.sh promote        # pg_ctl promote of $standby_data (by hand: runuser -u postgres -- $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)/pg_ctl promote -D $standby_data)
  eng/postgres.sh rejoin         # the old primary, rewound (pg_rewind), becomes the new one's standby
  eng/postgres.sh status         # then the same again, the other way round
The service follows within 10 s of the promotion: Npgsql looks again at a server it found to be a standby after Host Recheck Seconds (10).
TXT
  if [ "$databases" -gt 1 ]; then echo "Each further database has a pair of its own: eng/postgres.sh status --name db2 (and promote, rejoin --name db2)."; fi
fi

# Ends on Ctrl+C or SIGTERM. With --instances N, an instance that exits is started again:
# kill -9 one to try failover, SIGTERM one (or eng/rolling-restart.sh) to try a graceful stop.
wait "${pids[@]}" || true
