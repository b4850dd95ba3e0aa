#!/usr/bin/env python3
"""Turns bench/out/RUN/results.tsv into the Markdown summary bench/run prints.

results.tsv has one row per round of each target; a target's row here sums
its rounds: requests/s is all its requests over all its seconds, and p50/p99
are those of all its requests (the rounds' latency quantiles, in
bench/out/RUN/latency/, merged). Ratios: an endpoint's requests/s over its
ceiling's, measured in the same run, their rounds alternating: /healthz of the
same binary (HTTP ceiling; for create, the healthz-create rounds that
alternate with its own), and on PostgreSQL the pgbench run of the endpoint's
own SQL (database ceiling); on SQLite, for complete and create,
bench/sqlite_writes.py's run of the store's own transaction in a loop on one
connection (its database ceiling: "sqlite-complete", "sqlite-create"; a
system SQLite without HTTP or the store's queue, checkpointed as the store
is, so the ratio is the share of the file's write rate the service reaches). Beside each
ratio, the lowest and
highest of its rounds' ratios show how much the machine drifted. The targets
checked are the service's performance floors (docs/performance.md).

The latency targets are set beside what a closed loop allows: wrk and pgbench
keep every connection busy, so by Little's law the mean latency is about
connections / requests per second (a little less: the client's own time
between an answer and the next request is not counted), and a p99 is above
the mean. A p99 of at most L at C connections therefore needs about C / L
requests per second or more, and the report prints that rate beside what the
endpoint and its ceiling made, with their mean, p99 and p99 / mean (the shape
of the tail: for SQLite balance and /healthz on the 2-vCPU machine it stays
near 2.5 to 3 whatever the rate, so there the p99 follows the rate). The ceiling's numbers are no bound on
the endpoint's: the service holds 12 database connections where pgbench
holds 64, so it can finish more completions per second than pgbench, with a
shorter tail.
"""

import csv
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

out = Path(sys.argv[1])
raw = list(csv.DictReader(open(out / "results.tsv"), delimiter="\t"))


def num(row, key):
    try:
        return float(row[key])
    except (TypeError, ValueError, KeyError):
        return None


def merged_quantile(parts, p):
    """The p-quantile (the mean for p None) of the union of several rounds,
    each given as its request count and its 1000 quantiles (a round's
    requests spread evenly over them)."""
    points = []
    for requests, q in parts:
        if requests and q:
            weight = requests / len(q)
            points.extend((value, weight) for value in q)
    if not points:
        return None
    if p is None:  # the mean
        return sum(value * weight for value, weight in points) / sum(w for _, w in points)
    points.sort()
    total = sum(weight for _, weight in points)
    seen = 0.0
    for value, weight in points:
        seen += weight
        if seen >= p * total - 1e-9:
            return value
    return points[-1][0]


rounds = defaultdict(list)
for r in raw:
    rounds[(r["backend"], r["size"], r["target"])].append(r)

rows = []
for (backend, size, target), parts in rounds.items():
    requests = sum(num(r, "requests") or 0 for r in parts)
    secs = sum(num(r, "secs") or 0 for r in parts)
    latency = []
    for r in parts:
        path = out / "latency" / f"{backend}-{size}-{target}.r{r['round']}.json"
        if path.exists():
            data = json.loads(path.read_text())
            latency.append((data["requests"], data["q"]))
    p50, p99 = merged_quantile(latency, 0.50), merged_quantile(latency, 0.99)
    mean = merged_quantile(latency, None)
    rss = [num(r, "rss_mib") for r in parts if num(r, "rss_mib") is not None]
    hwm = [num(r, "hwm_mib") for r in parts if num(r, "hwm_mib") is not None]
    other = [num(r, "other_cpu") for r in parts if num(r, "other_cpu") is not None]
    rows.append({
        "backend": backend, "size": size, "target": target, "rounds": len(parts),
        "rps": requests / secs if secs else 0.0,
        "round_rps": [num(r, "rps") or 0.0 for r in parts],
        "p50_ms": p50 / 1000 if p50 is not None else None,
        "p99_ms": p99 / 1000 if p99 is not None else None,
        "mean_ms": mean / 1000 if mean is not None else None,
        "ok": sum(int(r["ok"]) for r in parts),
        "status_409": sum(int(r["status_409"]) for r in parts),
        "errors": sum(int(r["errors"]) for r in parts),
        "rss_mib": rss[-1] if rss else None,
        "hwm_mib": max(hwm) if hwm else None,
        "load": max(num(r, "load") or 0 for r in parts),
        "other_cpu": max(other) if other else None,
    })
# Backends in the order they ran, each size's rows together (bench/run
# alternates the sizes' rounds, so results.tsv interleaves them).
backend_order = list(dict.fromkeys(r["backend"] for r in rows))
rows.sort(key=lambda r: (backend_order.index(r["backend"]), float(r["size"])))
by = {(r["backend"], r["size"], r["target"]): r for r in rows}


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


