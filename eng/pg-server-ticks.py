#!/usr/bin/env python3
"""CPU ticks (user + system, in clock ticks) of a PostgreSQL server: its postmaster, every process
under it, and the children that already exited (counted into the postmaster's cumulative times).
For per-step CPU figures of in-database loops (eng/function-loop.sh, docs/benchmarks/experiments/0024-*.sh).

    python3 eng/pg-server-ticks.py DATA_DIR/postmaster.pid
"""
import os
import sys

postmaster = int(open(sys.argv[1]).readline())
total = 0
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        stat = open(f'/proc/{pid}/stat').read()
    except OSError:
        continue
    fields = stat[stat.rindex(')') + 2:].split()  # from field 3 (state) on
    if int(pid) == postmaster:
        total += sum(map(int, fields[11:15]))  # utime, stime, cutime, cstime
    elif int(fields[1]) == postmaster:  # ppid
        total += int(fields[11]) + int(fields[12])
print(total)
