// The administration panel in a real headless Chromium (Debian's
// /usr/bin/chromium, driven by playwright-core), walked as an operator
// who never used the command line would:
//  1. sign in through a single-use login link (its page, then its button);
//  2. create a project, a user of it (an e-mail) and a token allowed one
//     endpoint (master-account/balance), all through the panel's forms;
//  3. read the token's value, shown once on the page after its creation,
//     and call the API with it (Node's fetch): the user's balance is
//     answered 200, a completion 403 ACCESS_DENIED; reload the token's page
//     and see the value gone;
//  4. disable the token in the panel: the API answers 403 TOKEN_DISABLED;
//  5. create an order for the user (the new-order form reached from the
//     user's page) and cancel it (the page shows it cancelled), find it by
//     its id; set a balance with a reason (the user's page shows it);
//     enable the token again and read that balance through the API;
//  6. reissue the token keeping the old value for an hour: both values
//     answer 200; end the grace: the old one 403 TOKEN_NOT_FOUND;
//     make a second token "like this one", with one more endpoint
//     (payment/order/read), and read the cancelled order with it;
//  7. run the audit from the ledger (its result shown); invite an
//     administrator, whose link signs them in once in another browser;
//  8. find each action in the admin audit log (by whom, from where, the
//     balance's reason), filter it to the token, export it as CSV; the
//     overview at the end shows today's orders and the last audit;
//  9. make a page more of the user's orders: the list filtered to the user
//     goes on with "older →" to the oldest, the filter kept; the export of
//     the user's pending orders has the header row and exactly those.
// Before that, it checks that the two listeners are apart: the API's does
// not answer the panel's paths (404), nor the panel's the API's.
// Every page visited is checked and screenshotted (full page) at 1280 and
// at 390 pixels wide, as panel-NN-name-WIDTH.png: it must be in standards
// mode and no wider than the window at either width. A console error, an uncaught script error,
// a Content-Security-Policy violation, a request to another host or an
// answer without the panel's CSP fails the walk.
//
// Run by .ci/contract with MASTERPAY_PANEL_URL (the admin listener),
// MASTERPAY_PANEL_LOGIN_URL (a fresh login link), MASTERPAY_BASE_URL (the
// API) and SCREENSHOT_DIR in the environment. With README_IMAGES_DIR set
// too (`README_IMAGES_DIR=$PWD/docs/images .ci/contract`), it also writes
// README's two pictures there, panel-tokens.png and panel-overview.png:
// 1280 pixels wide, as tall as the page.

import { launchChromium } from "./chromium.mjs";

const panel = required("MASTERPAY_PANEL_URL").replace(/\/$/, "");
const loginUrl = required("MASTERPAY_PANEL_LOGIN_URL");
const api = required("MASTERPAY_BASE_URL").replace(/\/$/, "");
const shots = required("SCREENSHOT_DIR");
const readmeImages = process.env.README_IMAGES_DIR;
const timeout = 20_000;
// Names unique to this walk, so that a rerun on the same database differs.
const tag = Math.random().toString(36).slice(2, 6);

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`panel: ${name} is not set; run this through .ci/contract`);
    process.exit(2);
  }
  return value;
}

function step(text) {
  console.log(`panel: ${text}`);
}

function fail(text) {
  throw new Error(text);
}

// ---------------------------------------------------------------- the API

