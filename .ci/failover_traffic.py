#!/usr/bin/env python3
"""Traffic and assertions of .ci/failover (Python standard library only).

Two rounds against two masterpay instances on the kit's Patroni cluster
(deploy/postgres-ha/cluster): round 1 kills the leader (SIGKILL of its Patroni
and PostgreSQL) mid-traffic, then the killed node is started again and must
rejoin as the synchronous standby; round 2 is a planned switchover to it.

Each worker plays a game panel and its payment gateway, bound to one instance:
it creates an order (retrying every 5xx and 408 with the same Idempotency-Key
until a final answer), then completes it (retrying every 5xx and 408 until 200,
or 409 ORDER_ALREADY_COMPLETED after a retry, which docs/operations.md says
means done). Retries come every 0.2 s, faster than the back-off
docs/integrators.md advises, to probe the outage closely.

After each round: every acknowledged creation and completion is in the
database, no order was made twice or credited twice, balances equal the
credits, `masterpay audit` is clean, every answer was a JSON error or success
within the service's 2.5 s bound, and both instances served writes again by
themselves. An event endpoint of the project, a receiver of this script's own,
takes every event type: after the rounds every committed event has reached it at
least once (by its `webhook-id`), and every completed order has one
`order.completed` event. Prints the figures and `N passed, M failed`; exits 1 on
a failure.
"""

import argparse
import http.client
import http.server
import json
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from urllib.parse import urlsplit

PAYMENT_SYSTEM = "cstm:paygate"
# request_timeout_ms (docs/operations.md): every answer within 2.5 s.
ANSWER_BOUND_S = 2.5
# What this client adds to the server's bound: connecting, scheduling on a
# busy machine, Python. Answers above ANSWER_BOUND_S are printed either way.
CLIENT_ALLOWANCE_S = 0.25
RETRY_EVERY_S = 0.2
# A gateway gives up on one order after this long; reaching it is a failure.
CHAIN_DEADLINE_S = 120
WORKERS_PER_INSTANCE = 4
WARM_UP_WRITES = 20
# How long traffic goes on after both instances wrote again.
AFTER_RECOVERY_S = 3
RECOVERY_BOUND_S = 120
# An event whose send was cut by the outage is sent again when its lease
# (30 s here) runs out.
EVENTS_BOUND_S = 180


class Receiver(http.server.BaseHTTPRequestHandler):
    """The integrators' endpoint: keeps each delivery's webhook-id."""
    ids = Counter()
    lock = threading.Lock()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with Receiver.lock:
            Receiver.ids[self.headers.get("webhook-id", "")] += 1
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


class Results:
    """What every request got, and what was acknowledged."""

    def __init__(self):
        self.lock = threading.Lock()
        self.answers = []  # (round, instance, endpoint, sent_at, seconds, status, code)
        self.created = {}  # order_id -> (user_id, amount_cents)
        self.completed = set()  # order_ids acknowledged as completed
        self.replayed = 0  # creations retried and answered as a replay
        self.completed_by_retry = 0  # completions answered 409 ALREADY_COMPLETED on a retry
        self.failures = []  # what a worker saw that breaks the contract

    def answer(self, *row):
        with self.lock:
            self.answers.append(row)

    def fail(self, text):
        with self.lock:
            self.failures.append(text)


