/**
 * Trajectories through the real API, as an engine's clients and gateway make them: the trainer
 * registers an episode, a client claims it, the gateway posts the claim's recorded LLM calls
 * (POST /agent/calls with the trainer's token, CallBatch bodies built as test/ledger.test.ts
 * builds them), and the client ends or aborts it. The engine's outbox then writes the
 * trajectory to D1 from its alarm, which Miniflare fires on the real clock: `settled` waits for
 * the list to hold what was ended.
 */
import type { CallRecord } from "../../src/protocol/ledger";
import { LedgerClient } from "../../src/client";
import { batchOf, callAt, type CallOverrides, type ClaimRef } from "../../test/support/ledger-calls";
import type { TestEngine, TestExchange } from "./exchange";

export const ledgerOf = (ex: TestExchange, engine: TestEngine, role: "viewer" | "client" | "operator" | "trainer") =>
  new LedgerClient({ baseUrl: `${ex.url}/e/${engine.name}`, token: engine.tokens[role] });

/**
 * Makes calls a second and a half apart from `start` (ms since the epoch), each with its own
 * latency and time to first byte, so the timeline has something to show.
 */
export function callClock(start: number): (c: ClaimRef, over: CallOverrides) => CallRecord {
  let n = 0;
  return (c, over) => {
    const t = start + 1500 * n;
    const latency = 400 + ((n * 373) % 900);
    n += 1;
    return callAt(c, t, { started_at: t + 3 + (n % 3) * 20, first_byte_at: t + 90 + (n % 4) * 35, done_at: t + latency, ...over });
  };
}

export async function claim(engine: TestEngine, episode: string, client: string, task: string): Promise<ClaimRef> {
  await engine.as("trainer").registerEpisode({ episode_uuid: episode });
  const c = await engine.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: 600, throttle_policy: { current_task_id: task } });
  if (!c.success || c.episode_uuid !== episode || c.fence === undefined) throw new Error(`claim of ${episode} failed: ${c.fail_cause}`);
  return { episode, fence: c.fence, client };
}

/** The gateway's batch of `calls`, as it posts them. */
export async function record(ex: TestExchange, engine: TestEngine, calls: CallRecord[]): Promise<void> {
  const res = await fetch(`${ex.url}/e/${engine.name}/agent/calls`, {
    method: "POST",
    headers: { authorization: `Bearer ${engine.tokens.trainer}`, "content-type": "application/json" },
    body: JSON.stringify(batchOf(calls)),
  });
  if (res.status !== 200) throw new Error(`recording calls: ${res.status} ${await res.text()}`);
}

export async function end(engine: TestEngine, c: ClaimRef, task: string, reward: number): Promise<void> {
  const r = await engine.as("client").endEpisode({ client_uuid: c.client, episode_uuid: c.episode, task_id: task, workflow_output: { reward, is_success: reward > 0.5, metadata: { task_id: task } } });
  if (!r.success) throw new Error(`end of ${c.episode} failed`);
}

export async function abort(engine: TestEngine, c: ClaimRef): Promise<void> {
  const r = await engine.as("client").abortEpisode({ client_uuid: c.client, episode_uuid: c.episode, task_id: "" });
  if (!r.success) throw new Error(`abort of ${c.episode} failed`);
  // An aborted episode goes back to the queue; the trainer takes it out so no later claim gets it.
  await engine.as("trainer").isEpisodeClaimed({ episode_uuid: c.episode, unregister_if_not_claimed: true });
}

/** Waits until the engine's outbox has written `count` trajectories to D1 (it flushes within about a second). */
export async function settled(ledger: LedgerClient, count: number, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const listed = (await ledger.list({ limit: 200 })).trajectories;
    if (listed.length >= count) return;
    if (Date.now() > deadline) {
      throw new Error(`the ledger lists ${listed.length} trajectories, not ${count}, after ${timeoutMs} ms: ${listed.map((t) => `${t.episode_uuid}/${t.fence} ${t.outcome}`).join(", ")}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
