/**
 * The cost of GET /get_current_batch_rollout_pool_information as the pool grows: with R
 * registered and C claimed episodes, sequential calls, p50/p99 and answer size. The engine
 * promises O(claimed): the time should follow C, not R.
 */
import { randomUUID } from "node:crypto";
import { Http, inParallel, prepareEngine } from "./loadgen";
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
