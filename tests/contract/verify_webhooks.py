"""Verifies captured deliveries with the official `standardwebhooks` library for Python.

Usage: verify_webhooks.py CASES.json. Each case is one delivery as the receiver got it
(its three headers and the raw body, base64) with a secret and whether that secret must
verify it. Prints one line per mismatch and `N passed, M failed`.
"""

import base64
import json
import sys

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def main(path):
    passed = failed = 0
    for case in json.load(open(path)):
        body = base64.b64decode(case["body_b64"])
        try:
            Webhook(case["secret"]).verify(body, case["headers"], json_parse=False)
            valid = True
        except WebhookVerificationError:
            valid = False
        if valid == case["valid"]:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {case['name']}: verified={valid}, expected {case['valid']}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
