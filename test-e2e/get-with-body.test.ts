/**
 * GET requests that carry a body, over real HTTP (the Worker as `npm start` serves it): curl
 * `-X GET -d` and Python's requests send them, and Atropos's BaseEnv asks /status-env that way.
 * workerd's fetch cannot make one, so the worker tests cannot. The router checks every body
 * against the size limit; a GET's must still reach its route (docs/atropos.md) or be ignored
 * (every other GET), never turn into a 500.
 */
import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminClient } from "../src/client";
import { headersOnly } from "../local-agent/test/support/headers-only";
import { startLocalExchange, type LocalExchange } from "../scripts/local/exchange";

const ADMIN = "get-body-e2e-admin";
let exchange: LocalExchange;
let tokens: Record<string, string>;
let base: string;

/** A request with a body whatever its method, as curl -X GET -d sends it. */
function send(method: string, url: string, body: string | null, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const sized = body === null ? {} : { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) };
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers: { ...headers, ...sized } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on("error", reject);
    if (body !== null) req.write(body);
    req.end();
  });
}

const bearer = (role: string): Record<string, string> => ({ authorization: `Bearer ${tokens[role]}` });

beforeAll(async () => {
  exchange = await startLocalExchange({ port: 0, persistDir: null, adminToken: ADMIN, claimKeySecret: "get-body-e2e-claim-secret" });
  const created = await new AdminClient({ origin: exchange.url, adminToken: ADMIN }).createEngine("get-body");
  tokens = created.tokens;
  base = `${exchange.url}/e/${created.engine}`;
}, 120_000);

afterAll(async () => {
  await exchange?.stop();
});

describe("a GET with a body", () => {
  it("reaches Atropos's /status-env as its input, as BaseEnv sends it", async () => {
    const a = `${base}/atropos`;
    const reg = { wandb_group: "g", wandb_project: "p", batch_size: 4, max_token_len: 512, checkpoint_dir: "/tmp", save_checkpoint_interval: 10, starting_step: 0, num_steps: 100 };
    expect((await send("POST", `${a}/register`, JSON.stringify(reg), bearer("trainer"))).status).toBe(200);
    expect((await send("GET", `${a}/batch`, null, bearer("trainer"))).status).toBe(200);
    const env = await send("POST", `${a}/register-env`, JSON.stringify({ max_token_length: 512, desired_name: "e", weight: 1, group_size: 2 }), bearer("client"));
    expect(JSON.parse(env.text)).toMatchObject({ status: "success", env_id: 0 });

    const viaQuery = await send("GET", `${a}/status-env?env_id=0`, null, bearer("client"));
    const viaBody = await send("GET", `${a}/status-env`, JSON.stringify({ env_id: 0 }), bearer("client"));
    expect(viaBody.status).toBe(200);
    expect(JSON.parse(viaBody.text)).toEqual(JSON.parse(viaQuery.text));
    expect(JSON.parse(viaBody.text)).toMatchObject({ current_step: 0, self_queue_size: 0 });
  }, 60_000);

  it("is answered as without it on the routes the router serves and on the engine API", async () => {
    for (const [url, headers] of [
      [`${base}/get_engine_status`, bearer("viewer")],
      [`${base}/atropos/status`, bearer("viewer")],
      [`${base}/trajectories`, bearer("viewer")],
      [`${exchange.url}/openapi.json`, {}],
      [`${exchange.url}/admin/engines`, { authorization: `Bearer ${ADMIN}` }],
    ] as const) {
      const r = await send("GET", url, "{}", headers);
      expect({ url, status: r.status }).toEqual({ url, status: 200 });
    }
  }, 60_000);

  it("over the size limit is refused 413 like any other body, unread", async () => {
    const r = await oversizedGet(`${base}/atropos/status`, bearer("viewer"));
    expect(r.status).toBe(413);
    expect(JSON.parse(r.text)).toMatchObject({ error: "payload_too_large" });
  }, 60_000);

  it("over the size limit is answered as the document says: a 413 where it lists one, else as without it", async () => {
    // The router refuses every oversized body before its route, a GET's too; the document listed
    // that 413 on its admin DELETEs only. The engine API reads no GET's body.
    type Doc = { paths: Record<string, Record<string, { responses: Record<string, unknown> }>> };
    const doc = (await (await fetch(`${exchange.url}/openapi.json`)).json()) as Doc;
    const admin = { authorization: `Bearer ${ADMIN}` };
    for (const [docPath, url, headers] of [
      ["/admin/engines", `${exchange.url}/admin/engines`, admin],
      ["/admin/engines/{name}/tokens", `${exchange.url}/admin/engines/get-body/tokens`, admin],
      ["/admin/archives", `${exchange.url}/admin/archives`, admin],
      ["/e/{engine}/runs/environments", `${base}/runs/environments`, bearer("viewer")],
      ["/e/{engine}/trajectories", `${base}/trajectories`, bearer("viewer")],
      ["/e/{engine}/atropos/status", `${base}/atropos/status`, bearer("viewer")],
      ["/e/{engine}/get_engine_status", `${base}/get_engine_status`, bearer("viewer")],
    ] as const) {
      const r = await oversizedGet(url, headers);
      const listed = Object.keys(doc.paths[docPath]?.["get"]?.responses ?? {});
      expect({ docPath, status: r.status, listed: listed.includes("413") }).toEqual({ docPath, status: r.status === 413 ? 413 : 200, listed: r.status === 413 });
    }
  }, 60_000);
});

/** A GET that declares a 5 MB body and sends only its headers (headersOnly). */
const oversizedGet = (url: string, headers: Record<string, string>) => headersOnly(url, "GET", headers, 5 * 1024 * 1024);
