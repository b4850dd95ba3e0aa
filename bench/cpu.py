#!/usr/bin/env python3
"""CPU accounting for bench/run: how busy the rest of the machine was.

    cpu.py snapshot SERVER_PID BENCH_PID   prints one line of counters
    cpu.py other BEFORE AFTER              prints the share (%) of all CPU
                                           time used by other processes

Counters (clock ticks): the machine's total and busy time (/proc/stat), the
server's own time, PostgreSQL's (every `postgres` process plus what the
postmaster collected from exited backends), and the benchmark shell's
finished children (wrk, pgbench). "Other" is busy time none of these used:
compilers and test runs of other people sharing the machine. The load
average cannot tell that apart, because the benchmark itself keeps several
threads runnable.
"""

import os
import sys


def stat_fields(pid):
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    # Fields after the command name, which may contain spaces: state is [0].
    return text[text.rindex(")") + 2 :].split()


def own_and_children(pid):
    """utime + stime, and cutime + cstime, of a process (0, 0 when gone)."""
    try:
        f = stat_fields(pid)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return 0, 0
    return int(f[11]) + int(f[12]), int(f[13]) + int(f[14])


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def postgres_ticks():
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or comm(entry) != "postgres":
            continue
        own, children = own_and_children(entry)
        total += own
        try:
            parent = stat_fields(entry)[1]
        except OSError:
            continue
        if comm(parent) != "postgres":  # the postmaster reaps the backends
            total += children
    return total


def snapshot(server_pid, bench_pid):
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    total = sum(cpu[:8])  # guest time is already part of user time
    busy = total - cpu[3] - cpu[4]  # minus idle and iowait
    server = sum(own_and_children(server_pid)) if server_pid != "0" else 0
    children = own_and_children(bench_pid)[1]
    print(total, busy, server, postgres_ticks(), children)


def other(before, after):
    b = [int(x) for x in before.split()]
    a = [int(x) for x in after.split()]
    d = [y - x for x, y in zip(b, a)]
    total, busy, ours = d[0], d[1], d[2] + d[3] + d[4]
    print(f"{max(0.0, 100.0 * (busy - ours) / total) if total > 0 else 0.0:.0f}")


if __name__ == "__main__":
    if sys.argv[1] == "snapshot":
        snapshot(sys.argv[2], sys.argv[3])
    else:
        other(sys.argv[2], sys.argv[3])
