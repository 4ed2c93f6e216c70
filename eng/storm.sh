#!/usr/bin/env bash
# Runs a load workload (every strategy side by side) on a real PostgreSQL and writes its report.
#
#   eng/storm.sh NAME [--quick] [options]     e.g. eng/storm.sh storm-90 --quick
#   eng/storm.sh list                         the workloads
#   eng/storm.sh --help                       every command and option (generated from the parser)
#   eng/storm.sh NAME --dashboard             also the Aspire dashboard (eng/dashboard.sh), which the
#                                             in-process service exports its traces, metrics and logs to
#
# Without --connection or ALLOCATOR_POSTGRES the run starts the throwaway PostgreSQL of
# eng/postgres.sh (installing PostgreSQL from Debian's packages if needed) and stops it after.
# Reports go to loadtests/Allocator.LoadTests/reports/<timestamp>-<workload>/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
args=()
dashboard=0
for arg in "$@"; do
  if [ "$arg" = "--dashboard" ]; then dashboard=1; else args+=("$arg"); fi
done
if [ "$dashboard" = 0 ]; then
  exec dotnet run -c Release --project loadtests/Allocator.LoadTests -- "${args[@]}"
fi

source eng/dashboard.sh
trap 'dashboard_stop' EXIT
trap 'exit 130' INT TERM
dashboard_start
echo "storm: exporting to the Aspire dashboard at $dashboard_url (traces: $dashboard_url/traces)" >&2
status=0
dotnet run -c Release --project loadtests/Allocator.LoadTests -- "${args[@]}" || status=$?
if [ -t 0 ]; then
  echo "storm: done (exit $status); the dashboard stays at $dashboard_url until Ctrl+C" >&2
  wait "$dashboard_pid" || true
fi
exit "$status"
