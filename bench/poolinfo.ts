/**
 * The cost of GET /get_current_batch_rollout_pool_information as the pool grows: with R
 * registered and C claimed episodes, sequential calls, p50/p99 and answer size. The engine
 * promises O(claimed): the time should follow C, not R.
 */
import { randomUUID } from "node:crypto";
import { inParallel } from "./load/closed-loop";
import { Http } from "./load/http";
import { prepareEngine } from "./loadgen";
import type { EngineTokens } from "./serve/reference";
import { summarize, type Latency } from "./stats";

export type PoolInfoResult = { registered: number; claimed: number; samples: number; ms: Latency; bytes: number };

/** Registers `registered` episodes (engine set ROLLING), then claims `claimed` of them. */
export async function fillPool(http: Http, clientToken: string, trainerToken: string, registered: number, claimed: number, log?: (l: string) => void): Promise<void> {
  await prepareEngine(http, trainerToken, registered, log);
  await claimMore(http, clientToken, claimed);
}

export async function claimMore(http: Http, clientToken: string, n: number): Promise<void> {
  await inParallel(n, 16, async () => {
    const r = await http.call("POST", "/claim_episode", clientToken, { client_uuid: `pool-${randomUUID()}`, episode_type: "train", discard_episode_timeout: 600 });
    if (r.body["success"] !== true) throw new Error(`claim_episode while filling the pool: HTTP ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
  });
}

/** Times `samples` sequential pool-info calls after 3 untimed ones. */
export async function timePoolInfo(http: Http, token: string, registered: number, claimed: number, samples = 30): Promise<PoolInfoResult> {
  const ms: number[] = [];
  let bytes = 0;
  for (let i = 0; i < samples + 3; i++) {
    const t = performance.now();
    const r = await http.call("GET", "/get_current_batch_rollout_pool_information", token);
    const d = performance.now() - t;
    if (r.status !== 200) throw new Error(`pool info: HTTP ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
    if (i >= 3) ms.push(d);
    bytes = JSON.stringify(r.body).length;
  }
  return { registered, claimed, samples, ms: summarize(ms), bytes };
}

/**
 * Times pool info on one target for each shape [registered, claimed], in order. Shapes with the
 * same registered count share an engine: the later one claims more on the same pool.
 */
export async function measurePoolInfo(t: { name: string; newEngine(tag: string): Promise<EngineTokens> }, shapes: [number, number][], log: (line: string) => void): Promise<PoolInfoResult[]> {
  const results: PoolInfoResult[] = [];
  const engines = new Map<number, EngineTokens>();
  for (const [registered, claimed] of shapes) {
    const prev = results.at(-1);
    const reuse = prev && prev.registered === registered && prev.claimed <= claimed;
    const state = (reuse ? engines.get(registered) : undefined) ?? (await t.newEngine(`pool${registered}`));
    engines.set(registered, state);
    const http = new Http(state.baseUrl, 20);
    try {
      if (reuse && prev) await claimMore(http, state.clientToken, claimed - prev.claimed);
      else {
        log(`${t.name} pool info: registering ${registered}, claiming ${claimed}`);
        await fillPool(http, state.clientToken, state.trainerToken, registered, claimed, log);
      }
      const r = await timePoolInfo(http, state.trainerToken, registered, claimed);
      log(`${t.name} pool info with ${registered} registered, ${claimed} claimed: p50 ${r.ms.p50} ms, p99 ${r.ms.p99} ms, ${r.bytes} bytes`);
      results.push(r);
    } finally {
      await http.close();
    }
  }
  return results;
}
