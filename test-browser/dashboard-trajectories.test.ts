/**
 * The trajectory ledger on the dashboard, in a real Chromium against the real Worker (Miniflare,
 * D1 and R2): claims whose LLM calls the gateway recorded through the API, ended over two global
 * steps, one aborted and one still running. The page shows the engine's capture setting, lists
 * the trajectories as the API does (a page at a time), opens an episode from that list, from the
 * running episodes and through the reward chart's step, and renders its timeline and messages
 * (as text, never as markup), marking a rewritten history, drifted tokens and the call whose lost
 * tokens stop the training sequence. A client token, which may not read trajectories, gets a
 * notice in the panel and the rest of the page.
 */
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import type { CallRecord, TrajectorySummary } from "../src/protocol/ledger";
import { answer2, sys, threeTurns, user, type ClaimRef } from "../test/support/ledger-calls";
import { createEngine, startExchange, type TestEngine, type TestExchange } from "./support/exchange";
import { launchBrowser, watchErrors, type TestBrowser } from "./support/browser";
import { attr, refreshesLater, trajectoryRows } from "./support/page-data";
import { noisePngDataUrl } from "./support/png";
import { packFloats, packInts } from "../src/protocol/packed";
import { abort, callClock, claim, end, ledgerOf, record, settled } from "./support/scripted-ledger";

let ex: TestExchange;
let browser: TestBrowser;
let engine: TestEngine;
let page: Page;
let errors: string[];
/** Ended claims besides the named ones below: enough for a second page. */
const FILLERS = 20;
const MARKUP = "<img src=x onerror=\"document.title='owned'\"> is <b>not</b> markup";

const fields = (t: TrajectorySummary) => ({
  episode_uuid: t.episode_uuid,
  fence: t.fence,
  task_id: t.task_id,
  outcome: t.outcome,
  reward: t.reward,
  calls: t.calls,
  prompt_tokens: t.prompt_tokens,
  completion_tokens: t.completion_tokens,
  ended_at: t.ended_at,
});

beforeAll(async () => {
  ex = await startExchange();
  browser = await launchBrowser();
  engine = await createEngine(ex, "ledger-ui");
  await ledgerOf(ex, engine, "operator").configure({ capture: "tokens", retention_days: 14 });
  const trainer = engine.as("trainer");
  const call = callClock(Date.now() - 10 * 60_000);

  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
  const toolUse = await claim(engine, "ep-tool-use", "client-a", "calc");
  await record(ex, engine, threeTurns(toolUse, call));
  await end(engine, toolUse, "calc", 0.75);
  // The client trimmed its history before the second call: stored whole, marked rewritten.
  const trimmed = await claim(engine, "ep-trimmed", "client-b", "summarize");
  await record(ex, engine, [
    // A thinking model behind a prefix cache: its usage with details, the second call's without the reasoning's.
    call(trimmed, { usage: { prompt_tokens: 1200, completion_tokens: 300, cached_tokens: 0, reasoning_tokens: 250 }, body: { messages: [sys, user], answer: answer2 } }),
    call(trimmed, {
      usage: { prompt_tokens: 1500, completion_tokens: 40, cached_tokens: 1024 },
      body: { messages: [sys, { role: "user", content: "Summary so far: the answer was 4. Go on." }], answer: { role: "assistant", content: "Done." } },
    }),
  ]);
  await end(engine, trimmed, "summarize", 1);
  // The third prompt re-tokenized the second answer: the token sequence stops at that call.
  const drift = await claim(engine, "ep-drift", "client-c", "calc");
  await record(ex, engine, threeTurns(drift, call, [1, 2, 3, 4, 10, 11, 20, 22, 30, 31, 32]));
  await end(engine, drift, "calc", 0.25);

  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 2 });
  const markup = await claim(engine, "ep-markup", "client-a", "echo");
  // It continues a call whose batch never reached the ledger: shown as what it added, and marked.
  await record(ex, engine, [call(markup, { body: { prefix: { call_id: "call-never-stored", count: 2 }, messages: [{ role: "user", content: MARKUP }], answer: { role: "assistant", content: MARKUP } } })]);
  await end(engine, markup, "echo", 0.5);
  const aborted = await claim(engine, "ep-aborted", "client-b", "calc");
  await record(ex, engine, [call(aborted, { status: 502, error: "upstream_error: connection reset", finish_reason: null, usage: null, body: { messages: [user] } })]);
  await abort(engine, aborted);
  for (let i = 0; i < FILLERS; i++) {
    const c = await claim(engine, `ep-filler-${i}`, `client-f${i % 4}`, `filler-${i % 3}`);
    await end(engine, c, `filler-${i % 3}`, (i % 5) / 4);
  }
  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 3 });
  // Still claimed: two calls so far.
  const live = await claim(engine, "ep-live", "client-live", "calc");
  await record(ex, engine, threeTurns(live, call).slice(0, 2));

  await settled(ledgerOf(ex, engine, "viewer"), 5 + FILLERS);
  page = await browser.newPage();
  errors = watchErrors(page);
  await page.goto(`${ex.url}/dashboard?engine=${engine.name}&token=${engine.tokens.viewer}&refresh=0.3`);
  await page.waitForSelector("#trajectories-table");
});