async function callApi(method, path, token, body) {
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(`${api}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeout),
  });
  const text = await response.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // left null: the checks below say what was expected
  }
  return { status: response.status, body: json, text };
}

async function expectApi(what, call, status, code) {
  const answer = await call;
  if (answer.status !== status || (code !== undefined && answer.body?.code !== code)) {
    fail(`${what}: the API answered ${answer.status} ${answer.text}, not ${status} ${code ?? ""}`);
  }
  step(`${what}: ${answer.status} ${code ?? ""}`.trim());
  return answer.body;
}

// ---------------------------------------------------------------- the browser

const browser = await launchChromium(timeout);

const desk = { width: 1280, height: 800 };
const phone = { width: 390, height: 844 };
const context = await browser.newContext({ viewport: desk });
const page = await context.newPage();
page.setDefaultTimeout(timeout);

// Whatever goes wrong in the page itself: checked after every page.
const problems = [];
page.on("console", (message) => {
  if (message.type() === "error") problems.push(`console error: ${message.text()}`);
});
page.on("pageerror", (err) => problems.push(`script error: ${err}`));
// Chromium logs a CSP violation as a console error; the event says which.
await context.addInitScript(() => {
  document.addEventListener("securitypolicyviolation", (event) => {
    console.error(`CSP violation: ${event.violatedDirective} blocked ${event.blockedURI || "inline code"}`);
  });
});
// The panel is self-contained: nothing but its own origin is reached.
await page.route("**/*", (route) => {
  const url = new URL(route.request().url());
  if (url.origin === new URL(panel).origin || url.protocol === "data:") {
    return route.continue();
  }
  problems.push(`request to another host: ${url.href}`);
  return route.abort();
});
// Forms with data-confirm ask first: the operator says yes.
const confirmations = [];
page.on("dialog", async (dialog) => {
  confirmations.push(dialog.message());
  await dialog.accept();
});

function clean(where) {
  if (problems.length > 0) {
    fail(`${where}: ${problems.join("; ")}`);
  }
}

// The answer a page came with must be the panel's: 200, HTML, its CSP.
function checkAnswer(response, where) {
  if (!response) fail(`${where}: no answer`);
  if (response.status() !== 200) fail(`${where}: answered ${response.status()} at ${response.url()}`);
  const headers = response.headers();
  const csp = headers["content-security-policy"] ?? "";
  if (!csp.includes("default-src 'none'") || csp.includes("unsafe-inline")) {
    fail(`${where}: the page came without the panel's Content-Security-Policy: ${csp}`);
  }
  if (headers["cache-control"] !== "no-store") {
    fail(`${where}: Cache-Control is ${headers["cache-control"]}, not no-store`);
  }
}

// Checks the page as it is at a desk and on a phone, in standards mode and
// never wider than the window (a wide table scrolls inside its own box),
// and screenshots it at both widths.
let shotCount = 0;
async function shot(name) {
  shotCount += 1;
  const mode = await page.evaluate(() => document.compatMode);
  if (mode !== "CSS1Compat") fail(`${name}: rendered in quirks mode (${mode})`);
  for (const viewport of [desk, phone]) {
    await page.setViewportSize(viewport);
    const { scrollWidth, innerWidth } = await page.evaluate(() => ({
      scrollWidth: document.documentElement.scrollWidth,
      innerWidth: window.innerWidth,
    }));
    if (scrollWidth > innerWidth) {
      fail(`${name} at ${viewport.width}px: the page is ${scrollWidth}px wide, wider than the window`);
    }
    const file = `${shots}/panel-${String(shotCount).padStart(2, "0")}-${name}-${viewport.width}.png`;
    await page.screenshot({ path: file, fullPage: true });
    step(`  screenshot ${file.slice(shots.length + 1)}`);
  }
  await page.setViewportSize(desk);
  clean(name);
}

// README's picture of the page, when asked for: no taller than its content.
async function readmeImage(file) {
  if (!readmeImages) return;
  await page.setViewportSize({ width: desk.width, height: 200 });
  await page.screenshot({ path: `${readmeImages}/${file}`, fullPage: true });
  await page.setViewportSize(desk);
  step(`  README picture ${readmeImages}/${file}`);
}

// Opens a panel page by its path and screenshots it.
async function visit(path, name) {
  step(`open ${path}`);
  const response = await page.goto(`${panel}${path}`);
  checkAnswer(response, path);
  await page.locator("main h1").waitFor();
  await shot(name);
  return response;
}

// Fills a form's fields by name (checkboxes: true/false; selects: a value)
// and presses its button, waiting for the page that follows (after the
// POST's redirect); that page must be the panel's 200.
async function submit(form, fields, button, where) {
  const target = page.locator(form);
  if ((await target.count()) !== 1) fail(`${where}: ${(await target.count())} forms match ${form} on ${page.url()}`);
  for (const [name, value] of Object.entries(fields)) {
    const input = target.locator(`[name="${name}"]`);
    const kind = await input.first().evaluate((el) => (el.tagName === "SELECT" ? "select" : el.type));
    if (kind === "checkbox") {
      const box = typeof value === "string" ? target.locator(`[name="${name}"][value="${value}"]`) : input;
      await box.check();
    } else if (kind === "select") {
      await input.selectOption(String(value));
    } else {
      await input.fill(String(value));
    }
  }
  step(`${where}: ${Object.entries(fields).map(([k, v]) => `${k}=${v}`).join(", ") || "no field"}; press "${button}"`);
  const navigation = page.waitForNavigation();
  await target.getByRole("button", { name: button, exact: true }).click();
  const response = await navigation;
  checkAnswer(response, where);
  await page.locator("main h1").waitFor();
  return response;
}

