/**
 * Helpers for the Atropos API tests: requests to an engine's /atropos routes as Atropos's clients
 * send them, a trainer's registration and an env's, scored groups, and a run a trainer has started.
 */
import { runInDurableObject } from "cloudflare:test";
import { expect } from "vitest";
import { jsonOrNull, ORIGIN, workerFetch, type TestEngine } from "./harness";

/**
 * An answer of the Atropos API. `json` is its body parsed (null if it is not JSON): Atropos answers
 * in many shapes, which the tests check with `expect`, so it is left untyped.
 */
export type Res = { status: number; json: any; text: string; headers: Headers };

/** A request to the engine's Atropos API, the token in the URL (as an Atropos client with rollout_server_url set sends it) unless `bearer`. */
export async function atropos(e: TestEngine, role: "trainer" | "client" | "viewer" | "operator", method: string, path: string, body?: unknown, opts: { bearer?: boolean; headers?: Record<string, string>; rawBody?: BodyInit } = {}): Promise<Res> {
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

export const REGISTRATION = { wandb_group: "g", wandb_project: "p", batch_size: 4, max_token_len: 2048, checkpoint_dir: "/ckpt", save_checkpoint_interval: 10, starting_step: 0, num_steps: 100 };
export const ENV = { max_token_length: 1024, desired_name: "gsm8k", weight: 1.0, group_size: 2, min_batch_allocation: null as number | null };

/** A scored group of `n` sequences, tagged by its first token. */
export const group = (tag: number, n: number, envId: number | null = 0, extra: Record<string, unknown> = {}) => ({
  tokens: Array.from({ length: n }, (_, i) => [tag, i]),
  masks: Array.from({ length: n }, () => [-100, 1]),
  scores: Array.from({ length: n }, (_, i) => (i % 2 === 0 ? 1 : 0)),
  env_id: envId,
  ...extra,
});

/** The tags of a batch's groups, in its order. */
export const tags = (batch: { tokens: number[][] }[]) => batch.map((g) => g.tokens[0]![0]);

/** A trainer registered, its first /batch taken (Atropos's "started"), and envs registered. */
export async function running(e: TestEngine, envs = [ENV], registration = REGISTRATION): Promise<number[]> {
  expect((await atropos(e, "trainer", "POST", "/register", registration)).status).toBe(200);
  expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
  const ids: number[] = [];
  for (const env of envs) ids.push((await atropos(e, "client", "POST", "/register-env", env)).json.env_id);
  return ids;
}

/** Bytes of every payload in the engine's Atropos tables (rows and their parts), counted by SQLite: what the state's stored_bytes must equal. */
export async function payloadBytes(e: TestEngine): Promise<number> {
  return runInDurableObject(
    e.stub,
    (_i, state) =>
      state.storage.sql
        .exec<{ b: number }>("SELECT (SELECT COALESCE(SUM(octet_length(payload)), 0) FROM atropos_groups) + (SELECT COALESCE(SUM(octet_length(payload)), 0) FROM atropos_parts) AS b")
        .one().b,
  );
}

/** `value` as JSON, gzipped, as BaseEnv sends a large list (Content-Encoding: gzip). */
export async function gzipped(value: unknown): Promise<Uint8Array> {
  return new Uint8Array(await new Response(new Blob([JSON.stringify(value)]).stream().pipeThrough(new CompressionStream("gzip"))).arrayBuffer());
}
