// Debian's /usr/bin/chromium, headless, as both browser checks start it:
// Playwright never downloads a browser here, and the flags keep Chromium
// from reaching for the network this machine does not have.

import { chromium } from "playwright-core";

export function launchChromium(timeout) {
  return chromium.launch({
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
}
