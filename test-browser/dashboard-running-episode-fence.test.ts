/**
 * docs/dashboard.md: "A row of that list, or of the running episodes, opens the episode (kept in
 * the address bar as `&episode=<uuid>&fence=<n>`)". A running row opened the episode without its
 * fence, so the view (and a link copied from the address bar) read the episode's latest claim,
 * which after an abort or a reap may be another client's.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser } from "./support/browser";

let ex: TestExchange;
let engine: TestEngine;
let fence: number;

beforeAll(async () => {
  ex = await startExchange();
  engine = await createEngine(ex, "running-fence");
  await engine.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
  await engine.as("trainer").registerEpisode({ episode_uuid: "ep-live" });
  const claim = await engine.as("client").claimEpisode({ client_uuid: "client-a", discard_episode_timeout: 600 });
  if (!claim.success) throw new Error(`claim failed: ${claim.fail_cause}`);
  fence = (await engine.as("viewer").runningEpisodes()).episodes[0]!.fence;
});

afterAll(async () => {
  await ex?.stop();
});

describe("a running episode opened from the running episodes", () => {
  it("is kept in the address bar with the fence of the claim clicked", async () => {
    const browser = await launchBrowser();
    try {
      const page = await browser.newPage();
      await page.goto(`${ex.url}/dashboard?refresh=0.3&engine=${engine.name}&token=${engine.tokens.viewer}`);
      await page.waitForSelector('#episodes-table tr[data-episode="ep-live"]');
      await page.click('#episodes-table tr[data-episode="ep-live"]');
      await page.waitForFunction(() => new URL(location.href).searchParams.get("episode") === "ep-live");
      const url = new URL(page.url());
      expect({ episode: url.searchParams.get("episode"), fence: url.searchParams.get("fence"), header: await page.textContent("#episode-id") }).toEqual({
        episode: "ep-live",
        fence: String(fence),
        header: `ep-live · fence ${fence}`,
      });
    } finally {
      await browser.close();
    }
  });
});
