/**
 * Reads what the dashboard shows back out of the page, through the ids and data attributes the
 * dashboard puts there for exactly this purpose, so tests compare numbers, not pixels.
 */
import type { Page } from "playwright-core";
import type { BufferStats } from "../../src/protocol/buffer";

export type ChartPointOnPage = { step: number; mean: number; std: number; count: number; min: number; max: number };

export const chartPoints = (page: Page): Promise<ChartPointOnPage[]> =>
  page.$$eval("#reward-chart circle.point", (els) =>
    els.map((e) => ({
      step: Number(e.getAttribute("data-step")),
      mean: Number(e.getAttribute("data-mean")),
      std: Number(e.getAttribute("data-std")),
      count: Number(e.getAttribute("data-count")),
      min: Number(e.getAttribute("data-min")),
      max: Number(e.getAttribute("data-max")),
    })),
  );

/** The numbers in a stacked bar's legend, by segment key (e.g. registered, claimed). */
export const legendCounts = (page: Page, barId: string): Promise<Record<string, number>> =>
  page.$$eval(`#${barId} li[data-count]`, (els) => Object.fromEntries(els.map((e) => [e.getAttribute("data-count") ?? "", Number(e.getAttribute("data-value"))])));

export const attr = async (page: Page, selector: string, name: string): Promise<string | null> =>
  (await page.locator(selector).getAttribute(name)) ?? null;

/** Waits until the page has finished `n` more refreshes than it had when called. */
export async function refreshesLater(page: Page, n = 1): Promise<void> {
  const now = Number(await attr(page, "#updated", "data-refreshes"));
  await page.waitForFunction((target) => Number(document.getElementById("updated")?.getAttribute("data-refreshes")) >= target, now + n);
}

/** `{<keyAttr>: parsed data-value}` of the elements matching `selector`; data-value holds JSON (numbers, strings, null). */
const jsonValues = (page: Page, selector: string, keyAttr: string): Promise<Record<string, unknown>> =>
  page.$$eval(
    selector,
    (els, key) => Object.fromEntries(els.map((e): [string, unknown] => [e.getAttribute(key) ?? "", JSON.parse(e.getAttribute("data-value") ?? "null")])),
    keyAttr,
  );

/** The buffer panel's group bar as /health's counts would fill it. */
export const groupsOf = (b: BufferStats): Record<string, number> => ({ pending: b.pending_groups, ready: b.ready_groups, delivered: b.delivered_groups, dropped: b.dropped_groups });

export type BufferOnPage = {
  groups: Record<string, number>;
  stats: Record<string, unknown>;
  config: Record<string, unknown>;
  /** The last pull's table: each row's group, lag, oldest version and seconds queued. */
  lastPull: { group: string | null; lag: unknown; oldest: unknown; queued: number }[];
};

/** The rollout buffer panel: groups by state, its row counts and its settings. */
export async function bufferOnPage(page: Page): Promise<BufferOnPage> {
  return {
    groups: await legendCounts(page, "buffer-groups"),
    stats: await jsonValues(page, "#buffer [data-stat]", "data-stat"),
    config: await jsonValues(page, "#buffer-config [data-config]", "data-config"),
    lastPull: await page.$$eval("#buffer-last-pull tr[data-group]", (rows) =>
      rows.map((r) => ({
        group: r.getAttribute("data-group"),
        lag: JSON.parse(r.getAttribute("data-lag") ?? "null") as unknown,
        oldest: JSON.parse(r.getAttribute("data-oldest") ?? "null") as unknown,
        queued: Number(r.getAttribute("data-queued")),
      })),
    ),
  };
}

export type RunsOnPage = {
  current: { run: string | null; status: string | null; active: string | null; environment: string | null };
  processes: { name: string | null; state: string | null }[];
  metricsStep: number | null;
  metrics: Record<string, unknown>;
  recent: { run: string | null; status: string | null }[];
};

/** The training runs panel: the detailed run, its processes and latest metrics, and the listed runs. */
export async function runsOnPage(page: Page): Promise<RunsOnPage> {
  const current = await page.$eval("#run-current", (e) => ({
    run: e.getAttribute("data-run"),
    status: e.getAttribute("data-status"),
    active: e.getAttribute("data-active"),
    environment: document.getElementById("run-environment")?.textContent ?? null,
  }));
  const processes = await page.$$eval("#run-processes tbody tr", (els) => els.map((e) => ({ name: e.getAttribute("data-process"), state: e.getAttribute("data-state") })));
  const step = await page.locator("#run-metrics").getAttribute("data-step");
  const metrics = await jsonValues(page, "#run-metrics [data-metric]", "data-metric");
  const recent = await page.$$eval("#runs-table tbody tr", (els) => els.map((e) => ({ run: e.getAttribute("data-run"), status: e.getAttribute("data-status") })));
  return { current, processes, metricsStep: step === null || step === "" ? null : Number(step), metrics, recent };
}

/** The trajectory panel's rows, in the fields of the API's TrajectorySummary they carry. */
export const trajectoryRows = (page: Page) =>
  page.$$eval("#trajectories-table tbody tr", (els) =>
    els.map((e) => {
      const n = (name: string) => Number(e.getAttribute(name));
      const reward = e.getAttribute("data-reward");
      return {
        episode_uuid: e.getAttribute("data-episode"),
        fence: n("data-fence"),
        task_id: e.getAttribute("data-task"),
        outcome: e.getAttribute("data-outcome"),
        reward: reward === "" || reward === null ? null : Number(reward),
        calls: n("data-calls"),
        prompt_tokens: n("data-prompt-tokens"),
        completion_tokens: n("data-completion-tokens"),
        ended_at: n("data-ended-at"),
      };
    }),
  );
