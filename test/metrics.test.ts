/**
 * `GET /e/<engine>/metrics`: the engine's overview and buffer figures in Prometheus's text
 * format, read here by an independent parser of that format (parse-prometheus-text-format, a
 * port of the Python client's parser), through the Worker, against the real engine and D1.
 */
import { createExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { describe, expect, it } from "vitest";
import { RELAY_OWN_FAILURE_KINDS } from "../src/protocol/relay";
import { beforeEngineRead } from "../src/relay/claim-gates";
import { serveRelay } from "../src/relay/relay-routes";
import { createEngine, ORIGIN, raw, rollingWith, withGateway, workerFetch, type TestEngine } from "./support/harness";

type Family = ReturnType<typeof parsePrometheusTextFormat>[number];

async function scrape(e: TestEngine, role: "viewer" | "client" | "trainer" = "viewer"): Promise<{ families: Map<string, Family>; type: string | null }> {
  const res = await workerFetch(`${ORIGIN}/e/${e.name}/metrics`, { headers: { authorization: `Bearer ${e.tokens[role]}` } });
  expect(res.status).toBe(200);
  const families = parsePrometheusTextFormat(await res.text());
  return { families: new Map(families.map((f) => [f.name, f])), type: res.headers.get("content-type") };
}

/** The value of `name`'s sample whose labels include `labels`, as a number; undefined without one. */
function value(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number | undefined {
  const sample = families.get(name)?.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
  return sample === undefined ? undefined : Number(sample.value);
}

/** A chat call of the claim whose key is `key`, relayed over `network` (the gateway's side): its status. */
async function relayStatus(key: string, network: Fetcher): Promise<number> {
  const req = new Request(`${ORIGIN}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }),
  });
  return (await serveRelay(req, { ...env, RELAY_NETWORK: network }, createExecutionContext()))!.status;
}

describe("the engine's metrics for Prometheus", () => {
  it("says what the overview says, each sample labelled with the engine, in the text format a scraper reads", async () => {
    const e = await createEngine();
    await rollingWith(e, 3, { step: 7 });
    await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const { families, type } = await scrape(e);
    expect(type).toBe("text/plain; version=0.0.4; charset=utf-8");
    const o = await e.as("viewer").overview();

    const statuses = families.get("rx_engine_status")?.metrics ?? [];
    expect(statuses.filter((m) => m.value === "1").map((m) => m.labels?.["status"])).toEqual(["ENGINE.ROLLING"]);
    expect(statuses.map((m) => m.labels?.["status"])).toContain("ENGINE.OFFLINE");
    // Times in seconds, as Prometheus's own (time() - x is an age in seconds).
    expect(o.engine_status_since).not.toBeNull();
    expect(value(families, "rx_engine_status_since_timestamp_seconds")).toBe((o.engine_status_since ?? 0) / 1000);
    expect(value(families, "rx_global_step")).toBe(7);
    expect(value(families, "rx_episodes", { state: "claimed" })).toBe(1);
    expect(value(families, "rx_episodes", { state: "registered" })).toBe(o.episodes.registered);
    expect(value(families, "rx_pending_commands")).toBe(o.pending_commands);
    expect(value(families, "rx_ledger_claims_to_gather")).toBe(o.ledger.claims_to_gather);
    expect(value(families, "rx_ledger_engine_requests_total")).toBe(o.ledger.engine_requests);
    expect(value(families, "rx_agent_connected")).toBe(0);
    expect(value(families, "rx_storage_used_bytes")).toBe(o.storage.used_bytes);
    expect(value(families, "rx_storage_used_bytes")).toBeGreaterThan(0);
    expect(value(families, "rx_atropos_registered")).toBe(0);
    expect(families.get("rx_relay_calls_total")?.type).toBe("COUNTER");
    for (const f of families.values()) {
      expect(f.help.length).toBeGreaterThan(0);
      for (const m of f.metrics) expect(m.labels?.["engine"]).toBe(e.name);
    }
  });

  it("says what the agent's last heartbeat said of its recorded calls, and nothing of them before it reports", async () => {
    const e = await createEngine();
    const agent = { agent_id: "a", host: "gpu-1", pid: 1, trainer: { state: "running" as const } };
    const before = (await scrape(e)).families;
    expect([...before.keys()].filter((k) => k.startsWith("rx_agent_ledger"))).toEqual([]);
    const ledger = { queued_calls: 12, queued_bytes: 40_960, oldest_queued_ms: 1_500, sent_calls: 3_402, duplicate_calls: 2, dropped_calls: 5, refused_calls: 3, unrecorded_calls: 1 };
    await e.as("trainer").heartbeat({ ...agent, ledger });
    const { families } = await scrape(e);
    expect(value(families, "rx_agent_ledger_queued_calls")).toBe(12);
    expect(value(families, "rx_agent_ledger_queued_bytes")).toBe(40_960);
    expect(value(families, "rx_agent_ledger_oldest_queued_seconds")).toBe(1.5);
    expect(families.get("rx_agent_ledger_calls_total")?.type).toBe("COUNTER");
    const outcomes = Object.fromEntries((families.get("rx_agent_ledger_calls_total")?.metrics ?? []).map((m) => [m.labels?.["outcome"], Number(m.value)]));
    expect(outcomes).toEqual({ sent: 3_402, duplicate: 2, dropped: 5, refused: 3, unrecorded: 1 });
    // Nothing waiting: the oldest's wait is absent, not 0.
    await e.as("trainer").heartbeat({ ...agent, ledger: { ...ledger, queued_calls: 0, queued_bytes: 0, oldest_queued_ms: null } });
    const after = (await scrape(e)).families;
    expect(value(after, "rx_agent_ledger_queued_calls")).toBe(0);
    expect(after.has("rx_agent_ledger_oldest_queued_seconds")).toBe(false);
  });

  it("counts relayed calls' failures by status and code, whatever characters the upstream's code holds", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await withGateway(e);
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const code = 'quota "exceeded"\\ for\nteam';
    const refusing = {
      fetch: async (): Promise<Response> => Response.json({ error: { message: "no", type: "invalid_request_error", param: null, code } }, { status: 400 }),
      connect: () => {
        throw new Error("the relay opens no sockets");
      },
    } as unknown as Fetcher;
    for (let i = 0; i < 2; i++) expect(await relayStatus(c.openai_api_key, refusing)).toBe(400);
    await beforeEngineRead(env, e.name);
    const { families } = await scrape(e);
    // The upstream's own code shows once it came; the exchange's own kinds are there from 0, so that rate() sees their first burst.
    const own = RELAY_OWN_FAILURE_KINDS.map((k) => ({ value: "0", labels: { engine: e.name, status: k.slice(0, 3), code: k.slice(4) } }));
    expect(families.get("rx_relay_failures_total")?.metrics).toEqual([...own, { value: "2", labels: { engine: e.name, status: "400", code } }]);
    expect(value(families, "rx_relay_calls_total")).toBe(2);
  });

  it("counts a failure of the exchange's own on the series it showed at 0, not on a second one", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await withGateway(e);
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const before = (await scrape(e)).families.get("rx_relay_failures_total")?.metrics.filter((m) => m.labels?.["code"] === "gateway_unreachable");
    expect(before).toEqual([{ value: "0", labels: { engine: e.name, status: "502", code: "gateway_unreachable" } }]);
    const unreachable = {
      fetch: async (): Promise<Response> => {
        throw new Error("connection refused");
      },
      connect: () => {
        throw new Error("the relay opens no sockets");
      },
    } as unknown as Fetcher;
    expect(await relayStatus(c.openai_api_key, unreachable)).toBe(502);
    await beforeEngineRead(env, e.name);
    const after = (await scrape(e)).families.get("rx_relay_failures_total")?.metrics.filter((m) => m.labels?.["code"] === "gateway_unreachable");
    expect(after).toEqual([{ value: "1", labels: { engine: e.name, status: "502", code: "gateway_unreachable" } }]);
  });

  it("shows the buffer's groups and refusals as its health does", async () => {
    const e = await createEngine();
    const steps = [0, 1].map((i) => ({ session_id: `s${i}`, group_id: "g", step_index: 0, is_session_completed: true, reward: 1, messages: [] }));
    const posted = await raw(`/e/${e.name}/steps`, { token: e.tokens.trainer, body: JSON.stringify({ steps }) });
    expect(posted.status).toBe(200);
    const { families } = await scrape(e);
    const health = await raw(`/e/${e.name}/health`, { token: e.tokens.viewer });
    const buffer = (health.json as { buffer: { pending_groups: number; ready_groups: number; stored_bytes: number } }).buffer;
    expect(value(families, "rx_buffer_groups", { state: "pending" })).toBe(buffer.pending_groups);
    expect(value(families, "rx_buffer_groups", { state: "ready" })).toBe(buffer.ready_groups);
    expect(buffer.pending_groups + buffer.ready_groups).toBeGreaterThan(0);
    expect(value(families, "rx_buffer_stored_bytes")).toBe(buffer.stored_bytes);
    expect(value(families, "rx_buffer_refusals_total", { reason: "buffer_full" })).toBe(0);
  });

  it("is every role's to read, and no one's without a token of the engine", async () => {
    const e = await createEngine();
    const other = await createEngine();
    for (const role of ["client", "trainer"] as const) expect((await scrape(e, role)).families.size).toBeGreaterThan(0);
    expect((await raw(`/e/${e.name}/metrics`)).status).toBe(401);
    const foreign = await raw(`/e/${e.name}/metrics`, { token: other.tokens.viewer });
    expect(foreign.status).toBe(401);
    expect(foreign.text).not.toContain("rx_");
  });

  it("is in the OpenAPI document as text", async () => {
    const doc = (await (await workerFetch(`${ORIGIN}/openapi.json`)).json()) as { paths: Record<string, { get?: { responses: Record<string, { content?: Record<string, unknown> }> } }> };
    const op = doc.paths["/e/{engine}/metrics"]?.get;
    expect(Object.keys(op?.responses["200"]?.content ?? {})).toEqual(["text/plain; version=0.0.4; charset=utf-8"]);
  });
});
