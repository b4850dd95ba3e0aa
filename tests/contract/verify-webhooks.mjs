// Verifies captured deliveries with the official `standardwebhooks` library
// for JavaScript. Usage: node verify-webhooks.mjs CASES.json (the cases are
// described in verify_webhooks.py). Prints each mismatch and `N passed, M failed`.
import { readFileSync } from "node:fs";
import { Webhook } from "standardwebhooks";

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
let passed = 0;
let failed = 0;
for (const c of cases) {
  // The raw bytes, as a receiver must verify them (never a re-serialized body).
  const body = Buffer.from(c.body_b64, "base64");
  let valid;
  try {
    new Webhook(c.secret).verify(body, c.headers);
    valid = true;
  } catch {
    valid = false;
  }
  if (valid === c.valid) {
    passed += 1;
  } else {
    failed += 1;
    console.log(`FAIL ${c.name}: verified=${valid}, expected ${c.valid}`);
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed || !passed ? 1 : 0);
