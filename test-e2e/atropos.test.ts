/**
 * Atropos's API over real HTTP (the Worker as `npm start` serves it), driven by Python's
 * `requests` as Atropos's own API tests drive run-api: gzip bodies, gzipped answers, and the GET
 * with a JSON body that BaseEnv sends to /status-env, which workerd's Request cannot make in the
 * worker tests.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminClient } from "../src/client";
import { startLocalExchange, type LocalExchange } from "../scripts/local/exchange";

const ADMIN = "atropos-e2e-admin";
let exchange: LocalExchange;
let tokens: Record<string, string>;
let engine: string;

beforeAll(async () => {
  exchange = await startLocalExchange({ port: 0, persistDir: null, adminToken: ADMIN, claimKeySecret: "atropos-e2e-claim-secret" });
  const created = await new AdminClient({ origin: exchange.url, adminToken: ADMIN }).createEngine("atropos-e2e");
  engine = created.engine;
  tokens = created.tokens;
}, 120_000);

afterAll(async () => {
  await exchange?.stop();
});

describe("Atropos's API over HTTP", () => {
  it("passes Atropos's own API checks with Python's requests and the token in the URL", async () => {
    const url = (role: string) => `${exchange.url}/e/${engine}/t/${tokens[role]}/atropos`;
    const script = fileURLToPath(new URL("./fixtures/atropos_client.py", import.meta.url));
    const { stdout } = await promisify(execFile)("python3", [script, url("trainer"), url("client")], { timeout: 60_000 });
    expect(stdout.trim()).toBe("ok");
  }, 90_000);
});
