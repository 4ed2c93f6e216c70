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
finish() { dotnet build-server shutdown >/dev/null 2>&1 || true; stop_postgres; }
trap finish EXIT
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
# Every build of the run (this one, the previous release's, the release tests' packing) compiles
# on the compiler server, one warm process, whatever the environment says: with
# UseSharedCompilation=false (as CI's machines set it) each of the two dozen projects started a
# compiler of its own and JIT-compiled it again, and a clean build took 229 s instead of 97 s
# here (issue 46). The server stops when the run ends.
export UseSharedCompilation=true

results="$root/artifacts/test-results"
rm -rf "$results"
mkdir -p "$results/logs"

# How many test assemblies run side by side, from the machine (issue 46): its cores, and what a
# few seconds of calibration show of how much of them is free and how fast one is. A machine of
# CI's class that is quiet runs two; with one of its cores taken by another process, one.
read -r cores free speed slots < <(bash eng/calibrate.sh)
echo "eng/test.sh: $cores cores, $free free, speed ${speed}x CI's reference: $slots test assemblies at a time (eng/calibrate.sh)"
# The fault scenarios read it too: their two lanes run side by side only with two slots or more.
export ALLOCATOR_TEST_SLOTS="$slots"

# The previous release, built from git history: the compatibility checks compare this build with it
# (ADR 0026). It builds beside this build (whose project graph leaves a core idle a quarter of the
# time); the tests start once it is built (eng/previous-release.sh takes a lock), and its failure is
# reported below.
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

previous_failed=0
if ! wait "$previous_pid"; then
  previous_failed=1
  echo "eng/test.sh: the previous release could not be built from git history; the compatibility checks cannot run:"
  tail -n 20 "$previous_log"
fi

# The test processes (test hosts, the service instances and clusters they start) live seconds to
# minutes: a method is promoted to tier 1 after 200 calls rather than 30, so that a process does
# not spend its short life compiling what it will never call often enough to pay back (ADR 0030:
# 23% less CPU in the host's tests, 16% in the fault scenarios). Not the build's: the compiler
# server lives long.
export DOTNET_TC_CallCountThreshold=200

