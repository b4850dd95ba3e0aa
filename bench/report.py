#!/usr/bin/env python3
"""Turns bench/out/RUN/results.tsv into the Markdown summary bench/run prints.

Ratios: an endpoint's requests/s over its ceiling's, measured in the same run:
/healthz of the same binary (HTTP ceiling), and on PostgreSQL the pgbench run of
the endpoint's own SQL (database ceiling). Targets are those of issue 6.
"""

import csv
import sys
from pathlib import Path

out = Path(sys.argv[1])
rows = list(csv.DictReader(open(out / "results.tsv"), delimiter="\t"))
by = {(r["backend"], r["size"], r["target"]): r for r in rows}


def num(row, key):
    try:
        return float(row[key])
    except (TypeError, ValueError):
        return None


print(f"# masterpay benchmark {out.name}\n")
print("```")
print((out / "machine.txt").read_text().rstrip())
print("```\n")
print("| backend | size | target | req/s | p50 ms | p99 ms | 200 | 409 | errors | RSS MiB | peak RSS MiB | load1 | other CPU % |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    print(
        f"| {r['backend']} | {r['size']} | {r['target']} | {r['rps']} | {r['p50_ms']} | {r['p99_ms']} "
        f"| {r['ok']} | {r['status_409']} | {r['errors']} | {r['rss_mib']} | {r['hwm_mib']} | {r['load']} "
        f"| {r.get('other_cpu', '-')} |"
    )
print(
    "\nload1: the 1-minute load average just before the measurement (the benchmark itself keeps it"
    " at 3 to 10); other CPU: share of all CPU time that processes outside the benchmark"
    " (server, wrk/pgbench, PostgreSQL) used during it, i.e. how noisy the measurement is."
)

print("\n| backend | size | endpoint | ceiling | ratio |")
print("|---|---|---|---|---:|")
ratios = {}
for (backend, size, target), r in by.items():
    if target not in ("balance", "complete"):
        continue
    ceilings = [("healthz", "/healthz")]
    if backend == "postgres":
        ceilings.append((f"pgbench-{target}", f"pgbench {target}"))
    for key, label in ceilings:
        c = by.get((backend, size, key))
        if c and num(c, "rps"):
            ratio = num(r, "rps") / num(c, "rps")
            ratios[(backend, size, target, key)] = ratio
            print(f"| {backend} | {size} | {target} | {label} | {ratio:.2f} |")

# Issue 6 targets.
checks = []


def check(label, ok):
    if ok is not None:
        checks.append((label, ok))


sizes = sorted({s for (_, s, _) in by}, key=lambda s: float(s))
for size in sizes:
    ratio = ratios.get(("sqlite", size, "balance", "healthz"))
    check(f"sqlite {size}: balance >= 0.50 x /healthz ({ratio:.2f})" if ratio else "", ratio and ratio >= 0.50)
    for t in ("balance", "complete"):
        ratio = ratios.get(("postgres", size, t, f"pgbench-{t}"))
        check(f"postgres {size}: {t} >= 0.80 x pgbench ({ratio:.2f})" if ratio else "", ratio and ratio >= 0.80)
    r = by.get(("sqlite", size, "balance"))
    if r:
        check(f"sqlite {size}: balance p99 <= 5 ms ({r['p99_ms']} ms)", num(r, "p99_ms") <= 5)
    r = by.get(("postgres", size, "complete"))
    if r:
        check(f"postgres {size}: complete p99 <= 20 ms ({r['p99_ms']} ms)", num(r, "p99_ms") <= 20)
errors = [f"{r['backend']} {r['size']} {r['target']}" for r in rows if r["errors"] not in ("0", "-")]
check("no errors" + (f" (errors in: {', '.join(errors)})" if errors else ""), not errors)
hwm = [num(r, "hwm_mib") for r in rows if num(r, "hwm_mib") is not None]
if hwm:
    check(f"RSS <= 64 MiB (peak {max(hwm):.1f} MiB)", max(hwm) <= 64)
if "1e3" in sizes and "1e6" in sizes:
    for backend in ("sqlite", "postgres"):
        for t in ("balance", "complete"):
            small, big = by.get((backend, "1e3", t)), by.get((backend, "1e6", t))
            if small and big and num(small, "rps"):
                ratio = num(big, "rps") / num(small, "rps")
                check(f"{backend} {t}: 1e6 within 10% of 1e3 ({ratio:.2f})", ratio >= 0.90)
complete_rows = [r for r in rows if r["target"] == "complete"]
for r in complete_rows:
    ok, dup = int(r["ok"]), int(r["status_409"])
    if ok + dup and dup > 0.05 * (ok + dup):
        check(f"{r['backend']} {r['size']} complete: mostly real completions ({dup} of {ok + dup} were 409)", False)

if checks:
    print("\nTargets (issue 6):\n")
    for label, ok in checks:
        print(f"- [{'x' if ok else ' '}] {label}")
