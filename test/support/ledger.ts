/** Call records as the engine's gateway sends them (protocol/ledger.ts), for tests that need the ledger to hold something. */
import { expect } from "vitest";
import { wholeTrajectory, type LedgerClient } from "../../src/client";
import type { CallRecord } from "../../src/protocol/ledger";
import { callAt, type CallOverrides, type ClaimRef } from "./ledger-calls";
import type { ClaimKeyFields } from "../../src/auth/claim-key";
import { claimKeyFields, createEngine, raw, rollingWith, type TestEngine } from "./harness";

export { batchOf } from "./ledger-calls";
export type LedgerClaim = ClaimRef;

let seq = 0;

/** A successful call of `c`'s claim, with `over` laid over its fields and its body's, a second after the one before. */
export function callRecord(c: LedgerClaim, over: CallOverrides): CallRecord {
  // Near the engine's test clock (2099), so that no sweep of the ledger takes them.
  return callAt(c, Date.UTC(2098, 11, 31) + 1000 * seq++, over);
}

/** POST <engine>/agent/calls, as the agent sends it (with the trainer's token unless told otherwise). */
export const postCalls = (e: TestEngine, batch: unknown, role: "trainer" | "client" = "trainer") =>
  raw(`/e/${e.name}/agent/calls`, { token: e.tokens[role], body: JSON.stringify(batch) });

/**
 * `l`, its trajectory() reading the delta form beside the form asked for and checking that, made
 * whole again (wholeTrajectory), it is the whole form exactly: each ledger test that reads a
 * trajectory (drift, rewrites, truncated and uncaptured calls, missing and later-admitted prefix
 * calls, prefix cycles, /v1/completions prompts) checks the delta form on its own calls too.
 */
export function checkingDeltaForm(l: LedgerClient): LedgerClient {
  const read = l.trajectory;
  l.trajectory = async (episode, fence, q = {}) => {
    const [whole, delta] = await Promise.all([read(episode, fence, { form: "whole" }), read(episode, fence, { form: "delta" })]);
    expect(delta.form).toBe("delta");
    expect(wholeTrajectory(delta)).toEqual(whole);
    return q.form === "delta" ? delta : whole;
  };
  return l;
}

/** An engine whose rollout groups `repeats` claims of a task, rolling with that many episodes registered. */
export async function rolloutEngine(name: string, repeats: number): Promise<TestEngine> {
  const e = await createEngine(name);
  await e.as("trainer").startRollout({ num_repeat_per_sample: repeats, job_session: "job-1" });
  await rollingWith(e, repeats);
  return e;
}

/** An engine whose rollout groups `n` claims, and `n` claims of it, with their keys' fields. */
export async function groupOfClaims(name: string, n: number) {
  const e = await rolloutEngine(name, n);
  const claims: { episode: string; fence: number; client: string }[] = [];
  const keys: ClaimKeyFields[] = [];
  for (let k = 0; k < n; k++) {
    const claim = await e.as("client").claimEpisode({ client_uuid: `c${k}`, discard_episode_timeout: 600 });
    const f = await claimKeyFields(claim.openai_api_key);
    claims.push({ episode: f.episode_uuid, fence: f.fence, client: `c${k}` });
    keys.push(f);
  }
  return { e, claims, keys };
}
