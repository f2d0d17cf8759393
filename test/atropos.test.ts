import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { EngineObject } from "../src/engine/engine-object";
import { advance, createEngine, jsonOrNull, ORIGIN, reconnect, workerFetch, type TestEngine } from "./support/harness";

type Res = { status: number; json: any; text: string; headers: Headers };

/** A request to the engine's Atropos API, the token in the URL (as an Atropos client with rollout_server_url set sends it) unless `bearer`. */
async function atropos(e: TestEngine, role: "trainer" | "client" | "viewer" | "operator", method: string, path: string, body?: unknown, opts: { bearer?: boolean; headers?: Record<string, string>; rawBody?: BodyInit } = {}): Promise<Res> {
  const base = opts.bearer ? `${ORIGIN}/e/${e.name}/atropos` : `${ORIGIN}/e/${e.name}/t/${e.tokens[role]}/atropos`;
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.bearer) headers["authorization"] = `Bearer ${e.tokens[role]}`;
  let payload: BodyInit | undefined = opts.rawBody;
  if (payload === undefined && body !== undefined) {
    payload = JSON.stringify(body);
    headers["content-type"] ??= "application/json";
  }
  const res = await workerFetch(`${base}${path}`, { method, headers, body: payload ?? null });
  const text = await res.text();
  return { status: res.status, json: jsonOrNull(text), text, headers: res.headers };
}

const REGISTRATION = { wandb_group: "g", wandb_project: "p", batch_size: 4, max_token_len: 2048, checkpoint_dir: "/ckpt", save_checkpoint_interval: 10, starting_step: 0, num_steps: 100 };
const ENV = { max_token_length: 1024, desired_name: "gsm8k", weight: 1.0, group_size: 2, min_batch_allocation: null };

/** A scored group of `n` sequences, tagged by its first token. */
const group = (tag: number, n: number, envId: number | null = 0, extra: Record<string, unknown> = {}) => ({
  tokens: Array.from({ length: n }, (_, i) => [tag, i]),
  masks: Array.from({ length: n }, () => [-100, 1]),
  scores: Array.from({ length: n }, (_, i) => (i % 2 === 0 ? 1 : 0)),
  env_id: envId,
  ...extra,
});
const tags = (batch: { tokens: number[][] }[]) => batch.map((g) => g.tokens[0]![0]);

/** A trainer registered, its first /batch taken (Atropos's "started"), and envs registered. */
async function running(e: TestEngine, envs = [ENV], registration = REGISTRATION): Promise<number[]> {
  expect((await atropos(e, "trainer", "POST", "/register", registration)).status).toBe(200);
  expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
  const ids: number[] = [];
  for (const env of envs) ids.push((await atropos(e, "client", "POST", "/register-env", env)).json.env_id);
  return ids;
}

