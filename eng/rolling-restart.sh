#!/usr/bin/env bash
# Restarts the instances of a running `eng/run.sh --instances N`, one at a time, as a deploy does
# (docs/operations.md): SIGTERM to instance i (it leaves readiness, drains, hands its pool grains
# over and exits; run.sh starts it again on the same ports), then wait until it is ready before
# the next. Prints, per instance, how long it took to exit and to be ready again.
#
#   eng/rolling-restart.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi

count=$(find artifacts/run -maxdepth 1 -name 'instance-*.pid' 2>/dev/null | wc -l)
if [ "$count" -eq 0 ] || [ -e artifacts/run/stopping ]; then
  echo "eng/rolling-restart.sh: no running eng/run.sh --instances N (artifacts/run/instance-*.pid)" >&2; exit 1
fi

now() { date +%s.%N; }
for i in $(seq 0 $((count - 1))); do
  pid="$(cat "artifacts/run/instance-$i.pid")"
  url="$(cat "artifacts/run/instance-$i.url")"
  started=$(now)
  kill -TERM "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  exited=$(now)
  ready=""
  for _ in $(seq 1 600); do
    current="$(cat "artifacts/run/instance-$i.pid" 2>/dev/null || true)"
    if [ -n "$current" ] && [ "$current" != "$pid" ] && curl -fsS "$url/health/ready" >/dev/null 2>&1; then ready=$(now); break; fi
    sleep 0.2
  done
  if [ -z "$ready" ]; then
    echo "eng/rolling-restart.sh: instance $i was not ready again within 120 s (see artifacts/run/instance-$i.log)" >&2; exit 1
  fi
  awk -v i="$i" -v s="$started" -v e="$exited" -v r="$ready" \
    'BEGIN { printf "instance %d: exited %.1f s after SIGTERM, ready again %.1f s later\n", i, e - s, r - e }'
done
