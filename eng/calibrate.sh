#!/usr/bin/env bash
# How much of this machine a test run has, measured in a few seconds (issue 46): eng/test.sh sizes
# how many test assemblies run side by side from it.
#
#   eng/calibrate.sh            one line: cores free speed slots
#   eng/calibrate.sh --explain  the same, then what was measured, in words
#
# - cores: what the kernel offers (nproc);
# - free: how many cores' worth of work `cores` copies of one CPU-bound task got at once, against
#   one copy alone (2.0 on a quiet two-core machine; about 1.3 with one core taken by a busy
#   process at the same priority, which the scheduler then shares three ways);
# - speed: one copy's pace against the reference machine (a two-core CI machine of this project's
#   class, quiet: 1.00; it swings by a fifth from one try to the next there, with the host's load);
# - slots: test assemblies at a time: the free cores, rounded down unless at least 0.6 of the
#   next one is free (a quiet two-core machine measured 1.73 to 2.00, the same with one core
#   taken by stress-ng 1.14 to 1.44), one fewer on a machine at under half the reference's speed;
#   at least 1, at most cores + 1. ALLOCATOR_TEST_SLOTS overrides it.
#
# The task is an arithmetic loop in awk (on every machine; one process, no I/O: a pipe's pace
# swung by half from one try to the next here), three times, and the fastest round counts.
set -euo pipefail

# Milliseconds for one copy of the task on the reference machine (measured 2026-11-28, quiet).
reference_ms=250

task() { awk 'BEGIN { for (i = 0; i < 4000000; i++) s += i * i }'; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# Runs $1 copies of the task at once, three times; prints the fastest round's milliseconds.
round() {
  local copies=$1 best=0 start took i
  for _ in 1 2 3; do
    start=$(now_ms)
    for ((i = 0; i < copies; i++)); do task & done
    wait
    took=$(( $(now_ms) - start ))
    if [ "$best" -eq 0 ] || [ "$took" -lt "$best" ]; then best=$took; fi
  done
  echo "$best"
}

cores=$(nproc)
alone=$(round 1)
together=$(round "$cores")

read -r free speed slots < <(awk -v c="$cores" -v a="$alone" -v t="$together" -v r="$reference_ms" -v o="${ALLOCATOR_TEST_SLOTS:-}" 'BEGIN {
  free = c * a / t; if (free > c) free = c
  speed = r / a
  slots = int(free + 0.4); if (speed < 0.5) slots--
  if (slots < 1) slots = 1; if (slots > c + 1) slots = c + 1
  if (o ~ /^[0-9]+$/ && o > 0) slots = o
  printf "%.2f %.2f %d\n", free, speed, slots
}')

echo "$cores $free $speed $slots"
if [ "${1:-}" = "--explain" ]; then
  echo "one copy alone: ${alone} ms (reference ${reference_ms} ms); ${cores} copies at once: ${together} ms"
  echo "free cores: ${free} of ${cores}; speed: ${speed}x the reference; test assemblies at a time: ${slots}${ALLOCATOR_TEST_SLOTS:+ (ALLOCATOR_TEST_SLOTS)}"
fi