// Follows a link of the page's main part by its text.
async function follow(text, name, path) {
  step(`follow "${text}"`);
  const navigation = page.waitForNavigation();
  await page.locator("main").getByRole("link", { name: text, exact: true }).first().click();
  checkAnswer(await navigation, text);
  if (path && !path.test(new URL(page.url()).pathname)) fail(`"${text}" led to ${page.url()}`);
  await page.locator("main h1").waitFor();
  await shot(name);
}

// A form with data-confirm asked once before it was sent.
function expectConfirmed(before, what) {
  if (confirmations.length !== before + 1) fail(`${what} asked ${confirmations.length - before} confirmations, not 1`);
  step(`  confirmed: "${confirmations.at(-1)}"`);
}

// The admin audit log's rows as shown: who, from, action, object, all text.
async function auditRows() {
  return page.locator("main table tbody tr").evaluateAll((trs) =>
    trs
      .filter((tr) => tr.cells.length >= 7)
      .map((tr) => {
        const cell = (i) => tr.cells[i].innerText.replace(/\s+/g, " ").trim();
        return { who: cell(1), from: cell(2), action: cell(3), object: cell(4), text: tr.innerText };
      }),
  );
}

async function mainText() {
  return (await page.locator("main").innerText()).replace(/\s+/g, " ");
}

async function expectText(text, where) {
  const shown = await mainText();
  if (!shown.includes(text)) fail(`${where}: the page does not show "${text}": ${shown.slice(0, 600)}`);
}

function idFrom(pattern, where) {
  const match = new URL(page.url()).pathname.match(pattern);
  if (!match) fail(`${where}: the browser is at ${page.url()}, not at ${pattern}`);
  return match[1];
}