afterAll(async () => {
  await browser?.close();
  await ex?.stop();
});

/** Turns of the long live claim: its trajectory's answer is about 3.6 MB. */
const LONG_TURNS = 40;

/** `turns` calls of an agent's claim: each reads one more 4 KB file, stored as a delta of the call before. */
function longClaim(c: ClaimRef, call: ReturnType<typeof callClock>, turns: number): CallRecord[] {
  const answerOf = (i: number) => ({ role: "assistant", content: null, tool_calls: [{ id: `c${i}`, type: "function", function: { name: "bash", arguments: `{"cmd":"cat f${i}.py"}` } }] });
  const toolOf = (i: number) => ({ role: "tool", tool_call_id: `c${i}`, content: `f${i}.py\n${"y".repeat(4_000)}` });
  const out: CallRecord[] = [];
  for (let i = 0; i < turns; i++) {
    const prev = out.at(-1);
    out.push(
      call(c, {
        body: {
          prefix: prev === undefined ? null : { call_id: prev.call_id, count: 2 * i + 1 },
          messages: i === 0 ? [sys, user] : [toolOf(i - 1)],
          answer: answerOf(i),
        },
      }),
    );
  }
  return out;
}

/** Opens an episode by clicking its row in `table` and waits for its view. */
async function openFrom(table: string, episode: string): Promise<void> {
  await page.click(`${table} tr[data-episode="${episode}"]`);
  await page.waitForSelector(`#episode-view[data-episode="${episode}"]`);
}

