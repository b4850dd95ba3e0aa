"""Write latency and WAL size of a SQLite server under sustained writes.

The figures of docs/performance.md's WAL checkpoints (src/store/sqlite.rs):
what a write's tail looks like while the store's own thread checkpoints, and
how large the `-wal` file grows. It drives the release binary on a fresh
SQLite file: `masterpay migrate`, a project, a user and a token from the
command line, then `masterpay serve` on a free loopback port. TASKS client
threads (default 64; with 1, a write's latency is its own time, with no
queue before it) create ORDERS orders (default 20 000) through
POST /v2/payment/order/create, each with an Idempotency-Key, then complete
them all through POST /v2/payment/order/complete. For each phase it prints
the per-request latency (p50, p99, p99.9, max) and the largest `-wal` file
seen after a request.

A request's time here includes HTTP and this client's own (Python threads):
compare runs of one machine and one setting with each other, not with the
store's own figures or with bench/run's. Never part of `cargo test`.

Usage: python3 bench/sqlite_wal.py [--bin PATH] [--orders N] [--tasks N]
(--bin defaults to BENCH_BIN, else target/release/masterpay.)
"""

import argparse
import http.client
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAYMENT_SYSTEM = "cstm:benchpay"


def cli(binary, url, *args):
    """A command's one JSON object."""
    out = subprocess.run([binary, "--database-url", url, *args, "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port, server):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit("sqlite_wal.py: the server exited; see its log")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("sqlite_wal.py: the server did not answer /healthz")


def wal_size(db):
    try:
        return os.stat(f"{db}-wal").st_size
    except FileNotFoundError:
        return 0


def phase(name, port, token, db, tasks, requests):
    """Sends `requests` (path, body, headers, expected status) from `tasks`
    threads; returns each answer's body and prints the phase's figures."""
    lock = threading.Lock()
    state = {"next": 0, "largest": 0, "error": None}
    micros, answers = [], [None] * len(requests)

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine = []
        while True:
            with lock:
                n = state["next"]
                state["next"] += 1
            if n >= len(requests):
                break
            path, body, headers, expected = requests[n]
            headers = {"Authorization": f"Bearer {token}",
                       "Content-Type": "application/json", **headers}
            start = time.perf_counter()
            conn.request("POST", path, body=json.dumps(body), headers=headers)
            reply = conn.getresponse()
            data = reply.read()
            mine.append(int((time.perf_counter() - start) * 1e6))
            if reply.status != expected:
                with lock:
                    state["error"] = f"{path} answered {reply.status}: {data[:300]!r}"
                break
            answers[n] = json.loads(data)
            size = wal_size(db)
            with lock:
                state["largest"] = max(state["largest"], size)
        with lock:
            micros.extend(mine)

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(tasks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - started
    if state["error"]:
        sys.exit(f"sqlite_wal.py: {name}: {state['error']}")
    if len(micros) != len(requests):
        sys.exit(f"sqlite_wal.py: {name}: {len(micros)} of {len(requests)} requests answered")
    micros.sort()

    def at(q):
        return micros[min(int(len(micros) * q), len(micros) - 1)] / 1e3

    print(f"{name}: {len(micros)} writes in {seconds:.1f} s ({len(micros) / seconds:.0f}/s); "
          f"ms p50 {at(0.5):.2f} p99 {at(0.99):.2f} p99.9 {at(0.999):.2f} "
          f"max {micros[-1] / 1e3:.2f}; largest WAL {state['largest'] / (1 << 20):.1f} MiB",
          flush=True)
    return answers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default=os.environ.get(
        "BENCH_BIN", str(ROOT / "target" / "release" / "masterpay")))
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--tasks", type=int, default=64)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="masterpay-wal-") as tmp:
        db = pathlib.Path(tmp) / "bench.db"
        url = f"sqlite://{db}"
        subprocess.run([args.bin, "--database-url", url, "migrate"], check=True,
                       capture_output=True)
        project = cli(args.bin, url, "project", "create", "--name", "bench")["id"]
        user = cli(args.bin, url, "user", "create", "--project", str(project),
                   "--email", "user@bench.example")["id"]
        token = cli(args.bin, url, "token", "create", "--project", str(project),
                    "--name", "bench", "--allow",
                    "payment/order/create,payment/order/complete")["token"]
        port = free_port()
        log = open(pathlib.Path(tmp) / "server.log", "w")
        server = subprocess.Popen(
            [args.bin, "--database-url", url, "serve", "--listen", f"127.0.0.1:{port}",
             "--admin-listen", "off", "--metrics-listen", "off"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "MASTERPAY_LOG": "warn"})
        try:
            wait_healthy(port, server)
            creations = [("/v2/payment/order/create",
                          {"user_id": user, "server_id": 0, "amount": "10.25",
                           "payment_system": PAYMENT_SYSTEM},
                          {"Idempotency-Key": f"{n:012d}-0000-4000-8000-000000000000"}, 201)
                         for n in range(args.orders)]
            created = phase("insert", port, token, db, args.tasks, creations)
            completions = [("/v2/payment/order/complete",
                            {"payment_system": PAYMENT_SYSTEM, "order_id": order["order_id"]},
                            {}, 200)
                           for order in created]
            phase("complete", port, token, db, args.tasks, completions)
        finally:
            server.terminate()
            server.wait()
            log.close()


if __name__ == "__main__":
    main()
