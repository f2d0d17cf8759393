/**
 * Where a cycle's time goes: each operation alone, one request at a time (no queueing), with
 * its latency and the workerd CPU it costs. Worker-only routes (no Durable Object) and a
 * Durable Object call that touches no SQL separate the Worker's own overhead from the engine's.
 */
import { randomUUID } from "node:crypto";
import { Http } from "./load/http";
import { cpuMeter, summarize, type Latency } from "./stats";

export type OpProfile = { op: string; n: number; ms: Latency; server_cpu_ms_per_req: number | null; other_cpu_pct: number };

export type Step = { op: string; run: (i: number) => Promise<void> };

async function timeOp(step: Step, n: number, pids: number[]): Promise<OpProfile> {
  for (let i = 0; i < 10; i++) await step.run(-1 - i); // warm
  const ms: number[] = [];
  const meter = cpuMeter(pids);
  meter.start();
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await step.run(i);
    ms.push(performance.now() - t);
  }
  const cpu = meter.stop();
  return {
    op: step.op,
    n,
    ms: summarize(ms),
    server_cpu_ms_per_req: cpu.server_cpu_pct === null ? null : Math.round(((cpu.server_cpu_pct * 10 * cpu.wall_s) / n) * 100) / 100,
    other_cpu_pct: cpu.other_cpu_pct,
  };
}

function expectOk(what: string, r: { status: number; body: Record<string, unknown> }, key?: string): void {
  if (r.status >= 400 && r.status !== 404) throw new Error(`${what}: HTTP ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`);
  if (key !== undefined && r.body[key] !== true) throw new Error(`${what}: ${JSON.stringify(r.body).slice(0, 200)}`);
}

/** What the operations need to reach a target: its origin and engine, tokens, and two probe paths. */
export type OpTarget = {
  origin: string;
  baseUrl: string;
  clientToken: string;
  trainerToken: string;
  /** A Worker-only route (no Durable Object): /health on the exchange, an unknown path on the reference. */
  floorPath: string;
  /** A route that reaches the Durable Object without SQL. */
  rpcPath: string;
};

/**
 * Sets the engine ROLLING and returns the operations, one request per run, in the order they
 * must run: each claim takes an episode an earlier register put in, each end a claim. Run every
 * step the same number of times.
 */
export async function operationSteps(o: OpTarget, root: Http, http: Http): Promise<Step[]> {
  const st = await http.call("POST", "/update_engine_status", o.trainerToken, { engine_status: "ENGINE.ROLLING" });
  expectOk("update_engine_status", st, "success");
  const claimed: { client: string; episode: string }[] = [];
  return [
    { op: "worker only (no DO)", run: async () => expectOk("floor", await root.call("GET", o.floorPath, o.clientToken)) },
    { op: "DO call, no SQL", run: async () => expectOk("rpc", await http.call("GET", o.rpcPath, o.clientToken)) },
    {
      op: "register_episode",
      run: async () => expectOk("register_episode", await http.call("POST", "/register_episode", o.trainerToken, { episode_uuid: randomUUID() }), "success"),
    },
    {
      op: "claim_episode",
      run: async () => {
        const client = `profile-${randomUUID()}`;
        const r = await http.call("POST", "/claim_episode", o.clientToken, { client_uuid: client, episode_type: "train", discard_episode_timeout: 3600 });
        expectOk("claim_episode", r, "success");
        claimed.push({ client, episode: String(r.body["episode_uuid"]) });
      },
    },
    {
      op: "end_episode",
      run: async () => {
        const c = claimed.shift();
        if (!c) throw new Error("end_episode: nothing claimed");
        const r = await http.call("POST", "/end_episode", o.clientToken, {
          client_uuid: c.client,
          episode_uuid: c.episode,
          task_id: "t",
          workflow_output: { reward: 1, is_success: true, metadata: { task_id: "t" } },
        });
        expectOk("end_episode", r, "success");
      },
    },
  ];
}

/** Profiles one target: each operation alone, `n` requests one at a time, with the workerd CPU it costs. */
export async function profileTarget(o: OpTarget & { pids: number[]; n?: number }): Promise<OpProfile[]> {
  const n = o.n ?? 300;
  const root = new Http(o.origin, 2);
  const http = new Http(o.baseUrl, 2);
  try {
    const out: OpProfile[] = [];
    for (const s of await operationSteps(o, root, http)) out.push(await timeOp(s, n, o.pids));
    return out;
  } finally {
    await root.close();
    await http.close();
  }
}