print(f"# masterpay benchmark {out.name}\n")
print("```")
print((out / "machine.txt").read_text().rstrip())
print("```\n")
print("| backend | size | target | req/s | rounds' req/s | mean ms | p50 ms | p99 ms | 200 | 409 "
      "| errors | RSS MiB | peak RSS MiB | load1 | other CPU % |")
print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    spread = ", ".join(f"{x:.0f}" for x in r["round_rps"])
    print(
        f"| {r['backend']} | {r['size']} | {r['target']} | {r['rps']:.0f} | {spread} "
        f"| {fmt(r['mean_ms'], '.2f')} | {fmt(r['p50_ms'], '.2f')} | {fmt(r['p99_ms'], '.2f')} | {r['ok']} | {r['status_409']} "
        f"| {r['errors']} | {fmt(r['rss_mib'], '.1f')} | {fmt(r['hwm_mib'], '.1f')} "
        f"| {r['load']:.2f} | {fmt(r['other_cpu'], '.0f')} |"
    )
print(
    "\nreq/s: all of a target's requests over all its seconds; rounds' req/s: each round's, in"
    " the order they ran; mean/p50/p99: latency of all its requests. load1: the highest 1-minute load"
    " average just before a round (the benchmark itself keeps it at 3 to 10); other CPU: the"
    " highest share, in a round, of all CPU time that processes outside the benchmark (server,"
    " wrk/pgbench, PostgreSQL) used, i.e. how noisy the measurement is. 200: successful answers"
    " (create's are 201s). healthz-create: /healthz again, in rounds alternating with create's."
)

print("\n| backend | size | endpoint | ceiling | ratio | rounds' ratios, lowest to highest |")
print("|---|---|---|---|---:|---|")
ratios = {}
for (backend, size, target), r in by.items():
    if target not in ("balance", "create", "complete", "complete-endpoint"):
        continue
    ceilings = [("healthz-create" if target == "create" else "healthz", "/healthz")]
    if target == "complete-endpoint":
        # Events cost: the same completions with no endpoint subscribed,
        # their rounds alternating.
        ceilings = [("complete-no-endpoint", "complete, no endpoint")]
    elif backend == "postgres":
        ceilings.append((f"pgbench-{target}", f"pgbench {target}"))
    elif target != "balance":
        ceilings.append((f"sqlite-{target}", f"SQLite's own {target}"))
    for key, label in ceilings:
        c = by.get((backend, size, key))
        if c and c["rps"]:
            ratio = r["rps"] / c["rps"]
            ratios[(backend, size, target, key)] = ratio
            # Round k of the endpoint against round k of its ceiling.
            pairs = sorted(e / h for e, h in zip(r["round_rps"], c["round_rps"]) if h)
            spread = f"{pairs[0]:.2f} to {pairs[-1]:.2f}" if pairs else "-"
            print(f"| {backend} | {size} | {target} | {label} | {ratio:.2f} | {spread} |")

# The performance floors the service must hold.
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
    if r and r["p99_ms"] is not None:
        check(f"sqlite {size}: balance p99 <= 5 ms ({r['p99_ms']:.2f} ms)", r["p99_ms"] <= 5)
    for t in ("complete", "create"):
        r = by.get(("postgres", size, t))
        if r and r["p99_ms"] is not None:
            check(f"postgres {size}: {t} p99 <= 20 ms ({r['p99_ms']:.2f} ms)", r["p99_ms"] <= 20)
        ratio = ratios.get(("sqlite", size, t, f"sqlite-{t}"))
        check(f"sqlite {size}: {t} >= 0.80 x SQLite's own ({ratio:.2f})" if ratio else "", ratio and ratio >= 0.80)
        r = by.get(("sqlite", size, t))
        if r and r["p99_ms"] is not None:
            check(f"sqlite {size}: {t} p99 <= 25 ms ({r['p99_ms']:.2f} ms)", r["p99_ms"] <= 25)
    for backend in ("sqlite", "postgres"):
        ratio = ratios.get((backend, size, "complete-endpoint", "complete-no-endpoint"))
        if ratio:
            check(f"{backend} {size}: complete with a subscribed endpoint >= 0.90 x with none ({ratio:.2f})",
                  ratio >= 0.90)
errors = [f"{r['backend']} {r['size']} {r['target']}" for r in rows if r["errors"]]
check("no errors" + (f" (errors in: {', '.join(errors)})" if errors else ""), not errors)
hwm = [r["hwm_mib"] for r in rows if r["hwm_mib"] is not None]
if hwm:
    check(f"RSS <= 64 MiB (peak {max(hwm):.1f} MiB)", max(hwm) <= 64)
