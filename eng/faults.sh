#!/usr/bin/env bash
# Runs the fault scenarios of issue 12 against real host processes on PostgreSQL and checks the
# invariants after each (docs/reliability.md). Prints each scenario's faults, figures and the
# checker's verdict, then a summary table; exits 1 when any invariant was violated.
#
#   eng/faults.sh                  every scenario, full length (about 12 minutes on 2 cores)
#   eng/faults.sh --quick          the quick variant CI runs (about 3 minutes)
#   eng/faults.sh [--quick] NAME…  only the named scenarios
#   eng/faults.sh --list           the scenarios and what each proves
#
# Uses the throwaway PostgreSQL of eng/postgres.sh (started when not running; left running);
# the PostgreSQL restart scenarios run a second server of their own in .pg/faults/. Reports go to
# artifacts/faults/ (report-full.txt or report-quick.txt, one history file per scenario, the
# instances' logs under clusters/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi

if [[ " $* " != *" --list "* ]]; then
  source eng/postgres.sh start >/dev/null
  echo "faults: PostgreSQL $ALLOCATOR_POSTGRES" >&2
fi
echo "faults: building" >&2
dotnet build tests/Allocator.Reliability/Allocator.Reliability.csproj -c Release -nologo -v q -clp:ErrorsOnly >&2
exec dotnet tests/Allocator.Reliability/bin/Release/net10.0/Allocator.Reliability.dll "$@"
