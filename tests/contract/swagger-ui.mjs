// Swagger UI at /docs/ in a real headless Chromium (Debian's /usr/bin/chromium,
// driven by playwright-core; Playwright never downloads a browser here):
// Authorize with the bearer token, expand the balance operation, Try it out,
// Execute with the document's examples as they are (they name the demo's
// first user), and check that the 200 body with main_balance is shown on
// the page.
//
// Run by .ci/contract with MASTERPAY_BASE_URL, MASTERPAY_TOKEN,
// MASTERPAY_USER_IDS and SCREENSHOT_DIR in the environment.

import { chromium } from "playwright-core";

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

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
  timeout,
});

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

  step("expand GET /v2/master-account/balance");
  const op = page.locator("#operations-MasterAccount-getMasterAccountBalance");
  await op.locator(".opblock-summary").first().click();
  await op.locator(".opblock-body").waitFor();

  const tryOut = op.locator("button.try-out__btn");
  if ((await tryOut.textContent()).trim() === "Try it out") {
    step("Try it out");
    await tryOut.click();
  } else {
    step("Try it out is already on (tryItOutEnabled)");
  }

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