# Outgoing events (bench/run's event rounds): each complete-endpoint round's
# backlog at its end and the seconds it took to drain; the steady load's
# delay from each event's commit to its first attempt.
drains = defaultdict(list)
if (out / "events-drain.tsv").exists():
    for r in csv.DictReader(open(out / "events-drain.tsv"), delimiter="\t"):
        drains[(r["backend"], r["size"])].append((int(r["backlog"]), float(r["drain_s"])))
event_lines = []
for (backend, size), parts in drains.items():
    shown = ", ".join(f"{b:,} in {d:.1f} s" for b, d in parts)
    event_lines.append(f"{backend} {size}: backlog at each complete-endpoint round's end, and its drain: {shown}")
if (out / "events-delay.tsv").exists():
    for r in csv.DictReader(open(out / "events-delay.tsv"), delimiter="\t"):
        steady = by.get((r["backend"], r["size"], "complete-steady"))
        rate = f"{steady['rps']:,.0f} completions/s" if steady else "?"
        p50, p99 = float(r["p50_ms"]), float(r["p99_ms"])
        event_lines.append(
            f"{r['backend']} {r['size']}: steady {rate}: {int(r['events']):,} events, commit to first attempt "
            f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {float(r['max_ms']):.1f} ms; "
            f"{r['undelivered']} undelivered, {r['sent_again']} sent more than once")
        check(f"{r['backend']} {r['size']}: commit to first attempt p50 <= 250 ms ({p50:.1f} ms)", p50 <= 250)
        check(f"{r['backend']} {r['size']}: commit to first attempt p99 <= 2 s ({p99:.1f} ms)", p99 <= 2000)
        check(f"{r['backend']} {r['size']}: every steady event delivered ({r['undelivered']} not)",
              r["undelivered"] == "0")

# SQLite's own cost of a balance lookup at each size (bench/sqlite_lookup.py):
# microseconds per lookup, the counterpart of pgbench's own rate on PostgreSQL.
lookup, lookup_version = {}, ""
lookup_file = out / "sqlite-lookup.tsv"
if lookup_file.exists():
    for size, micros, version in csv.reader(open(lookup_file), delimiter="\t"):
        lookup[size], lookup_version = float(micros), version
if "1e3" in sizes and "1e6" in sizes:
    for backend in ("sqlite", "postgres"):
        for t in ("balance", "complete"):
            small, big = by.get((backend, "1e3", t)), by.get((backend, "1e6", t))
            if small and big and small["rps"]:
                ratio = big["rps"] / small["rps"]
                # Round k at 1e6 against round k at 1e3 (bench/run alternates
                # the sizes' rounds), then the ceilings' own 1e6 / 1e3 for
                # comparison: /healthz reads no database, so its ratio is the
                # machine's drift between the two sizes' rounds.
                pairs = sorted(b / s for b, s in zip(big["round_rps"], small["round_rps"]) if s)
                own = f"; rounds {pairs[0]:.2f} to {pairs[-1]:.2f}" if pairs else ""
                for ceiling, label in (("healthz", "/healthz"), (f"pgbench-{t}", "pgbench with the same SQL")):
                    cs, cb = by.get((backend, "1e3", ceiling)), by.get((backend, "1e6", ceiling))
                    if cs and cb and cs["rps"]:
                        own += f"; {label}: {cb['rps'] / cs['rps']:.2f}"
                if backend == "sqlite" and t == "balance" and "1e3" in lookup and "1e6" in lookup:
                    own += f"; SQLite's own lookup: {lookup['1e3']:.2f} µs at 1e3, {lookup['1e6']:.2f} at 1e6"
                # Three decimals where two would round a miss up to the line.
                shown = f"{ratio:.3f}" if 0.895 <= ratio < 0.905 else f"{ratio:.2f}"
                check(f"{backend} {t}: 1e6 within 10% of 1e3 ({shown}{own})", ratio >= 0.90)
for r in rows:
    # A create answers 409 only for a key used before: each request has its own.
    if r["target"] == "create" and r["status_409"]:
        check(f"{r['backend']} {r['size']} create: every key new ({r['status_409']} answered 409)", False)
    if not r["target"].startswith("complete"):
        continue
    ok, dup = r["ok"], r["status_409"]
    if ok + dup and dup > 0.05 * (ok + dup):
        check(f"{r['backend']} {r['size']} complete: mostly real completions ({dup} of {ok + dup} were 409)", False)

if checks:
    print("\nTargets:\n")
    for label, ok in checks:
        print(f"- [{'x' if ok else ' '}] {label}")

# What the latency targets need of a closed loop (see the module docs).
settings = re.search(r"(\d+) connections", (out / "machine.txt").read_text())
connections = int(settings.group(1)) if settings else 64
needs = []


