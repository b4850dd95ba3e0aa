// Swagger UI at /docs/ in a real headless Chromium (Debian's /usr/bin/chromium,
// driven by playwright-core; Playwright never downloads a browser here):
// Authorize with the bearer token, then
//  1. expand the balance operation, Try it out, Execute with the document's
//     examples as they are (they name the demo's first user), and check that
//     the 200 body with main_balance is shown on the page;
//  2. walk an order's life as an integrator would: Try it out on
//     createPaymentOrder with a body for the demo's first user and a fresh
//     Idempotency-Key, Execute, read the order_id from the 201 body shown;
//     Execute once more and see the same order, answered with
//     idempotent-replayed: true; completePaymentOrder with that order_id
//     (200 shown); getPaymentOrder with it (200 shown, status completed).
//
// Run by .ci/contract with MASTERPAY_BASE_URL, MASTERPAY_TOKEN,
// MASTERPAY_USER_IDS and SCREENSHOT_DIR in the environment.

import { randomUUID } from "node:crypto";

import { launchChromium } from "./chromium.mjs";

const base = required("MASTERPAY_BASE_URL");
const token = required("MASTERPAY_TOKEN");
const userId = required("MASTERPAY_USER_IDS").split(",")[0];
const shots = required("SCREENSHOT_DIR");
const timeout = 20_000;

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`swagger-ui: ${name} is not set; run this through .ci/contract`);
    process.exit(2);
  }
  return value;
}

function step(text) {
  console.log(`swagger-ui: ${text}`);
}

// The operation's block, expanded, with Try it out on.
async function open(page, tag, operationId, label) {
  step(`expand ${label}`);
  const op = page.locator(`#operations-${tag}-${operationId}`);
  await op.locator(".opblock-summary").first().click();
  await op.locator(".opblock-body").waitFor();
  const tryOut = op.locator("button.try-out__btn");
  if ((await tryOut.textContent()).trim() === "Try it out") {
    step("Try it out");
    await tryOut.click();
  } else {
    step("Try it out is already on (tryItOutEnabled)");
  }
  return op;
}

// Presses Execute and waits for the call to `path`; checks the bearer token
// went with it and the API answered `status`. Returns the request, and the
// body and response headers as the page shows them, once the page shows
// `shows` (so that a previous answer on the page is not taken for this one).
async function execute(page, op, path, status, shows = "success") {
  step("Execute");
  const isCall = (r) => new URL(r.url()).pathname === path;
  const [request, response] = await Promise.all([
    page.waitForRequest(isCall),
    page.waitForResponse(isCall),
    op.locator("button.execute").click(),
  ]);
  if ((request.headers()["authorization"] ?? "") !== `Bearer ${token}`) {
    throw new Error(`the call to ${path} did not carry the bearer token entered in Authorize`);
  }
  if (response.status() !== status) {
    throw new Error(`${path} answered ${response.status()}, not ${status}: ${await response.text()}`);
  }
  // The page shows the answer it just got: the status, then the body.
  const live = op.locator(".live-responses-table");
  await live.locator(".response-col_status").filter({ hasText: String(status) }).first().waitFor();
  const description = live.locator("tr.response .response-col_description").first();
  await description.filter({ hasText: shows }).waitFor();
  const shown = description.locator("pre").first();
  const text = await shown.textContent();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`the page shows no JSON body for ${path}: ${text}`);
  }
  const headers = (await description.textContent()).toLowerCase();
  await live.scrollIntoViewIfNeeded();
  return { request, body, headers };
}

// Replaces the body Try it out started from (the document's example).
async function fillBody(op, body) {
  const editor = op.locator("textarea.body-param__text");
  await editor.fill(JSON.stringify(body, null, 2));
}

const browser = await launchChromium(timeout);

