/**
 * What the dashboard shows when it cannot show an engine's data, in a real Chromium: no token,
 * a refused token, an unknown engine (each a clear message and a sign-in form, never a blank
 * page), an engine with no data (empty states), a panel whose own read fails (only that panel
 * says so), and the sign-in form and admin token at work.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { ADMIN_TOKEN, createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser, watchErrors, type TestBrowser } from "./support/browser";
import { attr, bufferOnPage, groupsOf, refreshesLater } from "./support/page-data";
import { postRows, sessionRows } from "./support/scripted-buffer";

let ex: TestExchange;
let fresh: TestEngine;
let other: TestEngine;
let slime: TestEngine;
let atroposOnly: TestEngine;

/** A call to an engine's Atropos API, as Atropos's trainer and environments make them. */
async function atropos(e: TestEngine, role: "trainer" | "client", path: string, body: unknown): Promise<unknown> {
  const res = await fetch(`${ex.url}/e/${e.name}/atropos${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${e.tokens[role]}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  expect(res.status, path).toBe(200);
  return res.json();
}

beforeAll(async () => {
  ex = await startExchange();
  fresh = await createEngine(ex, "fresh");
  other = await createEngine(ex, "other");
  await other.as("trainer").updateEngineStatus({ engine_status: "ENGINE.BOOTING" });
  // A slime-style trainer pulls groups and never reports an engine status.
  slime = await createEngine(ex, "slime");
  await postRows(slime, [...sessionRows("g-0", 0, true), ...sessionRows("g-1", 0, false)]);
  // Nor does Atropos's trainer: its engine is fed through Atropos's API alone.
  atroposOnly = await createEngine(ex, "atropos-only");
  await atropos(atroposOnly, "trainer", "/register", { wandb_group: "g", wandb_project: "p", batch_size: 4, max_token_len: 2048, checkpoint_dir: "/ckpt", save_checkpoint_interval: 10, starting_step: 0, num_steps: 100 });
  const env = (await atropos(atroposOnly, "client", "/register-env", { max_token_length: 1024, desired_name: "gsm8k", weight: 1.0, group_size: 2, min_batch_allocation: null })) as { env_id: number };
  await atropos(atroposOnly, "client", "/scored_data", { tokens: [[1, 0], [1, 1]], masks: [[-100, 1], [-100, 1]], scores: [1, 0], env_id: env.env_id });
});

afterAll(async () => {
  await ex?.stop();
});

/** Each case gets its own browser profile: no token saved by an earlier case can help it. */
async function openDashboard(query: string): Promise<{ page: Page; browser: TestBrowser; errors: string[] }> {
  const browser = await launchBrowser();
  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.goto(`${ex.url}/dashboard?refresh=0.3&${query}`);
  await page.waitForFunction(() => Number(document.getElementById("updated")?.getAttribute("data-refreshes")) >= 1);
  return { page, browser, errors };
}

describe("dashboard without usable data", () => {
  it("asks for a token when it has none", async () => {
    const { page, browser, errors } = await openDashboard("engine=fresh");
    try {
      expect(await page.isVisible("#login")).toBe(true);
      expect(await page.textContent("#login-why")).toContain("Paste a token of engine 'fresh'");
      expect(await page.inputValue("#login-engine")).toBe("fresh");
      expect(await page.isHidden("#engine-view")).toBe(true);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  });

  it("says so when the token is refused, and accepts a good one from the form", async () => {
    const { page, browser } = await openDashboard("engine=fresh&token=rx_viewer_not-a-real-token");
    try {
      expect(await attr(page, "#notice", "data-kind")).toBe("error");
      const text = await page.textContent("#notice");
      expect(text).toContain("Engine 'fresh' did not accept this token");
      expect(text).toContain("401");
      expect(await page.isVisible("#login")).toBe(true);
      expect(await page.isHidden("#engine-view")).toBe(true);

      await page.fill("#login-token", fresh.tokens.viewer);
      await page.click("#login button[type=submit]");
      await page.waitForSelector("#engine-view:not([hidden])");
      expect(await page.isHidden("#notice")).toBe(true);
      expect(await page.isHidden("#login")).toBe(true);
    } finally {
      await browser.close();
    }
  });

  it("names an engine that does not exist", async () => {
    const { page, browser } = await openDashboard(`engine=no-such-engine&token=${ADMIN_TOKEN}`);
    try {
      expect(await page.textContent("#notice")).toContain("No engine named 'no-such-engine'");
      expect(await page.isHidden("#engine-view")).toBe(true);
    } finally {
      await browser.close();
    }
  });

  it("shows empty states for an engine with no data", async () => {
    const { page, browser, errors } = await openDashboard(`engine=fresh&token=${fresh.tokens.viewer}`);
    try {
      await page.waitForSelector("#engine-view:not([hidden])");
      expect(await attr(page, "#engine-status", "data-status")).toBe("ENGINE.OFFLINE");
      expect(await page.isVisible("#quiet-hint")).toBe(true);
      expect(await page.textContent("#reward-empty")).toContain("No reward history yet");
      expect(await page.textContent("#episodes-empty")).toContain("No episode is running");
      expect(await page.isVisible("#tasks-empty")).toBe(true);
      expect(await page.locator("#reward-chart").count()).toBe(0);
      expect(await page.textContent("#buffer-empty")).toContain("Rollout buffer not in use");
      // Unused, the buffer still shows the settings a first group would meet.
      expect((await bufferOnPage(page)).config).toEqual((await fresh.as("viewer").health()).buffer.config);
      expect(await page.locator("#buffer-groups").count()).toBe(0);
      expect(await page.textContent("#runs-empty")).toContain("No training runs");
      expect(await page.locator("#run-current").count()).toBe(0);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  });

  it("does not call an offline engine quiet while its rollout buffer is in use", async () => {
    const { page, browser, errors } = await openDashboard(`engine=slime&token=${slime.tokens.viewer}`);
    try {
      await page.waitForSelector("#buffer-groups");
      expect(await attr(page, "#engine-status", "data-status")).toBe("ENGINE.OFFLINE");
      expect(await page.isHidden("#quiet-hint")).toBe(true);
      const { buffer } = await slime.as("viewer").health();
      expect((await bufferOnPage(page)).groups).toEqual(groupsOf(buffer));
      expect(buffer).toMatchObject({ pending_groups: 1, ready_groups: 1, pending_steps: 2 });
      expect(await page.isVisible("#runs-empty")).toBe(true);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  });

  it("does not call an offline engine quiet while Atropos's API holds its groups", async () => {
    const { page, browser, errors } = await openDashboard(`engine=atropos-only&token=${atroposOnly.tokens.viewer}`);
    try {
      await page.waitForSelector("#atropos-queued");
      expect(await attr(page, "#engine-status", "data-status")).toBe("ENGINE.OFFLINE");
      expect(Number(await attr(page, "#atropos-queued", "data-value"))).toBe(1);
      expect(await attr(page, "#engine-view", "data-quiet")).toBe("false");
      expect(await page.isHidden("#quiet-hint")).toBe(true);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  });

  it("confines a panel's failed read to that panel, and recovers on a later refresh", async () => {
    const { page, browser, errors } = await openDashboard(`engine=fresh&token=${fresh.tokens.viewer}`);
    try {
      await page.waitForSelector("#runs-empty");
      // As if the token lost the right to read runs, and the buffer's read hit a server error.
      await page.route(/\/e\/fresh\/runs(\?|\/|$)/, (r) =>
        r.fulfill({ status: 403, contentType: "application/json", body: JSON.stringify({ error: "forbidden", detail: "A viewer token may not call list_runs." }) }),
      );
      await page.route(/\/e\/fresh\/health$/, (r) => r.fulfill({ status: 500, contentType: "application/json", body: JSON.stringify({ error: "internal", detail: "boom" }) }));
      await page.waitForSelector("#runs-forbidden");
      expect(await page.textContent("#runs-forbidden")).toContain("This token may not read training runs");
      expect(await page.textContent("#runs-forbidden")).toContain("403 forbidden");
      expect(await page.isVisible("#buffer-problem")).toBe(true);
      expect(await page.textContent("#buffer-problem")).toContain("500 internal: boom");
      // The buffer keeps its last picture; the rest of the page is untouched and says nothing is wrong with it.
      expect(await page.isVisible("#buffer-empty")).toBe(true);
      expect(await page.isVisible("#engine-view")).toBe(true);
      expect(await page.isHidden("#notice")).toBe(true);
      expect(await page.isHidden("#login")).toBe(true);
      expect(await attr(page, "#engine-status", "data-status")).toBe("ENGINE.OFFLINE");

      await page.unrouteAll();
      await page.waitForSelector("#runs-empty");
      await refreshesLater(page);
      expect(await page.isHidden("#buffer-problem")).toBe(true);
      expect(await page.locator("#runs-forbidden").count()).toBe(0);
      // The browser logs the refused fetches themselves; nothing else may go wrong.
      expect(errors.filter((e) => !e.includes("Failed to load resource"))).toEqual([]);
    } finally {
      await browser.close();
    }
  });

  it("lists every engine for the admin token and switches between them", async () => {
    const { page, browser, errors } = await openDashboard(`engine=fresh&token=${ADMIN_TOKEN}`);
    try {
      await page.waitForSelector("#engines [data-engine=other]");
      const tabs = await page.$$eval("#engines [data-engine]", (els) => els.map((e) => e.getAttribute("data-engine")));
      expect(tabs).toEqual(["atropos-only", "fresh", "other", "slime"]);
      await page.click("#engines [data-engine=other]");
      await page.waitForFunction(() => document.getElementById("engine-status")?.getAttribute("data-status") === "ENGINE.BOOTING");
      expect(page.url()).toContain("engine=other");
      expect(page.url()).not.toContain("token=");
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  });
});

// Last in the file: it adds 150 engines to the exchange, which the admin token's list above would show.
describe("the engine switcher with hundreds of engines", () => {
  const ENGINES = 150;
  const name = (i: number) => `exp-${String(i).padStart(3, "0")}-gsm8k-grpo`;
  /** Its delete has begun and not finished: the admin list says so (deleting_since) and it answers 404. */
  const DELETING = name(7);

  beforeAll(async () => {
    const names = Array.from({ length: ENGINES }, (_, i) => name(i));
    for (let i = 0; i < names.length; i += 20) await Promise.all(names.slice(i, i + 20).map((n) => ex.admin.createEngine(n)));
  }, 180_000);

  // What a user saw (a lab with one engine per experiment, the dashboard opened with the admin
  // token): the switcher drew one tab per engine of the deployment, all of them, wrapping over
  // the top of the page: with 150 engines the engine's own overview (status, rewards, episodes)
  // started 1417 px down a 900 px window, on every page load and every engine switch; there was
  // no search, no scrolling list, no limit. It also listed engines being deleted, and engines
  // whose saved tokens belonged to deleted engines.
  it("keeps the switcher on one line and finds an engine by part of its name", async () => {
    const browser = await launchBrowser();
    try {
      const page = await browser.newPage();
      const errors = watchErrors(page);
      // A delete under way, as the admin list reports it (making one stay half-done needs more data than a test has).
      await page.route(/\/admin\/engines$/, async (route) => {
        const res = await route.fetch();
        const body = (await res.json()) as { engines: Array<{ name: string; deleting_since: number | null }> };
        for (const e of body.engines) if (e.name === DELETING) e.deleting_since = Date.now() / 1000 - 60;
        await route.fulfill({ response: res, json: body });
      });
      // This browser also kept a token of an engine deleted since.
      await page.addInitScript(() => {
        const key = "rollout-exchange.dashboard.v1";
        if (localStorage.getItem(key) === null) localStorage.setItem(key, JSON.stringify({ tokens: { "deleted-long-ago": "rx_viewer_gone" }, admin: null }));
      });
      await page.goto(`${ex.url}/dashboard?engine=${name(0)}&token=${ADMIN_TOKEN}&refresh=3600`);
      await page.waitForFunction(() => document.querySelector("#engines [data-engine]") !== null && !(document.getElementById("engine-view") as HTMLElement).hidden);

      // One line: the overview on the first screen; in the bar, the current engine's tab and the search box.
      const top = await page.evaluate(() => (document.getElementById("overview") as HTMLElement).getBoundingClientRect().top);
      const viewport = page.viewportSize()!.height;
      expect(top, `the overview starts ${Math.round(top)} px down a ${viewport} px window`).toBeLessThan(viewport / 3);
      const bar = await page.evaluate(() => (document.getElementById("engines") as HTMLElement).getBoundingClientRect().height);
      expect(bar).toBeLessThan(40);
      expect(await page.$$eval("#engines .engine-tab[data-engine]", (els) => els.map((e) => e.getAttribute("data-engine")))).toEqual([name(0)]);
      expect(await page.isVisible("#engine-search")).toBe(true);

      // The list: every engine but the one being deleted and the one only a stale token knew.
      const search = page.getByRole("combobox", { name: "Find an engine" });
      await search.focus();
      const listed = () => page.$$eval("#engine-options [role=option]", (els) => els.map((e) => e.getAttribute("data-engine")));
      const live = [fresh, other, slime, atroposOnly].map((e) => e.name);
      for (let i = 0; i < ENGINES; i++) if (name(i) !== DELETING) live.push(name(i));
      live.sort();
      const all = await listed();
      expect(all).toEqual(live);
      expect(all).not.toContain(DELETING);
      expect(all).not.toContain("deleted-long-ago");
      expect(await page.textContent("#engine-count")).toBe(`${live.length} engines`);

      // Words typed in any order narrow it; Enter opens the first match.
      await search.pressSequentially("grpo exp-04");
      expect(await listed()).toEqual(Array.from({ length: 10 }, (_, i) => name(40 + i)));
      expect(await page.textContent("#engine-count")).toBe(`10 of ${live.length} engines`);
      await search.fill("042");
      expect(await listed()).toEqual([name(42)]);
      await search.press("Enter");
      await page.waitForFunction((n) => document.getElementById("engine-name")?.textContent === n && document.querySelector("#engine-tabs .current")?.getAttribute("data-engine") === n, name(42));
      expect(page.url()).toContain(`engine=${name(42)}`);
      expect(await page.isVisible("#engine-popup")).toBe(false);
      expect(await search.inputValue()).toBe("");

      // The arrow keys pick among the matches; the deleting engine is not one of them.
      await search.focus();
      await search.fill("exp-00");
      expect(await listed()).toEqual([0, 1, 2, 3, 4, 5, 6, 8, 9].map(name));
      await search.press("ArrowDown");
      await search.press("ArrowDown");
      expect(await search.getAttribute("aria-activedescendant")).toBe("engine-option-1");
      await search.press("Enter");
      await page.waitForFunction((n) => document.getElementById("engine-name")?.textContent === n, name(1));
      await page.waitForFunction(() => !(document.getElementById("engine-view") as HTMLElement).hidden);
      expect(errors).toEqual([]);
      // A refresh's route may still be reading the engine list when the browser closes: its
      // response is then disposed under it, an unhandled rejection that failed a whole CI run.
      await page.unrouteAll({ behavior: "ignoreErrors" });
    } finally {
      await browser.close();
    }
  });
});
