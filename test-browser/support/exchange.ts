/** The real Worker served locally by Miniflare (in-memory state) for one test file. */
import { startLocalExchange, type LocalExchange } from "../../scripts/local/exchange";
import { AdminClient, EngineClient, RunsClient } from "../../src/client";
import type { Role } from "../../src/protocol/admin";

export const ADMIN_TOKEN = "browser-test-admin-token";

export type TestExchange = LocalExchange & { admin: AdminClient };

export async function startExchange(): Promise<TestExchange> {
  const ex = await startLocalExchange({
    port: 0,
    persistDir: null,
    adminToken: ADMIN_TOKEN,
    claimKeySecret: "browser-test-claim-key-secret",
    // RX_TEST_LOG=1 shows Miniflare's and the Worker's output when a test needs explaining.
    ...(process.env["RX_TEST_LOG"] ? { log: (line: string) => console.log(line) } : {}),
  });
  return { ...ex, admin: new AdminClient({ origin: ex.url, adminToken: ADMIN_TOKEN }) };
}

export type TestEngine = { name: string; tokens: Record<Role, string>; as(role: Role): EngineClient; runsAs(role: Role): RunsClient };

export async function createEngine(ex: TestExchange, name: string): Promise<TestEngine> {
  const { tokens } = await ex.admin.createEngine(name);
  const baseUrl = `${ex.url}/e/${name}`;
  return {
    name,
    tokens,
    as: (role) => new EngineClient({ baseUrl, token: tokens[role] }),
    runsAs: (role) => new RunsClient({ baseUrl, token: tokens[role] }),
  };
}