# Runs one test assembly (its name, a filter of its own, a label for its results); its console
# output goes to a log of its own, and one line says how it went.
run_assembly() {
  local name=$1 own=$2 label=$3 dll="$root/tests/$1/bin/Release/net10.0/$1.dll" combined=()
  if [ -n "$own" ] && [ ${#filter[@]} -gt 0 ]; then combined=(--filter "(${filter[1]})&($own)")
  elif [ -n "$own" ]; then combined=(--filter "$own")
  else combined=("${filter[@]}"); fi
  local begun=$SECONDS log="$results/logs/$label.log" cpu status
  # Its CPU: user + system seconds of its process tree (the test host and every process it started
  # and waited for, service instances included; not PostgreSQL's).
  cpu=$( { TIMEFORMAT='%U %S'; time dotnet test "$dll" "${combined[@]}" --logger "trx;LogFileName=$label.trx" \
    --logger "console;verbosity=minimal" --results-directory "$results" -- RunConfiguration.TestSessionTimeout=2400000 >"$log" 2>&1; } 2>&1 )
  status=$?
  cpu=$(awk '{ printf "%d", $1 + $2 }' <<<"$cpu")
  local took=$((SECONDS - begun))
  # A filter that matches nothing in this assembly is not a failure.
  if grep -q "No test matches the given testcase filter" "$log"; then status=0; fi
  echo "$label $status $((begun - tests_started)) $took $cpu" >>"$results/assemblies.txt"
  local said; said=$(grep -E "^(Passed|Failed)! " "$log" | tail -n 1 | sed 's/ - [^ ]*\.dll (net[0-9.]*)$//')
  if [ "$status" -ne 0 ]; then
    echo "eng/test.sh: $label failed after ${took} s (exit $status); its output (all of it: ${log#"$root"/}):"
    grep -vE "^(A total of|Test run for|Starting test execution|Results File:)" "$log" | sed '/^$/d' | tail -n 300
  else
    echo "eng/test.sh: $label: ${said:-no tests matched the filter} (${took} s)"
  fi
}

# Every test project, longest first as measured (a project not named here runs first: it is new).
order=(Allocator.Reliability.Tests Allocator.Host.Tests Allocator.Storage.PostgreSql.Tests Allocator.Grains.Tests
  Allocator.Release.Tests Allocator.Clustering.PostgreSql.Tests Allocator.LoadTests.Tests Allocator.Storage.InMemory.Tests
  Allocator.Storage.SqlServer.Tests Allocator.Core.Tests)
mapfile -t projects < <(grep -l "<IsTestProject>true</IsTestProject>" tests/*/*.csproj | xargs -n 1 dirname | xargs -n 1 basename)
queue=()
for p in "${projects[@]}"; do [[ " ${order[*]} " == *" $p "* ]] || queue+=("$p"); done
for p in "${order[@]}"; do [[ " ${projects[*]} " == *" $p "* ]] && queue+=("$p"); done

tests_started=$SECONDS
: >"$results/assemblies.txt"

# First: the fault scenarios whose checks are timed second by second (a database's pools while
# another is out, readiness in a partition; the rolling restart's calls within their deadlines:
# trait Lane=timed). Their load keeps a pace and uses
# about half a core (ADR 0030); nothing heavy starts beside them. With two slots or more the light
# assemblies (unit tests, the in-memory store, the load-test harness, the membership provider's
# silos, the grains' in-process silos: under half a core, about 110 core-seconds in all) run
# beside them one after another, and go on beside the rest without taking a slot; with one slot
# they wait with the rest.
light=(Allocator.Core.Tests Allocator.Storage.InMemory.Tests Allocator.Storage.SqlServer.Tests Allocator.LoadTests.Tests
  Allocator.Clustering.PostgreSql.Tests Allocator.Grains.Tests)
run_assembly Allocator.Reliability.Tests "Lane=timed" Allocator.Reliability.Tests.timed &
timed=$!
if [ "$slots" -ge 2 ]; then
  ( for p in "${light[@]}"; do [[ " ${queue[*]} " == *" $p "* ]] && run_assembly "$p" "" "$p"; done ) &
  rest=()
  for p in "${queue[@]}"; do [[ " ${light[*]} " == *" $p "* ]] || rest+=("$p"); done
  queue=("${rest[@]}")
fi
wait "$timed"

# Then the rest, $slots at a time, longest first. The host's browser tests (Chromium: seconds of
# both cores when it starts) run last, once the fault scenarios are over: in three clean-clone
# runs a browser test that started beside the quick rolling restart stalled the machine and
# turned the restart's answers into 503s (issue 46).
browser="FullyQualifiedName~Allocator.Host.Tests.Browser."
for i in "${!queue[@]}"; do [ "${queue[$i]}" = Allocator.Host.Tests ] && queue+=(Allocator.Host.Tests.browser); done
reliability=""
running=()
for p in "${queue[@]}"; do
  while [ "${#running[@]}" -ge "$slots" ]; do
    wait -n "${running[@]}"
    alive=()
    for pid in "${running[@]}"; do if kill -0 "$pid" 2>/dev/null; then alive+=("$pid"); fi; done
    running=("${alive[@]}")
  done
  if [ "$p" = Allocator.Reliability.Tests ]; then
    run_assembly "$p" "Lane!=timed" "$p" &
    reliability=$!
  elif [ "$p" = Allocator.Host.Tests ]; then
    run_assembly "$p" "FullyQualifiedName!~Allocator.Host.Tests.Browser." "$p" &
  elif [ "$p" = Allocator.Storage.PostgreSql.Tests ]; then
    run_assembly "$p" "Lane!=compat" "$p" &
  elif [ "$p" = Allocator.Host.Tests.browser ]; then
    if [ -n "$reliability" ]; then wait "$reliability" 2>/dev/null; fi
    run_assembly Allocator.Host.Tests "$browser" "$p" &
  else
    run_assembly "$p" "" "$p" &
  fi
  running+=($!)
done
wait

# Last, alone: the previous release's own store suite on this build's schema (trait Lane=compat,
# SchemaContractTests). Its tests keep the bounds they were released with (1.0.0's registration
# race: 1,200 contended transactions within 60 s, 3 s on a quiet machine), which two clean-clone
# runs on a loaded machine broke beside the fault scenarios (issue 46); alone it takes about a minute
# (three before its connections were pooled: each of its calls started a server process).
run_assembly Allocator.Storage.PostgreSql.Tests "Lane=compat" Allocator.Storage.PostgreSql.Tests.compat
status=0
while read -r _ code _; do [ "$code" -eq 0 ] || status=1; done <"$results/assemblies.txt"
echo "eng/test.sh: build and tests took $((SECONDS - started)) s"

# Each assembly's time (from the start of the tests) and the slowest tests, for whoever makes the run shorter.
echo "eng/test.sh: each test assembly (s): start (from the start of the tests), took, CPU of its processes"
awk '{ printf "  %5d %5d %5d  %s\n", $3, $4, $5, $1 }' "$results/assemblies.txt" | sort -n
echo "eng/test.sh: the slowest tests (s)"
cat "$results"/*.trx 2>/dev/null | tr '\n' ' ' | grep -o '<UnitTestResult [^>]*>' \
  | sed -n 's/.*testName="\([^"]*\)".*duration="\([0-9]*\):\([0-9]*\):\([0-9.]*\)".*/\2 \3 \4 \1/p' | sed 's/&quot;/"/g; s/&amp;/\&/g' \
  | awk '{ s = $1 * 3600 + $2 * 60 + $3; $1 = $2 = $3 = ""; sub(/^ +/, ""); printf "%8.1f  %s\n", s, $0 }' | sort -rn | head -n 12

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
