"""Outgoing events as an integrator receives them, verified by three receivers' code.

Run by .ci/contract against its live server (started with loopback allowed as a
webhook destination). A receiver under this script's control records each delivery's
headers and raw body bytes; events are made through the API and the command line; the
endpoint's secret is rotated twice (with an overlap, then without). Every captured
delivery then becomes verification cases, each run by the official `standardwebhooks`
libraries for Python and JavaScript and by a PHP `hash_hmac` verifier:
- each delivery verifies with the secrets that were signing it, and not with another;
- during an overlap the delivery carries two signatures, and both secrets verify it;
- after a rotation without overlap only the newest secret does;
- a body changed in one byte verifies with no secret.

Environment: MASTERPAY_BIN, MASTERPAY_DATABASE_URL, MASTERPAY_BASE_URL, MASTERPAY_TOKEN,
MASTERPAY_PROJECT_ID, MASTERPAY_USER_IDS, WEBHOOK_CASES (where to write the cases),
WEBHOOK_VERIFIERS_DIR (this directory, with node_modules installed).
Prints `N passed, M failed` over the verifiers' runs and exits non-zero on any failure.
"""

import base64
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

BIN = os.environ["MASTERPAY_BIN"]
DB = os.environ["MASTERPAY_DATABASE_URL"]
BASE = os.environ["MASTERPAY_BASE_URL"]
TOKEN = os.environ["MASTERPAY_TOKEN"]
PROJECT = os.environ["MASTERPAY_PROJECT_ID"]
USER = os.environ["MASTERPAY_USER_IDS"].split(",")[0]
CASES = os.environ["WEBHOOK_CASES"]
HERE = os.environ["WEBHOOK_VERIFIERS_DIR"]
WAIT_SECONDS = 60

received = []
received_lock = threading.Lock()


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {name: self.headers.get(name, "") for name in
                   ("webhook-id", "webhook-timestamp", "webhook-signature")}
        with received_lock:
            received.append((headers, body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def masterpay(*args):
    out = subprocess.run([BIN, "--database-url", DB, *args], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return json.loads(out) if "--json" in args else out


def api(path, body, key=None):
    request = urllib.request.Request(BASE + path, data=json.dumps(body).encode(), method="POST")
    request.add_header("Authorization", f"Bearer {TOKEN}")
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def deliveries_after(count, what):
    """Waits (bounded) until more than `count` deliveries arrived; returns them all."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        with received_lock:
            if len(received) > count:
                return list(received)
        time.sleep(0.05)
    sys.exit(f"no delivery of {what} within {WAIT_SECONDS} s ({count} so far)")


def event_type(body):
    return json.loads(body)["type"]


def flipped(body):
    changed = bytearray(body)
    changed[len(changed) // 2] ^= 0x01
    return bytes(changed)


def case(name, headers, body, secret, valid):
    return {"name": name, "headers": headers, "body_b64": base64.b64encode(body).decode(),
            "secret": secret, "valid": valid}


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/masterpay-events"

    endpoint = masterpay("webhook", "endpoint", "create", "--project", PROJECT, "--url", url,
                         "--description", "contract check receiver", "--json")
    first_secret = endpoint["secret"]
    endpoint_id = str(endpoint["id"])

    # One event of each type, signed by the first secret alone.
    completed = api("/v2/payment/order/create",
                    {"user_id": int(USER), "server_id": 0, "amount": "3.50",
                     "payment_system": "cstm:webhookcheck"}, key=str(uuid.uuid4()))
    api("/v2/payment/order/complete",
        {"order_id": completed["order_id"], "payment_system": "cstm:webhookcheck"})
    cancelled = api("/v2/payment/order/create",
                    {"user_id": int(USER), "server_id": 0, "amount": "1.00",
                     "payment_system": "cstm:webhookcheck"})
    api("/v2/payment/order/cancel",
        {"order_id": cancelled["order_id"], "payment_system": "cstm:webhookcheck"})
    masterpay("balance", "set", "--user", USER, "--bonus", "7.00")
    masterpay("webhook", "endpoint", "test", endpoint_id)
    want = {"order.created", "order.completed", "order.cancelled", "balance.set", "webhook.test"}
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        with received_lock:
            seen = {event_type(body) for _, body in received}
        if want <= seen:
            break
        if time.monotonic() > deadline:
            sys.exit(f"missing event types after {WAIT_SECONDS} s: {sorted(want - seen)}")
        time.sleep(0.05)
    with received_lock:
        plain = list(received)

    # A rotation with an overlap: both secrets sign.
    second_secret = masterpay("webhook", "endpoint", "rotate-secret", endpoint_id,
                              "--overlap", "1h", "--json")["secret"]
    masterpay("webhook", "endpoint", "test", endpoint_id)
    overlap = deliveries_after(len(plain), "a test during the overlap")[len(plain):]

    # A rotation without one: only the newest secret signs.
    third_secret = masterpay("webhook", "endpoint", "rotate-secret", endpoint_id,
                             "--overlap", "0s", "--json")["secret"]
    masterpay("webhook", "endpoint", "test", endpoint_id)
    seen_before = len(plain) + len(overlap)
    after = deliveries_after(seen_before, "a test after the rotation")[seen_before:]

    cases = []
    for i, (headers, body) in enumerate(plain):
        name = f"{event_type(body)} #{i}"
        cases.append(case(f"{name} with its secret", headers, body, first_secret, True))
        cases.append(case(f"{name} with another secret", headers, body, second_secret, False))
        cases.append(case(f"{name} changed in one byte", headers, flipped(body), first_secret,
                          False))
    for headers, body in overlap:
        if len(headers["webhook-signature"].split(" ")) != 2:
            sys.exit(f"a delivery during the overlap carries {headers['webhook-signature']!r}")
        cases.append(case("overlap, old secret", headers, body, first_secret, True))
        cases.append(case("overlap, new secret", headers, body, second_secret, True))
        cases.append(case("overlap, changed", headers, flipped(body), second_secret, False))
    for headers, body in after:
        cases.append(case("after rotation, newest secret", headers, body, third_secret, True))
        cases.append(case("after rotation, earlier secret", headers, body, second_secret, False))
        cases.append(case("after rotation, first secret", headers, body, first_secret, False))
    with open(CASES, "w") as out:
        json.dump(cases, out)
    print(f"{len(received)} deliveries captured, {len(cases)} cases")

    passed = failed = 0
    for name, command in [
        ("python standardwebhooks", [sys.executable, f"{HERE}/verify_webhooks.py", CASES]),
        ("javascript standardwebhooks", ["node", f"{HERE}/verify-webhooks.mjs", CASES]),
        ("php hash_hmac", ["php", f"{HERE}/verify-webhooks.php", CASES]),
    ]:
        run = subprocess.run(command, cwd=HERE, capture_output=True, text=True, timeout=120)
        print(f"{name}: {run.stdout.strip()} {run.stderr.strip()}".strip())
        if run.returncode == 0:
            passed += 1
        else:
            failed += 1
    os.remove(CASES)  # it holds the secrets
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
