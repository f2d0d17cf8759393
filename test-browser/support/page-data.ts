/**
 * Reads what the dashboard shows back out of the page, through the ids and data attributes the
 * dashboard puts there for exactly this purpose, so tests compare numbers, not pixels.
 */
import type { Page } from "playwright-core";

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
