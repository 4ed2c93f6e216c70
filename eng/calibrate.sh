#!/usr/bin/env bash
# How much of this machine a test run has, measured in a few seconds (issue 46): eng/test.sh sizes
# how many test assemblies run side by side from it.
#
#   eng/calibrate.sh            one line: cores free speed slots
#   eng/calibrate.sh --explain  the same, then what was measured, in words
#
# - cores: what the kernel offers (nproc);
# - free: the cores no one else is using. The kernel's counters (/proc/stat) say how much CPU
#   everything else took while this script slept: four windows of half a second, and the quietest
#   counts (a moment's burst is not a neighbour; a CPU hog shows in every window). Time a
#   hypervisor gave to other machines (steal) counts as taken. Quiet two-core machine: 1.9-2.0;
#   with one core taken by `stress-ng --cpu 1`: about 1.0.
# - speed: one CPU-bound task's pace against the reference machine (a two-core CI machine of this
#   project's class, quiet: 1.00; it swings by a fifth from one try to the next, with the host's
#   load and the clock a lone busy core gets).
# - slots: test assemblies at a time: the free cores, rounded down unless at least 0.6 of the
#   next one is free, one fewer on a machine at under half the reference's speed; at least 1, at
#   most cores + 1. ALLOCATOR_TEST_SLOTS overrides it.
#
# Why not time copies of a task side by side (as this script did first): on the VMs tried, one
# copy alone ran faster than each of two at once on a quiet machine (a lone busy core is clocked
# higher, and the host's other guests take their share), so "free" read 1.40-1.58 on quiet
# machines and chose one slot in half the runs: 16-18 minutes instead of 10-13.
set -euo pipefail

# Milliseconds for one copy of the task on the reference machine (measured 2026-11-28, quiet).
reference_ms=250

task() { awk 'BEGIN { for (i = 0; i < 4000000; i++) s += i * i }'; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# One copy alone, three times; prints the fastest round's milliseconds.
alone_ms() {
  local best=0 start took
  for _ in 1 2 3; do
    start=$(now_ms)
    task
    took=$(( $(now_ms) - start ))
    if [ "$best" -eq 0 ] || [ "$took" -lt "$best" ]; then best=$took; fi
  done
  echo "$best"
}

# The jiffies of every CPU: busy (user, nice, system, irq, softirq, steal) and in all.
jiffies() { awk '/^cpu / { busy = $2 + $3 + $4 + $7 + $8 + $9; all = busy + $5 + $6; print busy, all }' /proc/stat; }

# Cores' worth of CPU taken by others in the quietest of four half-second windows.
taken_cores() {
  local cores=$1 least="" b0 a0 b1 a1 taken
  for _ in 1 2 3 4; do
    read -r b0 a0 < <(jiffies)
    sleep 0.5
    read -r b1 a1 < <(jiffies)
    taken=$(awk -v c="$cores" -v b=$((b1 - b0)) -v a=$((a1 - a0)) 'BEGIN { printf "%.2f", (a > 0 ? c * b / a : 0) }')
    if [ -z "$least" ] || awk -v t="$taken" -v l="$least" 'BEGIN { exit !(t < l) }'; then least=$taken; fi
  done
  echo "$least"
}

cores=$(nproc)
taken=$(taken_cores "$cores")
alone=$(alone_ms)

read -r free speed slots < <(awk -v c="$cores" -v t="$taken" -v a="$alone" -v r="$reference_ms" -v o="${ALLOCATOR_TEST_SLOTS:-}" 'BEGIN {
  free = c - t; if (free < 0) free = 0
  speed = r / a
  slots = int(free + 0.4); if (speed < 0.5) slots--
  if (slots < 1) slots = 1; if (slots > c + 1) slots = c + 1
  if (o ~ /^[0-9]+$/ && o > 0) slots = o
  printf "%.2f %.2f %d\n", free, speed, slots
}')

echo "$cores $free $speed $slots"
if [ "${1:-}" = "--explain" ]; then
  echo "taken by others (the quietest of four half-second windows): ${taken} of ${cores} cores; one task alone: ${alone} ms (reference ${reference_ms} ms)"
  echo "free cores: ${free} of ${cores}; speed: ${speed}x the reference; test assemblies at a time: ${slots}${ALLOCATOR_TEST_SLOTS:+ (ALLOCATOR_TEST_SLOTS)}"
fi