def latency(r):
    shape = ""
    if r["mean_ms"] and r["p99_ms"] is not None:
        shape = f", p99 / mean {r['p99_ms'] / r['mean_ms']:.1f}"
    return (f"{r['rps']:,.0f} (mean {fmt(r['mean_ms'], '.2f')} ms, "
            f"p99 {fmt(r['p99_ms'], '.2f')} ms{shape})")


for (backend, target, limit_ms, ceiling) in (
    ("sqlite", "balance", 5, "healthz"),
    ("postgres", "complete", 20, "pgbench-complete"),
    ("postgres", "create", 20, "pgbench-create"),
    ("sqlite", "complete", 25, "sqlite-complete"),
    ("sqlite", "create", 25, "sqlite-create"),
):
    for size in sizes:
        r = by.get((backend, size, target))
        if not r or r["p99_ms"] is None:
            continue
        need = connections / (limit_ms / 1000)
        line = (f"{backend} {size} {target}: p99 <= {limit_ms} ms at {connections} connections needs "
                f"about {need:,.0f} req/s or more; it made {latency(r)}")
        c = by.get((backend, size, ceiling))
        if c:
            name = {"healthz": "/healthz"}.get(ceiling, "SQLite's own writes" if backend == "sqlite"
                                                else "pgbench with the same SQL")
            line += f"; {name} made {latency(c)}"
        needs.append(line)
if event_lines:
    print("\nOutgoing events (an endpoint subscribed to order.completed, the relay sending to a receiver "
          "that answers at once):\n")
    for line in event_lines:
        print(f"- {line}")

if needs:
    print("\nWhat the latency targets need (Little's law; see bench/report.py):\n")
    for line in needs:
        print(f"- {line}")

# PostgreSQL reads and writes concurrent requests in groups (the warm-up's
# and every round's): the mean group, from the server's own histograms.
# pgbench's ceilings run one request per statement, as each request alone
# would.
batches = out / "batches.tsv"
if batches.exists():
    lines = []
    for backend, size, kind, statements, requests in csv.reader(open(batches), delimiter="\t"):
        if int(statements):
            lines.append(f"{backend} {size} {kind}: {int(requests):,} in {int(statements):,} "
                         f"statements, {int(requests) / int(statements):.1f} per statement")
    if lines:
        print("\nRequests per statement (PostgreSQL groups; pgbench's ceilings run one per statement):\n")
        for line in lines:
            print(f"- {line}")

if lookup:
    print(f"\nSQLite's own balance lookup (bench/sqlite_lookup.py: random users by the service's key, "
          f"one statement, SQLite {lookup_version} through Python, median of its rounds):\n")
    for size, micros in lookup.items():
        print(f"- sqlite {size}: {micros:.2f} µs per lookup")

# PostgreSQL completions' writes: how many updates stayed in their page
# (heap-only, no index touched) and the WAL the completion rounds wrote per
# completion (service and pgbench together).
writes = out / "pg-writes.tsv"
event_completions = defaultdict(int)
for r in rows:
    if r["backend"] == "postgres" and r["target"].startswith("complete-"):
        event_completions[r["size"]] += r["ok"]
if writes.exists():
    rows = {}
    for size, table, updates, hot, wal in csv.reader(open(writes), delimiter="\t"):
        rows.setdefault(size, {})[table] = (int(updates), int(hot), int(float(wal)))
    if rows:
        print("\nPostgreSQL completion writes (counts, not speeds):\n")
        for size, tables in rows.items():
            parts = [f"{t} {h / u * 100:.1f} % of {u:,} updates in-page (HOT)"
                     for t, (u, h, _) in sorted(tables.items()) if u]
            orders = tables.get("payment_orders")
            # The WAL is that of the complete and pgbench-complete rounds;
            # the event rounds' completions are left out of the count.
            completions = orders[0] - event_completions[size] if orders else 0
            if completions > 0:
                parts.append(f"WAL {orders[2] / completions:,.0f} bytes per completion")
            print(f"- postgres {size}: " + "; ".join(parts))
checkpoints = out / "pg-checkpoints.tsv"
if checkpoints.exists():
    lines = []
    for size, wal, due, ended in csv.reader(open(checkpoints), delimiter="\t"):
        started = int(wal) >= int(due) or ended == "t"
        lines.append(f"- postgres {size}: {int(wal) / 2**20:,.0f} MiB of WAL since the checkpoint "
                     f"before its completion rounds; the server starts the next at "
                     f"{int(due) / 2**20:,.0f} MiB: "
                     + ("a checkpoint started inside the rounds (their WAL per completion "
                        "includes the whole pages written after it)" if started
                        else "none inside the rounds"))
    if lines:
        print("\nCheckpoints during PostgreSQL completions (bench/run checkpoints before each size's):\n")
        print("\n".join(lines))
