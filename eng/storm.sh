#!/usr/bin/env bash
# Runs a load workload (every strategy side by side) on a real PostgreSQL and writes its report.
#
#   eng/storm.sh NAME [--quick] [options]     e.g. eng/storm.sh storm-90 --quick
#   eng/storm.sh list                         the workloads
#   eng/storm.sh --help                       every command and option (generated from the parser)
#
# Without --connection or ALLOCATOR_POSTGRES the run starts the throwaway PostgreSQL of
# eng/postgres.sh (installing PostgreSQL from Debian's packages if needed) and stops it after.
# Reports go to loadtests/Allocator.LoadTests/reports/<timestamp>-<workload>/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
exec dotnet run -c Release --project loadtests/Allocator.LoadTests -- "$@"
