/**
 * GET /completed_tasks lists a task whose claims of the current step all failed with `episodes:
 * 0` and `failed: n`. The tasks panel counted it as a completed task ("0 episodes finished over 1
 * tasks") and drew its bar 0 / 0 wide (NaN, a console error every browser test holds to none).
 * It now says no task completed yet, and how many claims failed.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser, watchErrors } from "./support/browser";

let ex: TestExchange;
let engine: TestEngine;

beforeAll(async () => {
  ex = await startExchange();
  engine = await createEngine(ex, "all-failed");
  const trainer = engine.as("trainer");
  const client = engine.as("client");
  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
  await trainer.registerEpisode({ episode_uuid: "ep-aborted" });
  const claim = await client.claimEpisode({ client_uuid: "client-1", discard_episode_timeout: 600, throttle_policy: { current_task_id: "task-a" } });
  if (!claim.success) throw new Error(`claim failed: ${claim.fail_cause}`);
  await client.abortClaim(claim);
});

afterAll(async () => {
  await ex?.stop();
});

describe("the completed tasks panel when every claim of the step failed", () => {
  it("says no task completed, and draws no broken bar", async () => {
    const done = await engine.as("viewer").completedTasks();
    // The API lists the task with its failure and no episode.
    expect(done.tasks).toEqual([expect.objectContaining({ task_id: "task-a", episodes: 0, failed: 1 })]);

    const browser = await launchBrowser();
    try {
      const page = await browser.newPage();
      const errors = watchErrors(page);
      await page.goto(`${ex.url}/dashboard?refresh=0.3&engine=${engine.name}&token=${engine.tokens.viewer}`);
      await page.waitForSelector("#engine-view:not([hidden])");
      await page.waitForFunction(() => Number(document.getElementById("updated")?.getAttribute("data-refreshes")) >= 2);
      const panel = (await page.textContent("#tasks-panel")) ?? "";
      // No episode of the current step finished: the panel must not call a task completed.
      const widths = await page.$$eval("#tasks-panel rect", (els) => els.map((e) => e.getAttribute("width")));
      expect({ panel, widths, errors }).toEqual({ panel: expect.not.stringContaining("0 episodes finished over 1 tasks"), widths: expect.not.arrayContaining(["NaN"]), errors: [] });
    } finally {
      await browser.close();
    }
  });
});