class Traffic:
    def __init__(self, instances, token, users, results):
        self.instances = instances
        self.token = token
        self.users = users
        self.results = results
        self.round = 0
        self.stop = threading.Event()
        self.threads = []

    def request(self, instance, method, path, body, headers):
        """One HTTP request on a connection of its own, as a webhook is sent.
        Returns (status, parsed JSON or None, seconds, error text or None,
        whether the answer says Idempotent-Replayed)."""
        host = urlsplit(instance)
        conn = http.client.HTTPConnection(host.hostname, host.port, timeout=10)
        start = time.monotonic()
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body), headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                **headers,
            })
            response = conn.getresponse()
            raw = response.read()
            seconds = time.monotonic() - start
            replayed = response.getheader("Idempotent-Replayed") == "true"
            try:
                return response.status, json.loads(raw), seconds, None, replayed
            except ValueError:
                return response.status, None, seconds, f"not JSON: {raw[:80]!r}", replayed
        except (OSError, http.client.HTTPException) as err:
            return None, None, time.monotonic() - start, f"{type(err).__name__}: {err}", False
        finally:
            conn.close()

    def call(self, instance, endpoint, body, headers, final):
        """Sends until an answer that `final` accepts; retries 5xx and 408.
        Returns (status, body, retried, replayed) or None when the chain
        gave up."""
        deadline = time.monotonic() + CHAIN_DEADLINE_S
        retried = False
        while True:
            sent_at = time.monotonic()
            status, answer, seconds, error, replayed = self.request(
                instance, "POST", f"/v2/payment/order/{endpoint}", body, headers)
            code = answer.get("code") if isinstance(answer, dict) else None
            self.results.answer(self.round, instance, endpoint, sent_at, seconds,
                                status, error or code)
            if error or (status and status >= 400 and not code):
                self.results.fail(f"{instance} {endpoint}: {status} {error or answer}")
            elif status in final:
                return status, answer, retried, replayed
            elif status != 408 and status < 500:
                self.results.fail(f"{instance} {endpoint}: final {status} {code}")
                return None
            if time.monotonic() > deadline:
                self.results.fail(f"{instance} {endpoint}: no final answer in {CHAIN_DEADLINE_S} s")
                return None
            retried = True
            time.sleep(RETRY_EVERY_S)

    def worker(self, instance, seed):
        rng = random.Random(seed)
        while not self.stop.is_set():
            user = rng.choice(self.users)
            cents = rng.randint(1, 99_999)
            create = {"user_id": user, "server_id": 0,
                      "amount": f"{cents // 100}.{cents % 100:02d}",
                      "payment_system": PAYMENT_SYSTEM}
            got = self.call(instance, "create", create,
                            {"Idempotency-Key": f"failover-{uuid.uuid4()}"}, {201})
            if got is None:
                continue
            order_id = got[1]["order_id"]
            if got[3]:
                with self.results.lock:
                    self.results.replayed += 1
            if got[1]["amount"] != create["amount"]:
                self.results.fail(f"{order_id}: created with amount {got[1]['amount']}, sent {create['amount']}")
            with self.results.lock:
                self.results.created[order_id] = (user, cents)
            complete = {"payment_system": PAYMENT_SYSTEM, "order_id": order_id,
                        "payment_id": f"pay-{order_id}"}
            got = self.call(instance, "complete", complete, {}, {200, 409})
            if got is None:
                continue
            status, answer, retried, _ = got
            if status == 409 and not (answer.get("code") == "ORDER_ALREADY_COMPLETED" and retried):
                # Only one chain completes each order: a 409 is only right when
                # an earlier attempt of this chain committed after all.
                self.results.fail(f"{order_id}: 409 {answer.get('code')} (retried: {retried})")
                continue
            with self.results.lock:
                self.results.completed.add(order_id)
                self.results.completed_by_retry += status == 409

    def start(self, round_number):
        self.round = round_number
        self.stop.clear()
        self.threads = []
        for i, instance in enumerate(self.instances):
            for w in range(WORKERS_PER_INSTANCE):
                t = threading.Thread(target=self.worker, args=(instance, round_number * 100 + i * 10 + w))
                t.start()
                self.threads.append(t)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, text):
        print(f"  {'ok  ' if ok else 'FAIL'} {text}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok


def cluster(args, *command):
    out = subprocess.run([args.cluster, *command, "--dir", args.cluster_dir],
                         check=True, stdout=subprocess.PIPE, text=True)
    return out.stdout.strip()


def psql(args, query):
    out = subprocess.run(["/usr/lib/postgresql/15/bin/psql", "-X", "-q", "-A", "-t", "-F", "|",
                          "-v", "ON_ERROR_STOP=1", args.database_url, "-c", query],
                         check=True, stdout=subprocess.PIPE, text=True)
    return [line.split("|") for line in out.stdout.splitlines() if line]


def writes_since(results, instance, since):
    with results.lock:
        return sum(1 for (_, inst, _, sent_at, _, status, _) in results.answers
                   if inst == instance and sent_at >= since and status in (200, 201))


def running(pid):
    """The process runs (it exists and is not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_until(condition, bound_s):
    deadline = time.monotonic() + bound_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def run_round(args, traffic, results, checks, number, title, event, killed):
    """`killed`: the event kills the leader (its figure is the time from the
    kill to the first successful write)."""
    print(f"round {number}: {title}", flush=True)
    traffic.start(number)
    began = time.monotonic()
    warm = wait_until(lambda: all(writes_since(results, i, began) >= WARM_UP_WRITES
                                  for i in traffic.instances), 60)
    checks.check(warm, f"both instances wrote {WARM_UP_WRITES} times before the event")
    # `event` returns what it did and when, on the time.monotonic() clock:
    # the kill, or the switchover's start.
    what, event_at = event()
    # From here the old primary is gone (killed, or demoted by the switchover).
    done_at = time.monotonic()
    recovered = wait_until(lambda: all(writes_since(results, i, done_at) > 0
                                       for i in traffic.instances), RECOVERY_BOUND_S)
    recovered_at = time.monotonic()
    time.sleep(AFTER_RECOVERY_S)  # traffic on the recovered cluster for a while
    traffic.finish()

    rows = [r for r in results.answers if r[0] == number]
    first_write = min((r[3] + r[4] for r in rows
                       if r[3] >= done_at and r[5] in (200, 201)), default=None)
    written = sorted(r[3] + r[4] for r in rows if r[5] in (200, 201))
    gap = max((b - a for a, b in zip(written, written[1:])), default=0)
    errors = Counter(f"{r[5] or 'no answer'} {r[6]}" for r in rows if r[5] is None or r[5] >= 500)
    slowest = max(r[4] for r in rows)
    over = [r for r in rows if r[4] > ANSWER_BOUND_S]
    print(f"  {what}", flush=True)
    print(f"  requests {len(rows)}; acknowledged (all rounds): creations {len(results.created)}, "
          f"of which replays of a retry {results.replayed}; completions {len(results.completed)}, "
          f"of which 409 ORDER_ALREADY_COMPLETED on a retry {results.completed_by_retry}")
    if first_write is not None:
        # After a switchover, writes go on until the old leader stops: only
        # the gap says how long they stopped.
        since = f"first successful write {first_write - event_at:.2f} s after the kill; " if killed else ""
        print(f"  {since}longest time without a successful write {gap:.2f} s")
    print(f"  5xx and failed answers: {sum(errors.values())}"
          + "".join(f"; {n} x {k}" for k, n in sorted(errors.items())))
    print(f"  max answer time {slowest:.3f} s; answers over {ANSWER_BOUND_S} s: {len(over)}")

    checks.check(recovered, f"both instances wrote again by themselves "
                 f"({recovered_at - event_at:.1f} s after the event, bound {RECOVERY_BOUND_S} s)")
    checks.check(not results.failures,
                 "every answer was JSON, success or a retryable error, and every chain ended"
                 + ("; " + "; ".join(results.failures[:10]) if results.failures else ""))
    results.failures.clear()
    checks.check(slowest <= ANSWER_BOUND_S + CLIENT_ALLOWANCE_S,
                 f"every answer within {ANSWER_BOUND_S} s (+{CLIENT_ALLOWANCE_S} s for this client): "
                 f"max {slowest:.3f} s")
    verify(args, results, checks)
    for instance in traffic.instances:
        status, _, _, error, _ = traffic.request(instance, "GET", "/readyz", None, {})
        checks.check(status == 200, f"{instance}/readyz answers 200 ({status or error})")
        pid = args.pids[instance]
        checks.check(running(pid), f"{instance} is the process started before round 1 (pid {pid})")


def verify(args, results, checks):
    """The database against what was acknowledged (all rounds so far)."""
    orders = {o: (int(u), int(c), s) for o, u, c, s in psql(
        args, f"select order_id, user_id, amount_cents, status from payment_orders "
              f"where project_id = {args.project}")}
    credits = {o: (int(n), int(c)) for o, n, c in psql(
        args, f"select o.order_id, count(l.id), coalesce(sum(l.amount_cents), 0) "
              f"from payment_orders o left join operation_log l "
              f"on l.order_ref = o.id and l.kind = 'order_credit' "
              f"where o.project_id = {args.project} group by o.order_id")}
    balances = {int(u): int(c) for u, c in psql(
        args, f"select user_id, main_cents from balances "
              f"where project_id = {args.project} and server_id = 0")}

    lost = [o for o in results.created if o not in orders]
    checks.check(not lost, f"every acknowledged creation ({len(results.created)}) is in the database"
                 + (f"; missing {lost[:5]}" if lost else ""))
    extra = [o for o in orders if o not in results.created]
    checks.check(not extra, f"no order made twice or without an answer ({len(orders)} in the database)"
                 + (f"; unexpected {extra[:5]}" if extra else ""))
    wrong = [o for o, (u, c) in results.created.items() if o in orders and orders[o][:2] != (u, c)]
    checks.check(not wrong, "every order has the user and amount it was created with"
                 + (f"; wrong {wrong[:5]}" if wrong else ""))
    not_done = [o for o in results.completed if orders.get(o, (0, 0, ""))[2] != "completed"]
    checks.check(not not_done, f"every acknowledged completion ({len(results.completed)}) is completed"
                 + (f"; not completed {not_done[:5]}" if not_done else ""))
    pending = [o for o in results.created if o not in results.completed]
    checks.check(not pending, "every created order was completed" + (f"; {pending[:5]}" if pending else ""))
    twice = [o for o, (n, c) in credits.items()
             if (n, c) != ((1, orders[o][1]) if orders[o][2] == "completed" else (0, 0))]
    checks.check(not twice, "every completed order credited exactly once, of its amount; no other credited"
                 + (f"; {twice[:5]}" if twice else ""))
    expected = Counter()
    for o in results.completed:
        expected[results.created[o][0]] += results.created[o][1]
    off = [u for u in set(expected) | set(balances) if balances.get(u, 0) != expected[u]]
    checks.check(not off, f"every balance equals the credits acknowledged ({sum(expected.values())} cents)"
                 + (f"; users {off}" if off else ""))
    events = psql(args, f"select webhook_id, event_type from webhook_events where project_id = {args.project}")
    completed_events = Counter(
        o for (o,) in psql(args, f"select order_id from webhook_events "
                                 f"where project_id = {args.project} and event_type = 'order.completed'"))
    once = [o for o, (_, _, status) in orders.items()
            if status == "completed" and completed_events[o] != 1]
    checks.check(not once, f"every completed order has one order.completed event ({len(events)} events in all)"
                 + (f"; {once[:5]}" if once else ""))
    began = time.monotonic()
    wait_until(lambda: all(Receiver.ids[i] for i, _ in events), EVENTS_BOUND_S)
    unsent = [i for i, _ in events if not Receiver.ids[i]]
    checks.check(not unsent, f"every committed event reached the endpoint at least once "
                 f"({sum(Receiver.ids.values())} deliveries of {len(events)} events; "
                 f"the last within {time.monotonic() - began:.1f} s of the check)"
                 + (f"; not received {unsent[:5]}" if unsent else ""))
    audit = subprocess.run([args.masterpay, "--database-url", args.database_url, "audit", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    checks.check(audit.returncode == 0, f"masterpay audit is clean: {audit.stdout.strip()[:300]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", required=True, help="deploy/postgres-ha/cluster")
    parser.add_argument("--cluster-dir", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--masterpay", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--project", type=int, required=True)
    parser.add_argument("--users", required=True, help="comma-separated user ids")
    parser.add_argument("--instance", action="append", required=True,
                        help="URL=PID: an instance's address and its process")
    args = parser.parse_args()
    with open(args.token_file) as f:
        token = f.read().strip()

    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    subprocess.run([args.masterpay, "--database-url", args.database_url, "webhook", "endpoint", "create",
                    "--project", str(args.project),
                    "--url", f"http://127.0.0.1:{receiver.server_address[1]}/events"],
                   check=True, stdout=subprocess.DEVNULL)

    results = Results()
    args.pids = dict(i.split("=") for i in args.instance)
    traffic = Traffic(list(args.pids), token, [int(u) for u in args.users.split(",")], results)
    checks = Checks()
    try:
        def kill():
            kill.node, killed_at = cluster(args, "kill-leader").split()
            at = time.monotonic() - (time.time() - float(killed_at))
            return f"SIGKILL of {kill.node}'s Patroni and PostgreSQL", at
        run_round(args, traffic, results, checks, 1, "the leader killed", kill, killed=True)

        began = time.monotonic()
        cluster(args, "start-node", kill.node)
        rejoined = subprocess.run([args.cluster, "wait-replica", kill.node, "--dir", args.cluster_dir]).returncode == 0
        with open(f"{args.cluster_dir}/log/patroni-{kill.node}.log") as f:
            rewound = "pg_rewind exit code=0" in f.read()
        checks.check(rejoined, f"{kill.node} rejoined as the synchronous standby in "
                     f"{time.monotonic() - began:.1f} s (pg_rewind ran: {'yes' if rewound else 'no'})")

        def switchover():
            at = time.monotonic()
            return f"switchover to {cluster(args, 'switchover')}", at
        if rejoined:
            run_round(args, traffic, results, checks, 2, "planned switchover", switchover, killed=False)
    finally:
        traffic.finish()
    print(f"failover: {checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