describe("Atropos's API at /e/<engine>/atropos", () => {
  it("serves a trainer and an environment through the token in the URL, as Atropos's server does", async () => {
    const e = await createEngine("atr");
    expect((await atropos(e, "viewer", "GET", "/")).json).toEqual({ message: "AtroposLib API" });
    expect((await atropos(e, "viewer", "GET", "/info")).json).toEqual({ batch_size: -1, max_token_len: -1 });
    expect((await atropos(e, "viewer", "GET", "/wandb_info")).json).toEqual({ group: null, project: null });
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ status: "error", message: "Trainer not registered. Call /register first.", batch: [] });
    const reg = await atropos(e, "trainer", "POST", "/register", REGISTRATION);
    // uuid4().int: a 128-bit integer as a JSON number.
    expect(reg.text).toMatch(/^\{"uuid":\d{30,39}\}$/);
    expect((await atropos(e, "client", "POST", "/register-env", ENV)).json).toEqual({ status: "wait for trainer to start" });
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
    const reg1 = await atropos(e, "client", "POST", "/register-env", ENV);
    expect(reg1.json).toEqual({ status: "success", env_id: 0, wandb_name: "gsm8k_0", checkpoint_dir: "/ckpt", starting_step: 0, checkpoint_interval: 10, num_steps: 100 });
    expect((await atropos(e, "client", "POST", "/register-env", ENV)).json).toMatchObject({ env_id: 1, wandb_name: "gsm8k_1" });
    expect((await atropos(e, "viewer", "GET", "/info")).json).toEqual({ batch_size: 4, max_token_len: 2048 });
    expect((await atropos(e, "viewer", "GET", "/wandb_info")).json).toEqual({ group: "g", project: "p" });

    expect((await atropos(e, "client", "POST", "/scored_data", group(1, 2))).json).toEqual({ status: "received" });
    expect((await atropos(e, "viewer", "GET", "/status")).json).toEqual({ current_step: 0, queue_size: 1, stalls: [] });
    expect((await atropos(e, "client", "POST", "/scored_data_list", [group(2, 2), group(3, 2, 1)])).json).toEqual({ status: "received", groups_processed: 2 });
    const batch = await atropos(e, "trainer", "GET", "/batch");
    expect(tags(batch.json.batch)).toEqual([1, 2]);
    // Every field of _scored_data_to_dict, in its order; floats as Python writes them.
    expect(Object.keys(batch.json.batch[0])).toEqual(["tokens", "masks", "scores", "advantages", "ref_logprobs", "messages", "generation_params", "inference_logprobs", "overrides", "group_overrides", "images", "env_id", "distill_token_ids", "distill_logprobs"]);
    expect(batch.text).toContain('"scores":[1.0,0.0]');
    expect((await atropos(e, "viewer", "GET", "/status")).json).toEqual({ current_step: 1, queue_size: 1, stalls: [] });
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json).toMatchObject({ tokens: [[3, 0], [3, 1]], env_id: 1 });
    // With a bearer header instead of the token in the URL.
    expect((await atropos(e, "client", "POST", "/scored_data", group(4, 2, 1), { bearer: true })).json).toEqual({ status: "received" });
    expect(tags((await atropos(e, "trainer", "GET", "/batch", undefined, { bearer: true })).json.batch)).toEqual([3, 4]);
  });

  it("cuts every batch the queue holds at once, hands the newest out first and counts a step for each, as Atropos does", async () => {
    const e = await createEngine("atr");
    await running(e);
    for (let i = 1; i <= 6; i++) await atropos(e, "client", "POST", "/scored_data", group(i, 2));
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([5, 6]);
    expect((await atropos(e, "viewer", "GET", "/status")).json).toMatchObject({ current_step: 3, queue_size: 0 });
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([3, 4]);
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([1, 2]);
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
  });

  it("packs groups of different sizes into packs of the largest, as grab_exact_from_heterogeneous_queue does", async () => {
    const e = await createEngine("atr");
    await running(e, [{ ...ENV, group_size: 1 }, { ...ENV, desired_name: "b", group_size: 2 }], { ...REGISTRATION, batch_size: 4 });
    // Sizes 2, 1, 2, 1: packs of 2 are [g1], [g2 g4], [g3]; ready in the order g1, g3, g4.
    await atropos(e, "client", "POST", "/scored_data", group(1, 2, 1));
    await atropos(e, "client", "POST", "/scored_data", group(2, 1, 0));
    await atropos(e, "client", "POST", "/scored_data", group(3, 2, 1));
    await atropos(e, "client", "POST", "/scored_data", group(4, 1, 0));
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([1, 3]);
    expect((await atropos(e, "viewer", "GET", "/status")).json).toMatchObject({ current_step: 1, queue_size: 2 });
  });

  it("buffers an env's groups of another size until some make its group size, as _process_scored_data does", async () => {
    const e = await createEngine("atr");
    await running(e, [{ ...ENV, group_size: 4 }], { ...REGISTRATION, batch_size: 4 });
    expect((await atropos(e, "client", "POST", "/scored_data", group(1, 3))).json).toEqual({ status: "buffered", buffer_size: 3 });
    expect((await atropos(e, "client", "POST", "/scored_data", group(2, 2))).json).toEqual({ status: "buffered", buffer_size: 5 });
    expect((await atropos(e, "viewer", "GET", "/status")).json).toMatchObject({ queue_size: 0 });
    const list = await atropos(e, "client", "POST", "/scored_data_list", [group(3, 2), group(4, 1)]);
    // [3, 2, 2] has no FIFO sum of 4; 2 + 2 is found; then 3 + 1.
    expect(list.json).toEqual({ status: "received", groups_processed: 2, buffered: 2, last_buffer_size: 0 });
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json.tokens[0][0]).toBe(4);
    // Queued in the order they left the buffer: sizes 2, 2, 3, 1. The largest is 3, which 2 does
    // not divide: Atropos never packs those two, and cuts no batch of 4. Here that is reported.
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
    const status = await atropos(e, "viewer", "GET", "/status");
    expect(status.json).toMatchObject({ current_step: 0, queue_size: 4 });
    expect(status.json.stalls).toEqual([{ kind: "never_packed", groups: 2, detail: expect.stringContaining("2 queued group(s) of 2 sequences") }]);
  });
});