let failed = false;
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
try {
  page.setDefaultTimeout(timeout);

  // Swagger UI is vendored: the page must not reach anything but this server.
  const foreign = [];
  await page.route("**/*", (route) => {
    const url = new URL(route.request().url());
    if (url.origin === new URL(base).origin || url.protocol === "data:") {
      return route.continue();
    }
    foreign.push(url.href);
    return route.abort();
  });
  const pageErrors = [];
  page.on("pageerror", (err) => pageErrors.push(String(err)));

  step(`open ${base}/docs/`);
  await page.goto(`${base}/docs/`);
  await page.locator(".swagger-ui .info .title").filter({ hasText: "masterpay API" }).waitFor();

  step("Authorize with the bearer token");
  await page.locator(".scheme-container button.authorize").click();
  const dialog = page.locator(".modal-ux");
  await dialog.waitFor();
  await dialog.locator("input").first().fill(token);
  await dialog.locator(".auth-btn-wrapper button.authorize").click();
  await dialog.locator(".auth-btn-wrapper button.btn-done").click();
  await dialog.waitFor({ state: "detached" });
  await page.locator(".scheme-container button.authorize.locked").waitFor();

  const op = await open(page, "MasterAccount", "getMasterAccountBalance", "GET /v2/master-account/balance");

  // Try it out starts from the document's examples: server_id 0, and a
  // user_id and email that both name the first user of a new demo database,
  // so an integrator can press Execute as is. Only balance_type is cleared,
  // to see both balances.
  if (userId !== "1") {
    throw new Error(`the demo's first user is ${userId}, not the documented example 1`);
  }
  step("keep the examples (server_id 0, user_id 1, email alice1@example.com); clear balance_type");
  await op.locator('tr[data-param-name="balance_type"] select').selectOption({ label: "--" });

  step("Execute");
  const [request, response] = await Promise.all([
    page.waitForRequest((r) => r.url().includes("/v2/master-account/balance")),
    page.waitForResponse((r) => r.url().includes("/v2/master-account/balance")),
    op.locator("button.execute").click(),
  ]);
  const query = new URL(request.url()).searchParams;
  if (query.get("user_id") !== "1" || query.get("email") !== "alice1@example.com") {
    throw new Error(`Try it out did not start from the examples: ${request.url()}`);
  }
  const sent = request.headers()["authorization"] ?? "";
  if (sent !== `Bearer ${token}`) {
    throw new Error("the request did not carry the bearer token entered in Authorize");
  }
  if (response.status() !== 200) {
    throw new Error(`the API answered ${response.status()}: ${await response.text()}`);
  }

  const live = op.locator(".live-responses-table");
  await live.waitFor();
  await live.locator(".response-col_status").filter({ hasText: "200" }).first().waitFor();
  const shown = live.locator(".response-col_description pre").first();
  await shown.filter({ hasText: "main_balance" }).waitFor();
  const text = await shown.textContent();
  const body = JSON.parse(text);
  const decimal = /^[0-9]+\.[0-9]{2}$/;
  if (body.success !== true || !decimal.test(body.main_balance) || !decimal.test(body.bonus_balance)) {
    throw new Error(`unexpected body shown: ${text}`);
  }
  step(`the page shows 200 ${JSON.stringify(body)}`);

  await live.scrollIntoViewIfNeeded();
  await page.screenshot({ path: `${shots}/swagger-ui-balance.png` });

  // ---------------------------------------------------------------- an order's life
  const create = await open(page, "PaymentOrders", "createPaymentOrder", "POST /v2/payment/order/create");
  const key = `swagger-ui-${randomUUID()}`;
  const order = { user_id: Number(userId), server_id: 0, amount: "4.20", payment_system: "cstm:paygate" };
  step(`body ${JSON.stringify(order)}, Idempotency-Key ${key}`);
  await fillBody(create, order);
  await create.locator('tr[data-param-name="Idempotency-Key"] input').fill(key);
  const made = await execute(page, create, "/v2/payment/order/create", 201);
  if (made.request.headers()["idempotency-key"] !== key) {
    throw new Error("the create request did not carry the Idempotency-Key entered");
  }
  if (JSON.stringify(made.request.postDataJSON()) !== JSON.stringify(order)) {
    throw new Error(`the create request sent another body: ${made.request.postData()}`);
  }
  const orderId = made.body.order_id;
  if (
    made.body.success !== true ||
    !/^Order:[A-Za-z0-9]{8,11}$/.test(orderId ?? "") ||
    made.body.status !== "pending" ||
    made.body.user_id !== Number(userId) ||
    made.body.server_id !== 0 ||
    made.body.amount !== "4.20" ||
    made.body.payment_system !== "cstm:paygate"
  ) {
    throw new Error(`unexpected 201 body shown: ${JSON.stringify(made.body)}`);
  }
  if (made.headers.includes("idempotent-replayed")) {
    throw new Error("the first creation is shown as a replay");
  }
  step(`the page shows 201 with order_id ${orderId}`);
  await page.screenshot({ path: `${shots}/swagger-ui-create.png` });

  step("Execute again with the same key and body: a replay");
  const again = await execute(page, create, "/v2/payment/order/create", 201, /idempotent-replayed/i);
  if (again.body.order_id !== orderId || again.body.created_at !== made.body.created_at) {
    throw new Error(`the replay shows another order: ${JSON.stringify(again.body)}`);
  }
  if (!/idempotent-replayed: *true/.test(again.headers)) {
    throw new Error(`the replay's headers shown lack idempotent-replayed: true: ${again.headers}`);
  }
  step(`the page shows 201 with the same ${orderId} and idempotent-replayed: true`);

  const complete = await open(page, "PaymentOrders", "completePaymentOrder", "POST /v2/payment/order/complete");
  const webhook = { payment_system: "cstm:paygate", order_id: orderId, payment_id: "swagger-ui-1" };
  step(`body ${JSON.stringify(webhook)}`);
  await fillBody(complete, webhook);
  const done = await execute(page, complete, "/v2/payment/order/complete", 200);
  if (
    done.body.success !== true ||
    done.body.order_id !== orderId ||
    done.body.status !== "completed" ||
    done.body.amount !== "4.20" ||
    done.body.payment_id !== "swagger-ui-1"
  ) {
    throw new Error(`unexpected completion body shown: ${JSON.stringify(done.body)}`);
  }
  step(`the page shows 200 ${JSON.stringify(done.body)}`);
  await page.screenshot({ path: `${shots}/swagger-ui-complete.png` });

  const read = await open(page, "PaymentOrders", "getPaymentOrder", "GET /v2/payment/order");
  step(`order_id ${orderId}`);
  await read.locator('tr[data-param-name="order_id"] input').fill(orderId);
  const now = await execute(page, read, "/v2/payment/order", 200);
  if (new URL(now.request.url()).searchParams.get("order_id") !== orderId) {
    throw new Error(`the read asked for another order: ${now.request.url()}`);
  }
  if (
    now.body.success !== true ||
    now.body.order_id !== orderId ||
    now.body.status !== "completed" ||
    now.body.payment_id !== "swagger-ui-1" ||
    now.body.completed_at !== done.body.completed_at ||
    now.body.cancelled_at !== null
  ) {
    throw new Error(`unexpected order shown: ${JSON.stringify(now.body)}`);
  }
  step(`the page shows 200 ${JSON.stringify(now.body)}`);
  await page.screenshot({ path: `${shots}/swagger-ui-read.png` });

  await page.screenshot({ path: `${shots}/swagger-ui-full.png`, fullPage: true });
  step(`screenshots in ${shots}`);

  if (foreign.length > 0) {
    throw new Error(`the page tried to reach other hosts: ${foreign.join(", ")}`);
  }
  if (pageErrors.length > 0) {
    throw new Error(`JavaScript errors on the page: ${pageErrors.join("; ")}`);
  }
} catch (err) {
  failed = true;
  console.error(`swagger-ui: FAILED: ${err.message}`);
  await page.screenshot({ path: `${shots}/swagger-ui-failure.png`, fullPage: true }).catch(() => {});
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
