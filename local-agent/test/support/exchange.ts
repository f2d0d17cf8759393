/**
 * The real Worker, served locally by scripts/local/exchange.ts (Miniflare, D1 migrations
 * applied), with a fresh engine per test and typed clients for each role.
 *
 * One thing differs from `npm start`: COMMAND_LEASE_SECONDS is short, so redelivery of
 * unacked commands (the engine's side of the agent's crash recovery) happens within a test
 * instead of after 60 s. It is set through a generated copy of wrangler.toml (the launcher's
 * configPath option), since the launcher takes no extra bindings (see local-agent/NEEDS.md).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import { AdminClient, EngineClient } from "../../../src/client";
import { REPO_ROOT, startLocalExchange, type LocalExchange } from "../../../scripts/local/exchange";

export const ADMIN_TOKEN = "agent-test-admin-token";

export type TestEngine = {
  name: string;
  /** `<origin>/e/<name>` */
  baseUrl: string;
  tokens: Record<"operator" | "trainer" | "client" | "viewer", string>;
  operator: EngineClient;
  trainer: EngineClient;
  client: EngineClient;
  viewer: EngineClient;
};

export type TestExchange = LocalExchange & {
  newEngine(): Promise<TestEngine>;
  /** Deletes the engine (forced: its agent may have beaten lately) and makes it again under its name: a new incarnation, with new tokens. */
  remakeEngine(engine: TestEngine): Promise<TestEngine>;
};

export async function startTestExchange(opts: { commandLeaseSeconds?: number; log?: (line: string) => void } = {}): Promise<TestExchange> {
  const dir = mkdtempSync(join(tmpdir(), "rollout-agent-worker-"));
  let toml = readFileSync(join(REPO_ROOT, "wrangler.toml"), "utf8")
    .replace(/^main\s*=.*$/m, `main = ${JSON.stringify(join(REPO_ROOT, "src", "index.ts"))}`)
    .replace(/^migrations_dir\s*=.*$/m, `migrations_dir = ${JSON.stringify(join(REPO_ROOT, "migrations"))}`);
  const lease = `COMMAND_LEASE_SECONDS = "${opts.commandLeaseSeconds ?? 60}"`;
  toml = /^\[vars\]\s*$/m.test(toml) ? toml.replace(/^\[vars\]\s*$/m, `[vars]\n${lease}`) : `${toml}\n[vars]\n${lease}\n`;
  writeFileSync(join(dir, "wrangler.toml"), toml);

  let ex: LocalExchange;
  try {
    ex = await startLocalExchange({ port: 0, persistDir: null, adminToken: ADMIN_TOKEN, claimKeySecret: "agent-test-claim-secret", configPath: join(dir, "wrangler.toml"), log: opts.log });
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  const admin = new AdminClient({ origin: ex.url, adminToken: ADMIN_TOKEN });
  const create = async (name: string): Promise<TestEngine> => {
    const created = await admin.createEngine(name);
    const tokens = created.tokens as TestEngine["tokens"];
    const baseUrl = `${ex.url}/e/${name}`;
    const client = (role: keyof TestEngine["tokens"]) => new EngineClient({ baseUrl, token: tokens[role] });
    return { name, baseUrl, tokens, operator: client("operator"), trainer: client("trainer"), client: client("client"), viewer: client("viewer") };
  };
  return {
    url: ex.url,
    stop: async () => {
      await ex.stop();
      rmSync(dir, { recursive: true, force: true });
    },
    newEngine: () => create(`e-${randomUUID().slice(0, 8)}`),
    remakeEngine: async (engine) => {
      await admin.deleteEngine(engine.name, { force: true });
      return create(engine.name);
    },
  };
}
