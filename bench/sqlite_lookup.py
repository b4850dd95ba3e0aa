"""SQLite's own cost of a balance lookup at each size, for bench/run's report.

On PostgreSQL the report sets the service's 10^6 / 10^3 beside pgbench's own,
which runs the endpoint's SQL with no HTTP around it: what the size costs the
database itself. SQLite runs inside the server, so there is no pgbench to ask;
this is its counterpart. It makes LOOKUPS lookups of random users'
general-account balances by the key the service uses (`balances` primary key
`(user_id, server_id)`, `server_id` 0), all in one statement, and subtracts
the same statement without the lookup (generating the random keys), so that
what is timed is mostly SQLite's B-tree search and page reads (the join's
loop and the column's decoding are the rest). The connection
is set up as the service's read connections are (the default 2 MB page
cache, `query_only`), on the files bench/run seeded, while their servers
idle; the sizes alternate, ROUNDS times, and each size's median is kept.

It runs in this process through Python's sqlite3 module, so it uses the
system's SQLite library, not the one bundled in the server; the report prints
the microseconds per lookup at each size with that library's version, to be
compared between the sizes, not with the server's own times.

Usage: sqlite_lookup.py OUT.tsv SIZE FILE ROWS [SIZE FILE ROWS ...]
Writes one line per size: size, microseconds per lookup, SQLite version.
"""

import pathlib
import sqlite3
import statistics
import sys
import time

LOOKUPS = 1_000_000
ROUNDS = 5

KEYS = """WITH RECURSIVE keys(i, user_id) AS (
    SELECT 1, abs(random()) % ?1 + 1
    UNION ALL SELECT i + 1, abs(random()) % ?1 + 1 FROM keys WHERE i < ?2)"""
LOOKUP = KEYS + """
SELECT sum(b.main_cents) FROM keys CROSS JOIN balances AS b
 WHERE b.user_id = keys.user_id AND b.server_id = 0"""
KEYS_ONLY = KEYS + "\nSELECT sum(user_id) FROM keys"


def seconds(conn, sql, rows):
    start = time.perf_counter()
    conn.execute(sql, (rows, LOOKUPS)).fetchone()
    return time.perf_counter() - start


def main(out, args):
    sizes = [(args[i], args[i + 1], int(args[i + 2])) for i in range(0, len(args), 3)]
    conns = {}
    for size, path, _ in sizes:
        # mode=rw: a wrong path fails instead of creating an empty file.
        conn = sqlite3.connect(pathlib.Path(path).resolve().as_uri() + "?mode=rw", uri=True)
        conn.execute("PRAGMA query_only = ON")
        conns[size] = conn
    per_lookup = {size: [] for size, _, _ in sizes}
    for _ in range(ROUNDS):
        for size, _, rows in sizes:
            conn = conns[size]
            lookup = seconds(conn, LOOKUP, rows)
            keys_only = seconds(conn, KEYS_ONLY, rows)
            per_lookup[size].append((lookup - keys_only) / LOOKUPS * 1e6)
    with open(out, "w") as f:
        for size, _, _ in sizes:
            f.write(f"{size}\t{statistics.median(per_lookup[size]):.3f}\t{sqlite3.sqlite_version}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
