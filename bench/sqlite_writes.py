"""SQLite's own ceiling for the write endpoints, for bench/run's report.

On PostgreSQL pgbench runs the service's statements of one request with no
HTTP around them (bench/pgbench/*.sql); SQLite runs inside the server, so
there is no pgbench to ask, and this is its counterpart for the writes. It
runs one request's transaction of the SQLite store, statement for statement
(bench/sqlite/complete.sql or create.sql, generated from src/store/sqlite.rs
by tests/sqlite_scripts.rs), in a tight loop on one connection set up as the
store's write connection is, for SECONDS, on a file bench/run seeded, while
its server idles, and prints one JSON line in the form of wrk's RESULT line.

It binds what the store binds: a completion takes a distinct pending order of
BASE+1 .. BASE+POOL each time (scattered as complete.lua and pgbench's
complete.sql scatter theirs), credits the order's account and logs it; a
creation inserts an order of a random user of 1..USERS with an
Idempotency-Key of its own (the keys' "a000" tells them from create.lua's
"8000" and pgbench's "9000"). A statement this runner does not know (the
store's transaction changed) stops it with an error.

It runs in this process through Python's sqlite3 module, so it uses the
system's SQLite library, not the one bundled in the server. The WAL is
checkpointed as the store does it, on a thread beside the loop with a
connection of its own, with the figures the script names: every interval,
PASSIVE passes until one finds few frames added (or the most passes ran),
then, when the WAL held frames, a last pass with the loop's transactions held
back, so that the WAL starts over as the store's does. Without it the WAL
would grow for the whole round (hundreds of megabytes), and the server that
writes next would find it past its bound and truncate it, a stall of
hundreds of milliseconds that belongs to this runner, not to the server.

Usage: sqlite_writes.py SCRIPT DB-FILE SECONDS PROJECT USERS ROUND BASE POOL
"""

import datetime
import json
import pathlib
import random
import sqlite3
import sys
import threading
import time

PAYMENT_SYSTEM = "cstm:benchpay"


def load(path):
    """The script's set-up, its checkpoint figures ("interval ms", "passes",
    "held frames") and its named statements, in order."""
    setup, checkpoint, statements, name, lines = None, {}, [], None, []

    def close():
        nonlocal setup
        text = "\n".join(lines).strip()
        if name == "connection":
            setup = text
        elif name is not None:
            statements.append((name, text.rstrip(";")))

    for line in pathlib.Path(path).read_text().splitlines():
        if line.startswith("-- checkpoint "):
            key, value = line.removeprefix("-- checkpoint ").split(": ")
            checkpoint[key] = int(value)
        elif line == "-- connection" or line.startswith("-- statement: "):
            close()
            name, lines = line.removeprefix("-- statement: ").removeprefix("-- "), []
        elif name is not None:
            lines.append(line)
    close()
    return setup, checkpoint, statements


def checkpoints(uri, setup, checkpoint, turn, stop):
    """The store's checkpoints: every interval, PASSIVE passes until one
    finds at most "held frames" added (at most "passes" of them), then one
    with the writer's turn held when the WAL held frames."""
    conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    conn.executescript(setup)

    def passive():
        return conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]

    while not stop.wait(checkpoint["interval ms"] / 1000):
        frames = passive()
        for _ in range(1, checkpoint["passes"]):
            before, frames = frames, passive()
            if frames - before <= checkpoint["held frames"]:
                break
        if frames > 0:
            with turn:
                passive()
    conn.close()


def now():
    # As the store writes times: RFC 3339 with the offset.
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def main(script, db, seconds, project, users, round_, base, pool):
    setup, checkpoint, statements = load(script)
    # mode=rw: a wrong path fails instead of creating an empty file.
    uri = pathlib.Path(db).resolve().as_uri() + "?mode=rw"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, cached_statements=64)
    conn.executescript(setup)
    # The writer's turn, which the checkpoints' second pass holds.
    turn, stop = threading.Lock(), threading.Event()
    checkpointer = threading.Thread(target=checkpoints, args=(uri, setup, checkpoint, turn, stop))
    checkpointer.start()
    done, refused, k, latencies = 0, 0, 0, []

    def complete_order(state, sql):
        oid = base + (k * 1000003) % pool + 1
        state["at"] = now()
        row = conn.execute(sql, ("completed", state["at"], f"bench_{k}",
                                          f"Order:{oid:010d}", project, PAYMENT_SYSTEM,
                                          "pending")).fetchone()
        if row is None:
            return False
        state["order"] = row
        return True

    def credit_main(state, sql):
        order_ref, user_id, server_id, amount, _, _ = state["order"]
        state["after"] = conn.execute(sql, (user_id, server_id or 0, amount, state["at"],
                                                     project)).fetchone()[0]
        return True

    def log_credit(state, sql):
        order_ref, user_id, server_id, amount, _, _ = state["order"]
        after = state["after"]
        conn.execute(sql, ("order_credit", order_ref, user_id, server_id or 0, amount,
                                    after - amount, after, state["at"]))
        return True

    def insert_order(state, sql):
        g = k * 1000003 % 1_000_000_000_000
        row = conn.execute(sql, {
            "order_id": f"Order:a{round_:02d}{k:08d}", "project_id": project,
            "user_id": random.randint(1, users), "email": None, "server_id": 0,
            "payment_system": PAYMENT_SYSTEM, "amount_cents": 1025, "status": "pending",
            "created_at": now(), "idempotency_key": f"{g:012d}-0000-4000-a000-{round_:012d}",
            "request_hash": "0" * 64}).fetchone()
        return row is not None

    def subscribers(state, sql):
        conn.execute(sql, (project,)).fetchall()
        return True

    def plain(state, sql):
        conn.execute(sql)
        return True

    runners = {"begin": plain, "commit": plain, "complete_order": complete_order,
               "credit_main": credit_main, "log_credit": log_credit,
               "insert_order": insert_order, "subscribers": subscribers}
    unknown = [name for name, _ in statements if name not in runners]
    if unknown:
        sys.exit(f"sqlite_writes.py: {script} has statements this runner does not bind: {unknown}")
    start = time.perf_counter()
    end = start + seconds
    while True:
        began = time.perf_counter()
        if began >= end:
            break
        state = {}
        with turn:
            for name, sql in statements:
                if not runners[name](state, sql):
                    conn.execute("ROLLBACK")
                    refused += 1
                    break
            else:
                done += 1
        latencies.append(int((time.perf_counter() - began) * 1e6))
        k += 1
    span = time.perf_counter() - start
    stop.set()
    checkpointer.join()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    lat = sorted(latencies)
    n = len(lat)
    q = [lat[min(n - 1, max(0, -(-i * n // 1000) - 1))] for i in range(1, 1001)] if n else []
    print(json.dumps({
        "requests": n, "duration_us": int(span * 1e6), "rps": done / span if span > 0 else 0.0,
        "p50_us": q[499] if q else 0, "p99_us": q[989] if q else 0,
        "status_200": done, "status_409": refused, "status_other": 0, "q": q,
    }))


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) != 8:
        sys.exit(__doc__.split("Usage: ")[1])
    main(a[0], a[1], float(a[2]), int(a[3]), int(a[4]), int(a[5]), int(a[6]), int(a[7]))