describe("trajectories on the dashboard", () => {
  it("shows the engine's capture mode and retention as the API reports them", async () => {
    const config = await ledgerOf(ex, engine, "viewer").config();
    expect(config).toEqual({ capture: "tokens", retention_days: 14 });
    expect(await attr(page, "#ledger-capture", "data-capture")).toBe(config.capture);
    expect(Number(await attr(page, "#ledger-capture", "data-retention-days"))).toBe(config.retention_days);
    expect(await page.textContent("#ledger-capture")).toBe("LLM calls recorded: messages and token ids, kept 14 days");
  });

  it("lists the newest trajectories as the API does, and the next page with More", async () => {
    const ledger = ledgerOf(ex, engine, "viewer");
    const first = await ledger.list({ limit: 20 });
    expect(first.next_cursor).not.toBeNull();
    await refreshesLater(page);
    expect(await trajectoryRows(page)).toEqual(first.trajectories.map(fields));
    const second = await ledger.list({ limit: 20, cursor: first.next_cursor ?? "" });
    await page.click("#trajectories-more");
    await page.waitForSelector(`#trajectories-table[data-rows="${first.trajectories.length + second.trajectories.length}"]`);
    expect(await trajectoryRows(page)).toEqual([...first.trajectories, ...second.trajectories].map(fields));
    expect(await page.isDisabled("#trajectories-more")).toBe(second.next_cursor === null);
    // Older pages hold the list still across refreshes; Newest goes back to the first page.
    await refreshesLater(page, 2);
    expect(await page.locator("#trajectories-table tbody tr").count()).toBe(25);
    await page.click("#trajectories-newest");
    await page.waitForSelector('#trajectories-table[data-rows="20"]');
    const byEpisode = Object.fromEntries([...first.trajectories, ...second.trajectories].map((t) => [t.episode_uuid, t]));
    expect(byEpisode["ep-tool-use"]).toMatchObject({ outcome: "ended", reward: 0.75, calls: 3, global_step: 1 });
    expect(byEpisode["ep-aborted"]).toMatchObject({ outcome: "aborted", reward: null, calls: 1, global_step: 2 });
  });

  it("opens an episode from the list: its timeline, the last call's conversation with the tool call, and its answer", async () => {
    await page.click("#trajectories-more");
    await page.waitForSelector('#trajectories-table[data-rows="25"]');
    await openFrom("#trajectories-table", "ep-tool-use");
    const t = await ledgerOf(ex, engine, "viewer").trajectory("ep-tool-use");
    expect(await attr(page, "#episode-view", "data-calls")).toBe(String(t.calls.length));
    expect(await attr(page, "#episode-view", "data-outcome")).toBe("ended");
    expect(Number(await attr(page, "#episode-view", "data-reward"))).toBe(t.reward);
    const calls = await page.$$eval("#episode-timeline tr.call", (els) =>
      els.map((e) => ({ id: e.getAttribute("data-call-id"), latency: Number(e.getAttribute("data-latency-ms")), weights: e.getAttribute("data-weight-version"), splice: e.getAttribute("data-splice") })),
    );
    expect(calls).toEqual(t.calls.map((c) => ({ id: c.call_id, latency: c.done_at - c.started_at, weights: String(c.weight_version), splice: c.messages_splice })));
    expect(await page.$$eval("#episode-timeline tr.event", (els) => els.map((e) => e.getAttribute("data-event")))).toEqual(["first-admitted", "ended"]);

    // The last call's whole conversation, then its answer.
    const last = t.calls[t.calls.length - 1];
    const roles = await page.$$eval("#episode-messages .msg", (els) => els.map((e) => [e.getAttribute("data-role"), e.hasAttribute("data-answer")]));
    expect(roles).toEqual([...(last?.messages ?? []).map((m) => [(m as { role: string }).role, false]), ["assistant", true]]);
    const tool = page.locator('#episode-messages .tool-call[data-tool="calc"]');
    expect(await tool.count()).toBe(1);
    expect(await tool.getAttribute("data-tool-call-id")).toBe("t1");
    expect(JSON.parse((await tool.locator(".tool-args").textContent()) ?? "")).toEqual({ x: "2+2" });
    expect(await page.textContent('#episode-messages .msg[data-role="tool"]')).toContain("result of t1");
    expect(await page.textContent("#episode-messages .msg.answer")).toContain("6.");
    expect(await attr(page, "#episode-training", "data-drift-at-call")).toBe("");
    expect(page.url()).toContain("episode=ep-tool-use");
    expect(page.url()).not.toContain("token=");

    // An earlier call's conversation on a click of its row.
    await page.click('#episode-timeline tr.call[data-call="0"]');
    await page.waitForSelector('#episode-conversation[data-call="0"]');
    expect(await attr(page, "#episode-messages", "data-messages")).toBe(String(t.calls[0]?.messages.length));
  });

  it("marks a rewritten history and drifted tokens where they happened", async () => {
    await openFrom("#trajectories-table", "ep-trimmed");
    expect(await page.$$eval("#episode-timeline tr.call", (els) => els.map((e) => e.getAttribute("data-splice")))).toEqual(["first", "rewritten"]);
    expect(await page.locator('#episode-timeline tr.call[data-call="1"] [data-mark="rewritten"]').count()).toBe(1);
    expect(await page.locator('#episode-timeline tr.call[data-call="0"] [data-mark]').count()).toBe(0);
    expect(await page.textContent('#episode-conversation [data-mark="rewritten"]')).toContain("rewrote or trimmed its history");
    // Its usage's details: the prefix cache's share of the prompt, the thinking's of the completion.
    expect(await page.textContent('[data-fact="tokens"] dd')).toBe("2700 in (1024 cached) · 340 out (250 thinking)");
    expect(await attr(page, '#episode-timeline tr.call[data-call="1"] td.tokens', "title")).toBe("1500 in (1024 cached) · 40 out");

    await openFrom("#trajectories-table", "ep-drift");
    const t = await ledgerOf(ex, engine, "viewer").trajectory("ep-drift");
    expect(t.training?.drift_at_call).toBe(2);
    expect(await attr(page, "#episode-training", "data-drift-at-call")).toBe("2");
    expect(await page.locator('#episode-timeline tr.call[data-call="2"] [data-mark="drift"]').count()).toBe(1);
    expect(await page.locator('#episode-timeline [data-mark="drift"]').count()).toBe(1);
  });

  it("shows a failed call's error and an aborted claim's end", async () => {
    await openFrom("#trajectories-table", "ep-aborted");
    expect(await attr(page, '#episode-timeline tr.call[data-call="0"]', "data-status")).toBe("502");
    expect(await page.textContent('#episode-timeline tr.call[data-call="0"] .call-error')).toBe("upstream_error: connection reset");
    expect(await page.$$eval("#episode-timeline tr.event", (els) => els.map((e) => e.getAttribute("data-event")))).toEqual(["first-admitted", "aborted"]);
  });

  it("renders messages as text, never as markup", async () => {
    await openFrom("#trajectories-table", "ep-markup");
    expect(await page.locator("#episode-messages img, #episode-messages b").count()).toBe(0);
    expect(await page.$$eval("#episode-messages .msg-text", (els) => els.map((e) => e.textContent))).toEqual([MARKUP, MARKUP]);
    expect(await page.title()).not.toBe("owned");
  });

  it("marks a call whose earlier call the ledger does not have", async () => {
    await openFrom("#trajectories-table", "ep-markup");
    const t = await ledgerOf(ex, engine, "viewer").trajectory("ep-markup");
    expect(t.calls[0]?.prefix_missing).toBe(true);
    expect(await page.locator('#episode-timeline tr.call[data-call="0"] [data-mark="prefix-missing"]').count()).toBe(1);
    expect(await page.getAttribute('#episode-timeline tr.call[data-call="0"] [data-mark="prefix-missing"]', "title")).toContain("only what it added");
    // A call that continues what the ledger has is not marked.
    await openFrom("#trajectories-table", "ep-tool-use");
    expect(await page.locator('#episode-timeline [data-mark="prefix-missing"]').count()).toBe(0);
  });

  it("takes a screenshot of the episode view (/tmp/hdash-episode.png)", async () => {
    await openFrom("#trajectories-table", "ep-tool-use");
    const png = await page.locator("#episode-panel").screenshot({ path: "/tmp/hdash-episode.png" });
    expect(png.subarray(1, 4).toString()).toBe("PNG");
    await page.screenshot({ path: "/tmp/hdash-page.png", fullPage: true });
  });

  it("lists one global step's trajectories when its point on the reward chart is clicked", async () => {
    const { history, run } = await engine.as("viewer").getRewardHistory();
    expect(history.map((h) => h.global_step)).toEqual([1, 2]);
    // Refreshes leave the chart as it is while its data is: a point replaced between the press and
    // the release of a click loses the click.
    const point = await page.$('#reward-chart circle.point[data-step="1"]');
    await refreshesLater(page, 2);
    expect(await point?.evaluate((el) => el.isConnected)).toBe(true);
    await page.click('#reward-chart circle.point[data-step="1"]');
    await page.waitForSelector('#trajectories-filter[data-global-step="1"]');
    await page.waitForFunction(() => document.querySelectorAll("#trajectories-table tbody tr").length === 3);
    const step1 = await ledgerOf(ex, engine, "viewer").list({ global_step: 1, ...(run === null ? {} : { run }), limit: 20 });
    expect(await trajectoryRows(page)).toEqual(step1.trajectories.map(fields));
    expect(step1.trajectories.map((t) => t.episode_uuid).sort()).toEqual(["ep-drift", "ep-tool-use", "ep-trimmed"]);
    // Refreshes keep the filter.
    await refreshesLater(page, 2);
    expect(await page.locator("#trajectories-table tbody tr").count()).toBe(3);
    await page.click("#trajectories-all");
    await page.waitForSelector('#trajectories-table[data-rows="20"]');
  });

  it("opens a running episode from the running episodes: its calls so far", async () => {
    await openFrom("#episodes-table", "ep-live");
    expect(await attr(page, "#episode-view", "data-outcome")).toBe("");
    expect(await attr(page, "#episode-view", "data-calls")).toBe("2");
    expect(await page.$$eval("#episode-timeline tr.event", (els) => els.map((e) => e.getAttribute("data-event")))).toEqual(["first-admitted", "live"]);
    await page.click("#episode-close");
    expect(await page.isHidden("#episode-panel")).toBe(true);
    expect(page.url()).not.toContain("episode=");
  });

  it("opens the episode in the address bar on a reload", async () => {
    const again = await browser.newPage();
    const errs = watchErrors(again);
    await again.goto(`${ex.url}/dashboard?engine=${engine.name}&episode=ep-trimmed&refresh=0.3`);
    await again.waitForSelector('#episode-view[data-episode="ep-trimmed"][data-calls="2"]');
    await again.close();
    expect(errs).toEqual([]);
  });

  it("tells a client token that trajectories are not readable with it, and shows the rest", async () => {
    const other = await launchBrowser();
    try {
      const p = await other.newPage();
      const errs = watchErrors(p);
      await p.goto(`${ex.url}/dashboard?engine=${engine.name}&token=${engine.tokens.client}&refresh=0.3`);
      await p.waitForSelector("#trajectories-forbidden");
      expect(await p.textContent("#trajectories-forbidden")).toContain("This token may not read trajectories");
      expect(await p.textContent("#trajectories-forbidden")).toContain("403");
      expect(await p.isVisible("#engine-view")).toBe(true);
      expect(await attr(p, "#ledger-capture", "data-capture")).toBe("tokens");
      await p.click('#episodes-table tr[data-episode="ep-live"]');
      await p.waitForSelector("#episode-forbidden");
      expect(await p.isVisible("#episode-panel")).toBe(true);
      // The 403s are the API's answers, which Chromium logs as failed loads; nothing else went wrong.
      expect(errs.filter((e) => !e.includes("403"))).toEqual([]);
    } finally {
      await other.close();
    }
  });

  it("marks where the training sequence stops at a call whose tokens were lost", async () => {
    // Made after the tests that count the list's rows: a third turn over the record cap, so its tokens are not known.
    const cut = await claim(engine, "ep-cut", "client-c", "calc");
    const [first, second, third] = threeTurns(cut, callClock(Date.now() - 60_000));
    if (first === undefined || second === undefined || third === undefined) throw new Error("threeTurns made fewer than three calls");
    await record(ex, engine, [first, second, { ...third, truncated: true, body: { ...third.body, messages: [], answer: null, tokens: null } }]);
    await end(engine, cut, "calc", 0.5);
    const ledger = ledgerOf(ex, engine, "viewer");
    await settled(ledger, 6 + FILLERS);
    const t = await ledger.trajectory("ep-cut");
    expect(t.training?.drift_at_call).toBe(2);
    expect(t.training?.segments).toHaveLength(2);

    await page.goto(`${ex.url}/dashboard?engine=${engine.name}&episode=ep-cut&refresh=0.3`);
    await page.waitForSelector('#episode-view[data-episode="ep-cut"][data-calls="3"]');
    expect(await attr(page, "#episode-training", "data-drift-at-call")).toBe("2");
    const mark = page.locator('#episode-timeline tr.call[data-call="2"] [data-mark="drift"]');
    expect(await mark.textContent()).toBe("training stops");
    expect(await mark.getAttribute("title")).toContain("tokens are not known");
    expect(await page.locator('#episode-timeline tr.call[data-call="2"] [data-mark="truncated"]').count()).toBe(1);
    // Only the call where the sequence stops is marked, and none as drifted.
    expect(await page.locator('#episode-timeline [data-mark="drift"]').count()).toBe(1);
    expect(await page.locator("#episode-timeline", { hasText: "tokens drifted" }).count()).toBe(0);
  });

  it("marks a call relayed while capture was off, where the training sequence stops", async () => {
    // Made after the tests that count the list's rows: the third turn ran with capture off (the gateway's stub).
    const gap = await claim(engine, "ep-uncaptured", "client-c", "calc");
    const [first, second, third] = threeTurns(gap, callClock(Date.now() - 60_000));
    if (first === undefined || second === undefined || third === undefined) throw new Error("threeTurns made fewer than three calls");
    const stub = { ...third, finish_reason: null, usage: null, body: { params: {}, tools: null, tools_from_prefix: false, prefix: null, messages: [], answer: null, tokens: null, uncaptured: true as const } };
    await record(ex, engine, [first, second, stub]);
    await end(engine, gap, "calc", 0.5);
    const ledger = ledgerOf(ex, engine, "viewer");
    await settled(ledger, 7 + FILLERS);
    const t = await ledger.trajectory("ep-uncaptured");
    expect(t.calls.map((c) => c.uncaptured)).toEqual([false, false, true]);
    expect(t.training?.drift_at_call).toBe(2);

    await page.goto(`${ex.url}/dashboard?engine=${engine.name}&episode=ep-uncaptured&refresh=0.3`);
    await page.waitForSelector('#episode-view[data-episode="ep-uncaptured"][data-calls="3"]');
    const mark = page.locator('#episode-timeline tr.call[data-call="2"] [data-mark="uncaptured"]');
    expect(await mark.textContent()).toBe("not captured");
    expect(await mark.getAttribute("title")).toContain("capture was off");
    expect(await page.locator('#episode-timeline tr.call[data-call="2"] [data-mark="drift"]').textContent()).toBe("training stops");
    expect(await page.locator('#episode-timeline [data-mark="uncaptured"]').count()).toBe(1);
  });

  it("draws a vision agent's screenshots in the conversation: inline, stored by reference, and names the rest", async () => {
    // Made after the tests that count the list's rows. A screenshot the ledger holds by reference
    // (rx-media:sha256:...) was shown as the word [image_url], so a viewer could not see what the agent saw.
    const shot = noisePngDataUrl(96, 64, 7);
    const icon = noisePngDataUrl(4, 3, 9);
    const svg = `data:image/svg+xml;base64,${Buffer.from('<svg xmlns="http://www.w3.org/2000/svg"><script>document.title="owned"</script></svg>').toString("base64")}`;
    const [shotSha, svgSha] = [shot, svg].map((s) => createHash("sha256").update(s).digest("hex"));
    for (const [sha, data] of [[shotSha, shot], [svgSha, svg]] as const) {
      const res = await fetch(`${ex.url}/e/${engine.name}/agent/media/${sha}`, { method: "PUT", headers: { authorization: `Bearer ${engine.tokens.trainer}`, "content-type": "application/json" }, body: JSON.stringify({ data }) });
      expect(res.status).toBe(200);
    }
    const elsewhere = "https://example.com/screen.png";
    const vision = await claim(engine, "ep-vision", "client-v", "browse");
    const look = {
      role: "user",
      content: [
        { type: "text", text: "What is on the screen?" },
        { type: "image_url", image_url: { url: `rx-media:sha256:${shotSha}` } },
        { type: "image_url", image_url: { url: icon, detail: "low" } },
        { type: "image_url", image_url: { url: elsewhere } },
        { type: "image_url", image_url: { url: `rx-media:sha256:${svgSha}` } },
        { type: "text", text: "Answer in one word." },
      ],
    };
    await record(ex, engine, [callClock(Date.now() - 60_000)(vision, { capture: "messages", body: { messages: [sys, look], answer: { role: "assistant", content: "Noise." } } })]);
    await end(engine, vision, "browse", 1);
    await settled(ledgerOf(ex, engine, "viewer"), 8 + FILLERS);

    await page.goto(`${ex.url}/dashboard?engine=${engine.name}&episode=ep-vision&refresh=0.3`);
    await page.waitForSelector(`#episode-messages figure[data-media="${shotSha}"][data-media-state="shown"]`);
    const user = page.locator('#episode-messages .msg[data-role="user"]');
    expect(await user.locator(".msg-text").allTextContents()).toEqual(["What is on the screen?", `[image] ${elsewhere}`, "Answer in one word."]);
    // The browser decoded both pictures: the one read from the exchange and the one sent inline.
    const sizes = await user.locator("figure img").evaluateAll((imgs) => imgs.map((i) => [(i as HTMLImageElement).naturalWidth, (i as HTMLImageElement).naturalHeight]));
    expect(sizes.slice(0, 2)).toEqual([
      [96, 64],
      [4, 3],
    ]);
    expect(await user.locator('[data-media-state="elsewhere"]').count()).toBe(1);
    // An SVG is a document: named, never drawn, and nothing in it runs.
    const svgFigure = user.locator(`figure[data-media="${svgSha}"]`);
    await page.waitForSelector(`#episode-messages figure[data-media="${svgSha}"][data-media-state="missing"]`);
    expect(await svgFigure.locator("img").getAttribute("src")).toBeNull();
    expect(await svgFigure.textContent()).toContain("not a picture this page draws");
    expect(await page.title()).not.toBe("owned");
    // Redrawn on each refresh from what was read: the image is not read again.
    const reads: string[] = [];
    page.on("request", (r) => {
      if (r.url().includes("/trajectories/media/")) reads.push(r.url());
    });
    await page.click('#episode-timeline tr.call[data-call="0"]');
    await page.waitForSelector(`#episode-messages figure[data-media="${shotSha}"][data-media-state="shown"]`);
    expect(reads).toEqual([]);
  });

  // A live computer-use episode whose history held more screenshots than the page kept (24) had
  // all of them read again at every refresh: each draw evicted what the same draw needed next.
  it("reads a live conversation's 30 screenshots once, however many of its calls redraw it", async () => {
    const screens = await createEngine(ex, "ledger-screens");
    await screens.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    const shots = Array.from({ length: 30 }, (_, i) => noisePngDataUrl(8, 8, i + 1));
    const shas = shots.map((s) => createHash("sha256").update(s).digest("hex"));
    for (const [i, data] of shots.entries()) {
      const res = await fetch(`${ex.url}/e/${screens.name}/agent/media/${shas[i]}`, { method: "PUT", headers: { authorization: `Bearer ${screens.tokens.trainer}`, "content-type": "application/json" }, body: JSON.stringify({ data }) });
      expect(res.status).toBe(200);
    }
    const live = await claim(screens, "ep-screens", "client-s", "browse");
    const steps = shas.map((sha, i) => ({ role: "user", content: [{ type: "text", text: `step ${i}` }, { type: "image_url", image_url: { url: `rx-media:sha256:${sha}` } }] }));
    const screenCall = callClock(Date.now() - 60_000);
    await record(ex, screens, [screenCall(live, { capture: "messages", body: { messages: [sys, ...steps], answer: { role: "assistant", content: "click" } } })]);

    const reads: string[] = [];
    page.on("request", (r) => {
      if (r.url().includes("/trajectories/media/")) reads.push(r.url());
    });
    await page.goto(`${ex.url}/dashboard?engine=${screens.name}&token=${screens.tokens.viewer}&episode=ep-screens&refresh=0.3`);
    await page.waitForFunction(() => document.querySelectorAll('#episode-messages figure[data-media-state="shown"]').length === 30);
    const first = reads.length;
    // The claim goes on with the same screenshots: the view is drawn again, for its new last call.
    await record(ex, screens, [screenCall(live, { capture: "messages", body: { messages: [sys, ...steps, { role: "user", content: "go on" }], answer: { role: "assistant", content: "scroll" } } })]);
    await page.waitForSelector('#episode-view[data-calls="2"]');
    await refreshesLater(page, 4);
    expect(await page.locator('#episode-messages figure[data-media-state="shown"]').count()).toBe(30);
    expect({ firstDraw: first, afterRefreshes: reads.length - first }).toEqual({ firstDraw: 30, afterRefreshes: 0 });
  });

  it("sends a live episode's unchanged trajectory once, however many refreshes ask for it, and again once a call is added", async () => {
    const longEngine = await createEngine(ex, "ledger-long");
    await longEngine.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    const c = await claim(longEngine, "ep-long-live", "client-a", "swe");
    // An agent's claim as the gateway stores it: each call what it adds to the one before. Read
    // back, each call holds its whole conversation, so the answer grows with the square of its length.
    const calls = longClaim(c, callClock(Date.now() - 60 * 60_000), LONG_TURNS + 1);
    for (let i = 0; i < LONG_TURNS; i += 20) await record(ex, longEngine, calls.slice(i, Math.min(i + 20, LONG_TURNS)));

    const watcher = await browser.newPage();
    const errs = watchErrors(watcher);
    const answers: Promise<{ status: number; bytes: number }>[] = [];
    watcher.on("response", (res) => {
      if (!new URL(res.url()).pathname.endsWith("/trajectories/ep-long-live")) return;
      answers.push(res.body().then((b) => ({ status: res.status(), bytes: b.length }), () => ({ status: res.status(), bytes: 0 })));
    });
    const seen = async () => Promise.all(answers);
    await watcher.goto(`${ex.url}/dashboard?engine=${longEngine.name}&token=${longEngine.tokens.viewer}&episode=ep-long-live&refresh=0.3`);
    await watcher.waitForSelector(`#episode-view[data-episode="ep-long-live"][data-calls="${LONG_TURNS}"]`);
    const first = (await seen())[0]?.bytes ?? 0;
    // The page reads the delta form (what each call added), not every call's whole conversation.
    const whole = await ledgerOf(ex, longEngine, "viewer").trajectory("ep-long-live");
    const wholeBytes = JSON.stringify(whole).length;
    expect(wholeBytes).toBeGreaterThan(1_000_000);
    expect(first).toBeLessThan(wholeBytes / 5);
    // Yet the call shown is whole: the last, and one picked from the timeline.
    for (const i of [LONG_TURNS - 1, 7]) {
      if (i !== LONG_TURNS - 1) {
        await watcher.click(`#episode-timeline tr.call[data-call="${i}"]`);
        await watcher.waitForSelector(`#episode-conversation[data-call="${i}"]`);
      }
      const shown = await watcher.$$eval("#episode-messages .msg:not([data-answer])", (els) => els.map((e) => [e.getAttribute("data-role"), e.querySelector(".msg-text")?.textContent ?? ""]));
      const want = (whole.calls[i]?.messages ?? []) as { role: string; content: string | null }[];
      expect(shown.map(([role]) => role), `call ${i}`).toEqual(want.map((m) => m.role));
      // Its last message is the file it read last (f<i-1>.py), not another call's.
      expect(String(shown.at(-1)?.[1]).slice(0, 8), `call ${i}`).toBe(String(want.at(-1)?.content).slice(0, 8));
    }
    await watcher.click(`#episode-timeline tr.call[data-call="${LONG_TURNS - 1}"]`);
    await watcher.waitForSelector(`#episode-conversation[data-call="${LONG_TURNS - 1}"]`);
    // Marks the view drawn: a redraw replaces it.
    await watcher.evaluate(() => document.getElementById("episode-view")?.setAttribute("data-probe", "first-draw"));

    // No call added: each refresh asks, and is told the page holds the current trajectory.
    await refreshesLater(watcher, 5);
    const unchanged = (await seen()).slice(1);
    expect(unchanged.length).toBeGreaterThanOrEqual(4);
    expect(unchanged.filter((a) => a.status !== 304 || a.bytes > 0)).toEqual([]);
    expect(await attr(watcher, "#episode-view", "data-probe")).toBe("first-draw");

    // A call added: the next refresh brings the whole trajectory with it, once.
    const before = answers.length;
    await record(ex, longEngine, calls.slice(LONG_TURNS));
    await watcher.waitForSelector(`#episode-view[data-calls="${LONG_TURNS + 1}"]`);
    await refreshesLater(watcher, 2);
    const sent = (await seen()).slice(before);
    // Twice only when the call landed between the tag's query and the read: the tag then is the older one's.
    expect(sent.filter((a) => a.status === 200).length).toBeGreaterThanOrEqual(1);
    expect(sent.filter((a) => a.status === 200).length).toBeLessThanOrEqual(2);
    expect(sent.find((a) => a.status === 200)?.bytes).toBeGreaterThan(first);
    const settledAt = answers.length;
    await refreshesLater(watcher, 3);
    const after = (await seen()).slice(settledAt);
    expect(after.length).toBeGreaterThanOrEqual(2);
    expect(after.filter((a) => a.status !== 304 || a.bytes > 0)).toEqual([]);
    await watcher.close();
    expect(errs).toEqual([]);
  });

  // A claim past the 2,000 calls a trajectory answers read "stops at call #2001, whose prompt
  // tokens drifted": the ledger's reason (the bound) was not the one shown.
  it("says a claim past the calls a trajectory answers is cut there, with how many it recorded", async () => {
    const cut = await createEngine(ex, "ledger-cut-claim");
    await cut.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    const c = await claim(cut, "ep-2001", "client-a", "swe");
    const cutCall = callClock(Date.now() - 60 * 60_000);
    // Each call its own one-message conversation, its prompt the one before's ids and one more: what matters is how many there are.
    const calls: CallRecord[] = [];
    for (let i = 0; i < 2001; i++) {
      const prev = calls.at(-1);
      const tokens = { prompt_prefix: prev === undefined ? null : { call_id: prev.call_id, count: 2 * i }, prompt_ids: packInts([i]), completion_ids: packInts([100_000 + i]), completion_logprobs: packFloats([-0.5]) };
      calls.push(cutCall(c, { body: { messages: [{ role: "user", content: `step ${i}` }], answer: { role: "assistant", content: "ok" }, tokens } }));
    }
    for (let i = 0; i < calls.length; i += 500) await record(ex, cut, calls.slice(i, i + 500));
    const t = await ledgerOf(ex, cut, "viewer").trajectory("ep-2001");
    expect({ shown: t.calls.length, cut: t.calls_cut, recorded: t.calls_recorded, drift: t.training?.drift_at_call }).toEqual({ shown: 2000, cut: true, recorded: 2001, drift: 2000 });

    await page.goto(`${ex.url}/dashboard?engine=${cut.name}&token=${cut.tokens.viewer}&episode=ep-2001&refresh=0.3`);
    await page.waitForSelector('#episode-view[data-episode="ep-2001"][data-calls="2000"]');
    expect(await attr(page, "#episode-training", "data-drift-at-call")).toBe("2000");
    const line = await page.textContent("#episode-training");
    expect(line).toContain("stops at call #2001, the first past the 2000 a trajectory answers (the claim has 2001)");
    expect(line).not.toContain("drifted");
    expect(await page.textContent("#episode-conversation h3")).toContain("Call #2000 of 2000 shown (2001 recorded)");
  });

  it("logged no error in the browser", () => {
    expect(errors).toEqual([]);
  });
});