let failed = false;
try {
  // ---------------------------------------------------------------- two listeners, kept apart
  for (const [url, what] of [
    [`${api}/sign-in`, "the API listener answering the panel's sign-in"],
    [`${api}/assets/panel.js`, "the API listener answering the panel's script"],
    [`${panel}/v2/master-account/balance?server_id=0&user_id=1`, "the panel answering API v2"],
    [`${panel}/docs/`, "the panel answering the API's documentation"],
  ]) {
    const answer = await fetch(url, { redirect: "manual", signal: AbortSignal.timeout(timeout) });
    if (answer.status !== 404) fail(`${what}: ${answer.status}, not 404`);
  }
  step("the API listener does not answer the panel's paths, nor the panel the API's: 404");

  // ---------------------------------------------------------------- sign-in
  step("open the login link");
  const linkPage = await page.goto(loginUrl);
  checkAnswer(linkPage, "the login link");
  await shot("sign-in-link");
  const signIn = page.locator('form[action="/sign-in/link"]');
  const label = (await signIn.getByRole("button").innerText()).trim();
  if (!/^Sign in as /.test(label)) fail(`the login link's page has no sign-in button: ${label}`);
  step(`press "${label}"`);
  const landed = page.waitForNavigation();
  await signIn.getByRole("button").click();
  checkAnswer(await landed, "sign-in");
  if (new URL(page.url()).pathname !== "/") fail(`signed in, the browser is at ${page.url()}, not /`);
  const who = (await page.locator("header .who").innerText()).trim();
  if (`Sign in as ${who}` !== label) fail(`"${label}" signed in ${who}`);
  step(`signed in as ${who}`);
  await shot("overview-first");

  // ---------------------------------------------------------------- a project
  await visit("/projects", "projects");
  const projectName = `Panel walk ${tag}`;
  await submit('form[action="/projects"][method="post"]', { name: projectName }, "Create project", "create a project");
  const projectId = idFrom(/^\/projects\/(\d+)$/, "the new project");
  await expectText(projectName, "the project's page");
  step(`project ${projectId} created`);
  await shot("project");

  // ---------------------------------------------------------------- a user
  await visit(`/projects/${projectId}/users`, "users");
  const email = `walk-${tag}@example.com`;
  await submit(`form[action="/projects/${projectId}/users"][method="post"]`, { email }, "Create user", "create a user");
  const userId = idFrom(/^\/users\/(\d+)$/, "the new user");
  await expectText(email, "the user's page");
  step(`user ${userId} created`);
  await shot("user");

  // ---------------------------------------------------------------- a token
  await visit(`/projects/${projectId}/tokens`, "tokens-empty");
  await visit(`/projects/${projectId}/tokens/new`, "token-new");
  const tokenName = "balance reader";
  const made = await submit(
    `form[action="/projects/${projectId}/tokens"]`,
    { name: tokenName, description: "made by the panel walk", permission: "master-account/balance" },
    "Create token",
    "create a token",
  );
  const tokenId = idFrom(/^\/tokens\/(\d+)$/, "the new token");
  if (made.headers()["cache-control"] !== "no-store") fail("the page showing the token's value may be cached");
  const value = (await page.locator("#token-value").innerText()).trim();
  if (!/^[A-Za-z0-9]{64}$/.test(value)) fail(`the page shows no token value: ${value}`);
  step(`token ${tokenId} created; its value is shown (${value.length} characters)`);
  await shot("token-value-once");

  // ---------------------------------------------------------------- the token against the API
  const balancePath = `/v2/master-account/balance?server_id=0&user_id=${userId}`;
  const balance = await expectApi("balance with the new token", callApi("GET", balancePath, value), 200);
  if (balance?.success !== true || typeof balance.main_balance !== "string") {
    fail(`unexpected balance body: ${JSON.stringify(balance)}`);
  }
  await expectApi(
    "completion with the new token",
    callApi("POST", "/v2/payment/order/complete", value, {
      payment_system: "cstm:paygate",
      order_id: "Order:walk0000000",
      payment_id: `walk-${tag}`,
    }),
    403,
    "ACCESS_DENIED",
  );

  step("reload the token's page");
  const again = await page.reload();
  checkAnswer(again, "the token's page reloaded");
  if ((await page.locator("#token-value").count()) !== 0 || (await page.content()).includes(value)) {
    fail("the token's value is shown again after a reload");
  }
  await expectText("cannot be shown again", "the token's page reloaded");
  step("the value is gone");
  await shot("token-value-gone");

  await visit(`/projects/${projectId}/tokens`, "tokens");
  await expectText(tokenName, "the tokens list");
  await expectText("master-account/balance", "the tokens list");

  // ---------------------------------------------------------------- disable the token
  await visit(`/tokens/${tokenId}`, "token");
  let asked = confirmations.length;
  await submit(`form[action="/tokens/${tokenId}/active"]`, {}, "Disable token", "disable the token");
  expectConfirmed(asked, "disabling the token");
  await page.locator("main .badge.off", { hasText: "disabled" }).first().waitFor();
  step("the token is shown disabled");
  await shot("token-disabled");
  await expectApi("balance with the disabled token", callApi("GET", balancePath, value), 403, "TOKEN_DISABLED");

  // ---------------------------------------------------------------- an order, made and cancelled
  await visit(`/users/${userId}`, "user-again");
  await follow("New order", "orders-new", /^\/orders$/);
  const orderForm = 'form[action="/orders"][method="post"]';
  const chosen = await page.locator(`${orderForm} select[name="project"]`).inputValue();
  const forUser = await page.locator(`${orderForm} input[name="user"]`).inputValue();
  if (chosen !== projectId || forUser !== userId) {
    fail(`the new-order form starts with project ${chosen} and user ${forUser}, not ${projectId} and ${userId}`);
  }
  await submit(orderForm, { amount: "12.34" }, "Create order", "create an order");
  const [, orderProject, orderId] = new URL(page.url()).pathname.match(/^\/orders\/(\d+)\/([^/]+)$/) ?? [];
  if (orderProject !== projectId || !/^Order:[A-Za-z0-9]{8,11}$/.test(decodeURIComponent(orderId ?? ""))) {
    fail(`after creating an order the browser is at ${page.url()}`);
  }
  const order = decodeURIComponent(orderId);
  await page.locator("main .badge", { hasText: "pending" }).first().waitFor();
  await expectText("12.34", "the order's page");
  step(`order ${order} created, pending`);
  await shot("order-pending");
  asked = confirmations.length;
  await submit('form[action$="/cancel"]', {}, "Cancel order", "cancel the order");
  expectConfirmed(asked, "cancelling the order");
  await page.locator("main .badge.off", { hasText: "cancelled" }).first().waitFor();
  if ((await page.locator('form[action$="/cancel"]').count()) !== 0) fail("a cancelled order still offers to cancel it");
  step("the order is shown cancelled");
  await shot("order-cancelled");
  await visit("/orders", "orders");
  await submit('form.filters[action="/orders"]', { order_id: order }, "Filter", "find the order by its id");
  await expectText("1 order matches.", "the orders found");
  await page.locator("main table a", { hasText: order }).first().waitFor();
  await shot("orders-found");

  // ---------------------------------------------------------------- a balance set with a reason
  await visit(`/users/${userId}`, "user-before-balance");
  const reason = `goodwill credit (panel walk ${tag})`;
  await submit(
    `form[action="/users/${userId}/balance"]`,
    { server: "0", main: "25.50", bonus: "3.00", reason },
    "Set balance",
    "set the user's balance",
  );
  if (new URL(page.url()).pathname !== `/users/${userId}`) fail(`after setting the balance the browser is at ${page.url()}`);
  const general = (await page.locator("main table tbody tr", { hasText: "General account" }).first().innerText())
    .replace(/\s+/g, " ");
  if (!general.includes("25.50") || !general.includes("3.00")) {
    fail(`the user's page shows the general account as "${general}", not 25.50 and 3.00`);
  }
  await expectText("balance set", "the user's history");
  step("the user's page shows main 25.50, bonus 3.00 and the change in the history");
  await shot("user-balance-set");

  // The token again: enabled in the panel, it reads the balance just set.
  await visit(`/tokens/${tokenId}`, "token-enable");
  await submit(`form[action="/tokens/${tokenId}/active"]`, {}, "Enable token", "enable the token");
  await page.locator("main .badge.ok", { hasText: "active" }).first().waitFor();
  const after = await expectApi("balance with the token enabled again", callApi("GET", balancePath, value), 200);
  if (after?.main_balance !== "25.50" || after?.bonus_balance !== "3.00") {
    fail(`the API reads ${JSON.stringify(after)} after the panel set 25.50 and 3.00`);
  }

  // ---------------------------------------------------------------- rotation with a grace period
  // A reissue keeping the old value for an hour: both values answer 200;
  // "End grace now" stops the old one (403 TOKEN_NOT_FOUND), not the new.
  asked = confirmations.length;
  await submit(`form[action="/tokens/${tokenId}/reissue"]`, { grace_hours: "1" }, "Reissue token", "reissue with 1 hour of grace");
  expectConfirmed(asked, "reissuing the token");
  const rotated = (await page.locator("#token-value").innerText()).trim();
  if (!/^[A-Za-z0-9]{64}$/.test(rotated) || rotated === value) fail("the reissue shows no new value");
  await shot("token-reissued-value-once");
  await expectApi("balance with the old value in its grace period", callApi("GET", balancePath, value), 200);
  await expectApi("balance with the new value", callApi("GET", balancePath, rotated), 200);
  await visit(`/tokens/${tokenId}`, "token-grace");
  await expectText("Old value in its grace period", "the token's page");
  await expectText(`…${value.slice(60)}`, "the token's page");
  await expectText(`…${rotated.slice(60)}`, "the token's page");
  asked = confirmations.length;
  await submit(`form[action="/tokens/${tokenId}/end-grace"]`, {}, "End grace now", "end the grace period");
  expectConfirmed(asked, "ending the grace period");
  await expectApi("balance with the old value after the grace", callApi("GET", balancePath, value), 403, "TOKEN_NOT_FOUND");
  await expectApi("balance with the new value after the grace", callApi("GET", balancePath, rotated), 200);
  await shot("token-grace-ended");

  // ---------------------------------------------------------------- a new token like this one
  await follow("New token like this one", "token-new-like", /^\/projects\/\d+\/tokens\/new$/);
  const likeForm = `form[action="/projects/${projectId}/tokens"]`;
  const kept = await page
    .locator(`${likeForm} input[name="permission"]:checked`)
    .evaluateAll((boxes) => boxes.map((box) => box.value));
  if (kept.join(" ") !== "master-account/balance") fail(`"like this one" starts with ${kept.join(" ")} checked`);
  const readerName = "order reader";
  await submit(likeForm, { name: readerName, permission: "payment/order/read" }, "Create token", "create a token like it");
  const readerId = idFrom(/^\/tokens\/(\d+)$/, "the second token");
  const reader = (await page.locator("#token-value").innerText()).trim();
  if (!/^[A-Za-z0-9]{64}$/.test(reader) || reader === value) fail("the second token's page shows no new value");
  step(`token ${readerId} created with the first one's endpoint and payment/order/read`);
  await shot("token-like-value-once");
  const read = await expectApi(
    "the cancelled order read with the second token",
    callApi("GET", `/v2/payment/order?order_id=${encodeURIComponent(order)}`, reader),
    200,
  );
  if (read?.status !== "cancelled" || read?.amount !== "12.34") {
    fail(`the API reads the order cancelled in the panel as ${JSON.stringify(read)}`);
  }

  // ---------------------------------------------------------------- the ledger and its audit
  await visit("/ledger", "ledger");
  if ((await page.locator(`main table a[href="/users/${userId}"]`).count()) === 0) {
    fail("the ledger does not list the balance set for the user");
  }
  await submit('form[action="/ledger/audit"]', {}, "Run audit", "run the audit");
  if (new URL(page.url()).pathname !== "/ledger/audit") fail(`after the audit the browser is at ${page.url()}`);
  await expectText("ledger consistent", "the audit's result");
  await expectText(`by ${who}`, "the audit's result");
  step("the audit's result is shown: ledger consistent");
  await shot("ledger-audit");

  // ---------------------------------------------------------------- an invitation
  // A new administrator invited from /admins: the link, shown once, signs
  // them in (in a browser of their own) once.
  await visit("/admins", "admins");
  const invitee = `walk-${tag}`;
  await submit('form[action="/admins"]', { name: invitee }, "Invite", "invite an administrator");
  const invitation = (await page.locator("#invite-link").innerText()).trim();
  if (!invitation.startsWith(`${panel}/sign-in/link/`)) fail(`the invitation shows no sign-in link: ${invitation}`);
  await shot("admins-invited");
  const guest = await browser.newContext({ viewport: desk });
  try {
    const guestPage = await guest.newPage();
    guestPage.setDefaultTimeout(timeout);
    checkAnswer(await guestPage.goto(invitation), "the invitation's link");
    const landing = guestPage.waitForNavigation();
    await guestPage.locator('form[action="/sign-in/link"]').getByRole("button").click();
    checkAnswer(await landing, "the invitation's sign-in");
    const guestName = (await guestPage.locator("header .who").innerText()).trim();
    if (guestName !== invitee) fail(`the invitation signed in ${guestName}, not ${invitee}`);
    const reused = await guestPage.goto(invitation);
    if (reused.status() !== 410) fail(`the invitation's link answered ${reused.status()} a second time, not 410`);
  } finally {
    await guest.close();
  }
  step(`${invitee} invited and signed in once by the link`);

  // ---------------------------------------------------------------- the admin audit log
  await visit("/audit-log", "audit-log");
  const expected = [
    ["project.create", `project ${projectId}`],
    ["user.create", `user ${userId}`],
    ["token.create", `token ${tokenId}`],
    ["token.disable", `token ${tokenId}`],
    ["order.create", `order ${order}`],
    ["order.cancel", `order ${order}`],
    ["balance.set", `balance ${userId}:0`],
    ["token.enable", `token ${tokenId}`],
    ["audit.run", "audit ledger"],
  ];
  const rows = await auditRows();
  for (const [action, object] of expected) {
    const row = rows.find((r) => r.action === action && r.object === object);
    if (!row) fail(`the audit log has no ${action} of ${object}: ${JSON.stringify(rows.slice(0, 12))}`);
    if (row.who !== who || row.from !== "127.0.0.1") {
      fail(`the audit log's ${action} of ${object} is by ${row.who} from ${row.from}, not ${who} from 127.0.0.1`);
    }
    step(`audit log: ${action} of ${object} by ${row.who} from ${row.from}`);
  }
  const reasonRow = rows.find((r) => r.action === "balance.set" && r.object === `balance ${userId}:0`);
  if (!reasonRow.text.includes(reason)) fail(`the audit log's balance.set does not show the reason: ${reasonRow.text}`);
  const pageText = await page.content();
  if ([value, rotated].some((v) => pageText.includes(v))) fail("the audit log shows a token's value");
  await submit(
    'form.filters[action="/audit-log"]',
    { object_kind: "token", object_id: tokenId },
    "Filter",
    "filter the audit log to the token",
  );
  const tokenRows = await auditRows();
  const actions = tokenRows.map((r) => r.action).sort().join(" ");
  if (actions !== "token.create token.disable token.enable token.end_grace token.reissue") {
    fail(`filtered to token ${tokenId}, the audit log lists ${actions}`);
  }
  step(`filtered to the token: ${actions}`);
  await shot("audit-log-token");
  const csv = await page.request.get(`${panel}/audit-log.csv?object_kind=token&object_id=${tokenId}`);
  const csvText = await csv.text();
  if (csv.status() !== 200 || !(csv.headers()["content-type"] ?? "").startsWith("text/csv")) {
    fail(`the CSV export answered ${csv.status()} ${csv.headers()["content-type"]}`);
  }
  if (!csvText.includes("token.disable") || csvText.includes(value)) {
    fail(`the CSV export lacks the token's changes or holds its value: ${csvText.slice(0, 400)}`);
  }
  step(`CSV export: ${csvText.trim().split("\n").length - 1} rows`);

  // ---------------------------------------------------------------- the tokens, the overview at the end
  await visit(`/projects/${projectId}/tokens`, "tokens-all");
  for (const name of [tokenName, readerName]) await expectText(name, "the tokens list");
  await expectText("payment/order/read", "the tokens list");
  await readmeImage("panel-tokens.png");

  await visit("/", "overview");
  for (const heading of ["Orders created today", "Latest changes", "Last audit"]) {
    await expectText(heading, "the overview");
  }
  const today = page.locator("main section", { has: page.locator("h2", { hasText: "Orders created today" }) });
  const counts = (await today.locator("tr", { hasText: projectName }).innerText()).replace(/\s+/g, " ");
  if (!/ 0 0 1$/.test(counts)) fail(`the overview counts today's orders of ${projectName} as "${counts}", not 0 pending, 0 completed, 1 cancelled`);
  const lastAudit = page.locator("main section", { has: page.locator("h2", { hasText: "Last audit" }) });
  await lastAudit.locator(".badge.ok", { hasText: "clean" }).waitFor();
  await readmeImage("panel-overview.png");
  await visit("/account", "account");
  step(`the overview shows today's orders (${counts.trim()}), the latest changes and the last audit, clean`);

  // ---------------------------------------------------------------- paging, and the CSV export of orders
  // More orders of the user than a page of the list holds (100), made by
  // the new-order form's POST from this browser: the list filtered to the
  // user shows the newest page, its "older →" the rest with the filter
  // kept; the export of a filter holds every order it keeps, and no other.
  const pageSize = 100;
  const ofUser = `/orders?project=${projectId}&user=${userId}`;
  await visit(ofUser, "orders-of-user");
  const csrf = await page.locator(`${orderForm} input[name="csrf"]`).inputValue();
  for (let i = 0; i < pageSize; i += 1) {
    const fields = { csrf, project: projectId, user: userId, server: "0", amount: "1.00", payment_system: "cstm:panel" };
    const made = await page.request.post(`${panel}/orders`, { form: fields, maxRedirects: 0 });
    if (made.status() !== 303) fail(`order ${i + 1} of ${pageSize} made for paging: answered ${made.status()}`);
  }
  step(`${pageSize} more orders made for user ${userId}`);
  const orderLinks = () =>
    page.locator("main table tbody tr td:first-child a").evaluateAll((links) => links.map((a) => a.innerText.trim()));
  await visit(ofUser, "orders-newest-page");
  await expectText(`${pageSize + 1} orders match.`, "the orders of the user");
  const newest = await orderLinks();
  if (newest.length !== pageSize || newest.includes(order)) {
    fail(`the newest page lists ${newest.length} orders${newest.includes(order) ? ", the oldest among them" : ""}`);
  }
  await follow("older →", "orders-older-page", /^\/orders$/);
  const query = new URL(page.url()).searchParams;
  if (query.get("project") !== projectId || query.get("user") !== userId || !query.get("before")) {
    fail(`"older →" led to ${page.url()}, which does not keep the filter`);
  }
  const older = await orderLinks();
  if (older.join(" ") !== order) fail(`the older page lists ${older.join(" ")}, not the first order, ${order}`);
  step(`the older page keeps the filter and lists the oldest order, ${order}`);

  await visit(`${ofUser}&status=pending`, "orders-pending-of-user");
  const exportLink = await page.locator("main a[download]", { hasText: "Export CSV" }).getAttribute("href");
  const exported = await page.request.get(`${panel}${exportLink}`);
  if (exported.status() !== 200 || !(exported.headers()["content-type"] ?? "").startsWith("text/csv")) {
    fail(`the orders' CSV export answered ${exported.status()} ${exported.headers()["content-type"]}`);
  }
  const [header, ...lines] = (await exported.text()).trim().split("\n");
  const columns = "order_id,project_id,user_id,server_id,amount,status,payment_system,payment_id,created_at,completed_at,cancelled_at";
  if (header !== columns) fail(`the orders' CSV export starts with ${header}`);
  const cells = lines.map((line) => line.split(","));
  const strays = cells.filter(([, project, user, , , status]) => project !== projectId || user !== userId || status !== "pending");
  if (cells.length !== pageSize || strays.length > 0) {
    fail(`the export of ${exportLink} has ${cells.length} rows, ${strays.length} of them not the filter's: ${strays.slice(0, 3).join(" | ")}`);
  }
  step(`CSV export of ${exportLink}: the header and ${cells.length} rows, each the user's, pending`);

  // ---------------------------------------------------------------- a webhook endpoint and its events
  // An endpoint made through the project's form shows its secret once; a
  // balance set then records a balance.set event for it, listed with its
  // delivery. The endpoint is disabled at the end, so that nothing else of
  // the walk is sent to it.
  const hooks = `/projects/${projectId}/webhooks`;
  await visit(hooks, "webhooks-empty");
  await submit(
    `form[action="${hooks}"]`,
    { url: "https://hooks.example.com/masterpay-events", description: `panel walk ${tag}`, event_type: "balance.set" },
    "Create endpoint",
    "create a webhook endpoint",
  );
  const secret = (await mainText()).match(/whsec_[A-Za-z0-9+/=]{40,}/)?.[0];
  if (!secret) fail("the endpoint's secret is not shown after its creation");
  await shot("webhook-created");
  const endpointId = idFrom(/^\/webhooks\/(\d+)$/, "the new endpoint's page");
  await visit(`/webhooks/${endpointId}`, "webhook");
  if ((await mainText()).includes(secret)) fail("the endpoint's page shows its secret again");
  step(`endpoint ${endpointId} made; its secret shown once`);
  await visit(`/users/${userId}`, "user-before-event");
  await submit(
    `form[action="/users/${userId}/balance"]`,
    { server: "0", main: "26.00", bonus: "3.00", reason: `event check (panel walk ${tag})` },
    "Set balance",
    "set the balance again, for an event",
  );
  await visit(`/projects/${projectId}/events`, "events");
  await follow("balance.set", "event", /^\/events\/\d+$/);
  await expectText("balance.set", "the event's page");
  if (!(await mainText()).includes('"after"')) fail("the event's page does not show its body");
  await visit(`/webhooks/${endpointId}`, "webhook-disable");
  asked = confirmations.length;
  await submit(`form[action="/webhooks/${endpointId}/active"]`, {}, "Disable endpoint", "disable the endpoint");
  expectConfirmed(asked, "disabling the endpoint");
  await page.locator("main .badge.off", { hasText: "disabled" }).first().waitFor();
  step("the balance.set event is listed and shown with its body; the endpoint disabled");
} catch (err) {
  failed = true;
  console.error(`panel: FAILED: ${err.message}`);
  const shown = await page.locator("body").innerText({ timeout: 2000 }).catch(() => "");
  console.error(`panel: the page at ${page.url()} shows: ${shown.replace(/\s+/g, " ").slice(0, 800)}`);
  await page.screenshot({ path: `${shots}/panel-failure.png`, fullPage: true }).catch(() => {});
} finally {
  await browser.close();
}
if (!failed) step(`walked ${shotCount} pages; screenshots in ${shots}`);
process.exit(failed ? 1 : 0);
