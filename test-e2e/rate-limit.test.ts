/**
 * Per-token request limits on the local server (`npm start`'s launcher, Miniflare's rate
 * limiting binding), with a client limit small enough to reach at once: a generated copy of
 * wrangler.toml sets it. A client over its limit gets 429 with Retry-After while the engine's
 * other tokens carry on and its ends still go through; and a client following AgentJet's
 * SwarmClient retry rule (DESIGN.md section 3) against it is slowed down, not failed.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT, startLocalExchange, type LocalExchange } from "../scripts/local/exchange";
import { AdminClient } from "../src/client";

const ADMIN = "rate-limit-admin-token";
/** Requests one client token may make per window here: a deployment allows far more (wrangler.toml). */
const CLIENT_LIMIT = 6;
/** Requests per address with tokens the engine has not accepted yet: above what the other tests' fresh tokens make in a window. */
const UNVERIFIED_LIMIT = 40;
const NO_EPISODES = "No available episodes to claim.";
/** The client limit's period in wrangler.toml, which a 429's Retry-After gives. */
let periodSeconds: number;

let dir: string;
let exchange: LocalExchange;
let admin: AdminClient;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "rollout-rate-limit-"));
  const toml = readFileSync(join(REPO_ROOT, "wrangler.toml"), "utf8")
    .replace(/^main\s*=.*$/m, `main = ${JSON.stringify(join(REPO_ROOT, "src", "index.ts"))}`)
    .replace(/^migrations_dir\s*=.*$/m, `migrations_dir = ${JSON.stringify(join(REPO_ROOT, "migrations"))}`)
    .replace(/(name = "RATE_LIMIT_CLIENT"[^[]*?limit = )\d+/, `$1${CLIENT_LIMIT}`)
    .replace(/(name = "RATE_LIMIT_UNVERIFIED"[^[]*?limit = )\d+/, `$1${UNVERIFIED_LIMIT}`);
  periodSeconds = Number(/name = "RATE_LIMIT_CLIENT"[^[]*?period = (\d+)/.exec(toml)?.[1]);
  expect(toml).toContain(`limit = ${CLIENT_LIMIT}, period = ${periodSeconds}`);
  expect(toml).toContain(`limit = ${UNVERIFIED_LIMIT}, period = ${periodSeconds}`);
  writeFileSync(join(dir, "wrangler.toml"), toml);
  exchange = await startLocalExchange({ port: 0, persistDir: null, adminToken: ADMIN, claimKeySecret: "rate-limit-claim-secret", configPath: join(dir, "wrangler.toml"), rateLimits: true });
  admin = new AdminClient({ origin: exchange.url, adminToken: ADMIN });
});

afterAll(async () => {
  await exchange?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

type Answer = { status: number; retryAfter: string | null; json: Record<string, unknown> };

/** `from`: the caller's address as Cloudflare's edge gives it (the local server's clients have none). */
async function send(base: string, path: string, token: string, body?: unknown, from?: string): Promise<Answer> {
  const res = await fetch(`${base}${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }), ...(from === undefined ? {} : { "cf-connecting-ip": from }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, retryAfter: res.headers.get("retry-after"), json: (await res.json()) as Record<string, unknown> };
}

/** An engine in ROLLING with `n` episodes registered by its trainer. */
async function rollingEngine(n: number) {
  const created = await admin.createEngine(`rl-${Math.random().toString(36).slice(2, 8)}`);
  const base = `${exchange.url}/e/${created.engine}`;
  const trainer = created.tokens.trainer!;
  await send(base, "/update_engine_status", trainer, { engine_status: "ENGINE.ROLLING", global_step: 0 });
  for (let i = 0; i < n; i++) expect((await send(base, "/register_episode", trainer, { episode_uuid: `ep-${i}` })).json).toMatchObject({ success: true });
  return { name: created.engine, base, tokens: created.tokens };
}

const endBody = (client: string, episode: string) => ({
  client_uuid: client,
  episode_uuid: episode,
  task_id: "t",
  workflow_output: { reward: 1, is_success: true, metadata: { task_id: "t" }, log_metrics: {} },
});

describe("per-token limits on the local server", () => {
  it("refuse a client over its limit with 429 and Retry-After; its ends, its neighbours and the agent carry on", async () => {
    for (let attempt = 0; ; attempt++) {
      const e = await rollingEngine(2);
      const client = e.tokens.client!;
      const held = await send(e.base, "/claim_episode", client, { client_uuid: "c", discard_episode_timeout: 600 });
      const other = await send(e.base, "/claim_episode", client, { client_uuid: "c", discard_episode_timeout: 600 });
      const answers: Answer[] = [];
      // Two claims made, CLIENT_LIMIT - 2 more fit in the window.
      for (let i = 0; i < CLIENT_LIMIT - 1; i++) answers.push(await send(e.base, "/get_engine_status", client));
      const refused = answers.filter((a) => a.status === 429);
      // Seven requests span a window's end only rarely; then the next engine tries again.
      if (refused.length === 0 && attempt < 3) continue;
      expect(answers.slice(0, CLIENT_LIMIT - 2).map((a) => a.status)).toEqual(Array(CLIENT_LIMIT - 2).fill(200));
      expect(refused[0]).toMatchObject({ status: 429, retryAfter: String(periodSeconds), json: { error: "rate_limited" } });
      expect((await send(e.base, "/claim_episode", client, { client_uuid: "c", discard_episode_timeout: 600 })).status).toBe(429);
      expect(await send(e.base, "/end_episode", client, endBody("c", String(held.json["episode_uuid"])))).toMatchObject({ status: 200, json: { success: true } });
      // Its path with a trailing slash (a Python client's base URL) is the same route, counted apart as well.
      expect(await send(e.base, "/end_episode/", client, endBody("c", String(other.json["episode_uuid"])))).toMatchObject({ status: 200, json: { success: true } });
      for (const role of ["operator", "viewer", "trainer"] as const) expect((await send(e.base, "/get_engine_status", e.tokens[role]!)).status).toBe(200);
      expect((await send(e.base, "/agent/commands?wait=0", e.tokens.trainer!)).status).toBe(200);
      expect((await send(e.base, "/get_engine_status", ADMIN)).status).toBe(200);
      return;
    }
  });

  it("slow down an AgentJet client rather than fail its episodes", async () => {
    const episodes = CLIENT_LIMIT + 3;
    const e = await rollingEngine(episodes);
    const client = e.tokens.client!;
    // The client's clock: AgentJet's waits are counted on it in full. The limiter's window runs on
    // the wall clock, and a 15 s wait outlasts any 10 s window, so where AgentJet would wait 15 s
    // the test waits for the current window to end, which is what the retry after 15 s would see.
    let clock = 0;
    const wait = async (seconds: number, limited: boolean) => {
      clock += seconds;
      if (limited) {
        const period = periodSeconds * 1000;
        await new Promise((r) => setTimeout(r, period - (Date.now() % period) + 50));
      }
    };
    let refusals = 0;
    const ended: string[] = [];
    // The claims are counted in the current window: begun in its last second they could be split
    // between two and none refused (a CI run saw that), so they begin in a fresh window then.
    const period = periodSeconds * 1000;
    if (period - (Date.now() % period) < 1000) await new Promise((r) => setTimeout(r, period - (Date.now() % period) + 50));
    while (ended.length < episodes) {
      // begin_episode: claim, retrying as SwarmClient does.
      const claim = await send(e.base, "/claim_episode", client, { client_uuid: "agentjet-1", episode_type: "train", discard_episode_timeout: 600 });
      if (claim.status !== 200) {
        expect(claim.status).toBe(429);
        refusals++;
        await wait(15, true);
        continue;
      }
      if (claim.json["success"] !== true) {
        await wait(String(claim.json["fail_cause"]).includes(NO_EPISODES) ? 2 : 15, false);
        continue;
      }
      const episode = String(claim.json["episode_uuid"]);
      clock += 1; // the rollout itself
      // end_episode: counted apart from claims, so a client held back still hands in what it ran.
      const end = await send(e.base, "/end_episode", client, endBody("agentjet-1", episode));
      expect([end.status, end.json["success"]]).toEqual([200, true]);
      ended.push(episode);
    }

    expect(new Set(ended).size).toBe(episodes);
    expect(refusals).toBeGreaterThan(0);
    expect(clock).toBeGreaterThanOrEqual(episodes + 15 * refusals);
    const overview = await send(e.base, "/overview", e.tokens.viewer!);
    expect(overview.json).toMatchObject({ episodes: { registered: 0, claimed: 0, resetting: 0 } });
  }, 60_000);

  it("hold back the address of a caller that makes up a token per request, and not the tokens its engine accepted", async () => {
    const e = await rollingEngine(0);
    const viewer = e.tokens.viewer!;
    const from = "203.0.113.5";
    expect((await send(e.base, "/get_engine_status", viewer, undefined, from)).status).toBe(200);
    const answers: Answer[] = [];
    for (let i = 0; i <= 2 * UNVERIFIED_LIMIT && !answers.some((a) => a.status === 429); i++) answers.push(await send(e.base, "/get_engine_status", `rx_client_made-up-${i}`, undefined, from));
    expect(answers.at(-1)).toMatchObject({ status: 429, retryAfter: String(periodSeconds), json: { error: "rate_limited" } });
    expect(answers.slice(0, -1).map((a) => a.json["error"])).toEqual(answers.slice(0, -1).map(() => "invalid_token"));
    expect((await send(e.base, "/get_engine_status", viewer, undefined, from)).status).toBe(200);
    // Without Cloudflare's address (the local server's own clients) nothing is counted by address.
    expect((await send(e.base, "/get_engine_status", "rx_client_made-up-local")).json["error"]).toBe("invalid_token");
  });
});
