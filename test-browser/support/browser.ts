/**
 * A real headless Chromium (Debian's `chromium` package) driven by playwright-core. Playwright's
 * own browser downloads cannot reach their servers here, so the system binary is launched by
 * path, with a fresh profile per launch so no test sees another's localStorage.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";

export const CHROMIUM = process.env["CHROMIUM_PATH"] ?? "/usr/bin/chromium";

export type TestBrowser = {
  context: BrowserContext;
  newPage(): Promise<Page>;
  close(): Promise<void>;
};

export async function launchBrowser(): Promise<TestBrowser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`No Chromium at ${CHROMIUM}: install it with \`apt-get update && apt-get install -y chromium\` (or set CHROMIUM_PATH).`);
  }
  const profile = await mkdtemp(join(tmpdir(), "rx-chromium-"));
  let browser: Browser | undefined;
  try {
    // A persistent context is the way playwright takes a --user-data-dir of our choosing.
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1280, height: 900 },
      deviceScaleFactor: 1,
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
    });
    browser = context.browser() ?? undefined;
    return {
      context,
      newPage: () => context.newPage(),
      close: async () => {
        await context.close();
        await rm(profile, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await browser?.close().catch(() => {});
    await rm(profile, { recursive: true, force: true });
    throw err;
  }
}

/** Collects the page's console errors and uncaught exceptions, which every test expects to be none. */
export function watchErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(`console: ${m.text()}`);
  });
  return errors;
}
