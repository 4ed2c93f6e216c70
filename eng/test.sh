#!/usr/bin/env bash
# Builds Allocator and runs every test against a real PostgreSQL that this script starts
# (eng/postgres.sh). Ends with one line: "N passed, N failed, N skipped".
#
#   eng/test.sh                 everything
#   eng/test.sh --filter EXPR   only tests matching a dotnet test filter expression
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

filter=()
if [ "${1:-}" = "--filter" ] && [ -n "${2:-}" ]; then filter=(--filter "$2"); fi

# Tests need PostgreSQL: if it cannot start, fail (never skip silently). A cluster this script
# starts is stopped when it ends; one that was already running is left alone.
started_postgres=0
bash eng/postgres.sh status | grep -q "running on" || started_postgres=1
stop_postgres() { if [ "$started_postgres" = 1 ]; then bash eng/postgres.sh stop >/dev/null 2>&1 || true; fi; }
trap stop_postgres EXIT
# The tests create and drop a schema per test class (the conformance suites one per test):
# autovacuum's launcher at the development cluster's 1 s naptime (set for long benchmarks, see
# eng/postgres.sh) analyzed them all the time, a third of the server's CPU in the store's tests.
# A cluster started here looks every 10 s (ADR 0028).
if ! ALLOCATOR_PG_SETTINGS="-c autovacuum_naptime=10s" source eng/postgres.sh start >/dev/null; then
  echo "eng/test.sh: PostgreSQL could not be started; the database tests cannot run."
  echo "0 passed, 1 failed"
  exit 1
fi
echo "Using PostgreSQL: $ALLOCATOR_POSTGRES"

# The browser tests (the API reference page, the trace viewer, the Orleans dashboard) drive Debian's
# chromium through Playwright; it is installed here when missing (as eng/postgres.sh installs
# PostgreSQL). Without it those tests fail, never skip.
if [ -z "${ALLOCATOR_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ]; then
    echo "Installing Debian's chromium for the browser tests"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
      || echo "eng/test.sh: chromium could not be installed; the browser tests will fail."
  else
    echo "eng/test.sh: chromium is missing and installing it needs root (apt-get install chromium); the browser tests will fail."
  fi
fi

# Every process of the run is short-lived (the build, test hosts, the service instances the tests
# start and stop): dynamic PGO's instrumented tier costs them more CPU than it gives back, about a
# seventh of the run's. Nor do their thread pools spin waiting for work (the service's own setting,
# ADR 0018): on two cores shared by a dozen processes a spinning thread only takes the core from
# another. Behaviour is the same; the service keeps its defaults everywhere else (ADR 0028).
export DOTNET_TieredPGO=0
export DOTNET_ThreadPool_UnfairSemaphoreSpinLimit=0

results="$root/artifacts/test-results"
rm -rf "$results"
mkdir -p "$results"

# The previous release, built from git history: the compatibility checks compare this build with it
# (ADR 0026). It builds beside this build (whose project graph leaves a core idle a quarter of the
# time) and on while the tests start; the tests that need it wait for it (eng/previous-release.sh
# takes a lock), and its failure is reported below.
started=$SECONDS
previous_log="$root/artifacts/previous-release.log"
bash eng/previous-release.sh >"$previous_log" 2>&1 &
previous_pid=$!

if ! dotnet build Allocator.sln -c Release -nologo -clp:ErrorsOnly; then
  kill "$previous_pid" 2>/dev/null
  echo "eng/test.sh: build failed."
  echo "0 passed, 1 failed"
  exit 1
fi

echo "eng/test.sh: built in $((SECONDS - started)) s"

# Three test assemblies at a time, in Allocator.sln's order: the reliability scenarios and the
# host's tests (the longest) from the start, and beside them the ones that mostly wait (grains,
# clustering, the small ones), then the store's and the release's, which keep a core busy. Two at
# a time left the grains' tests alone at the end with a core idle.
dotnet test Allocator.sln -c Release --no-build -nologo -maxcpucount:3 "${filter[@]}" \
  --logger "trx" --logger "console;verbosity=minimal" --results-directory "$results" \
  -- RunConfiguration.TestSessionTimeout=2400000
status=$?
echo "eng/test.sh: build and tests took $((SECONDS - started)) s"

previous_failed=0
if ! wait "$previous_pid"; then
  previous_failed=1
  echo "eng/test.sh: the previous release could not be built from git history; the compatibility checks cannot run:"
  tail -n 20 "$previous_log"
fi

# Sum the counters of every test run (one .trx per test assembly).
read -r passed failed skipped total < <(
  cat "$results"/*.trx 2>/dev/null | tr '\n' ' ' | grep -o '<Counters [^>]*>' | awk '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); gsub(/"/, "", kv[2]); c[kv[1]] += kv[2] } }
    END { printf "%d %d %d %d\n", c["passed"], c["failed"] + c["error"] + c["timeout"] + c["aborted"], c["notExecuted"], c["total"] }')
passed=${passed:-0}; failed=${failed:-0}; skipped=${skipped:-0}; total=${total:-0}
# The trx logger leaves the notExecuted counter at 0 for skipped tests; their results carry
# outcome="NotExecuted", so count those.
skipped_results=$(cat "$results"/*.trx 2>/dev/null | tr '\n' ' ' | grep -o '<UnitTestResult [^>]*outcome="NotExecuted"' | wc -l)
if [ "$skipped_results" -gt "$skipped" ]; then skipped=$skipped_results; fi

# A crashed test host or a failing run that left no counters still fails.
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
if [ "$previous_failed" -eq 1 ]; then failed=$((failed + 1)); fi
if [ "$total" -eq 0 ]; then echo "eng/test.sh: no tests ran."; failed=$((failed > 0 ? failed : 1)); fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
