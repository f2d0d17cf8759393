/**
 * The exchange as every benchmark serves it: the real Worker on Miniflare, started by
 * scripts/local/exchange.ts as `npm start` starts it (wrangler's bundle, D1 migrations applied,
 * clients straight into the Worker's socket), with state in memory unless `persistDir` says
 * where, and engines made through the admin API.
 */
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { AdminClient, EngineClient, type EngineClientOptions } from "../../src/client";
import type { Role } from "../../src/protocol/admin";
import { REPO_ROOT, startLocalExchange } from "../../scripts/local/exchange";
import type { EngineTokens } from "./reference";
import { withWorkerdPids, type Served } from "./served";

/** One engine: its name, base URL and a token per role, and a typed client for a role. */
export type EngineAccess = EngineTokens & {
  name: string;
  tokens: Record<Role, string>;
  operatorToken: string;
  as(role: Role, fetch?: EngineClientOptions["fetch"]): EngineClient;
};

export type ExchangeTarget = Served & {
  adminToken: string;
  /** A fresh engine named `<prefix>-<6 hex digits>`. */
  newEngine(prefix: string): Promise<EngineAccess>;
};

/** Creates the engine `name` on the exchange at `origin` (which may run in another process). */
export async function createEngine(origin: string, adminToken: string, name: string): Promise<EngineAccess> {
  const created = await new AdminClient({ origin, adminToken }).createEngine(name);
  const baseUrl = `${origin}/e/${created.engine}`;
  const tokens = created.tokens;
  return {
    name: created.engine,
    baseUrl,
    tokens,
    clientToken: tokens.client,
    trainerToken: tokens.trainer,
    operatorToken: tokens.operator,
    as: (role, fetch) => new EngineClient({ baseUrl, token: tokens[role], ...(fetch ? { fetch } : {}) }),
  };
}

export async function serveExchange(
  o: {
    /** Names the admin token, so a run's exchanges are told apart in logs. */
    prefix?: string;
    /** The checkout whose wrangler.toml (and so whose Worker) is served: this one by default (bench:ab serves another too). */
    checkout?: string;
    /** Where D1 and the Durable Objects keep their state; null (the default) keeps it in memory. */
    persistDir?: string | null;
    /** 0 (the default) picks a free port. */
    port?: number;
    vars?: Record<string, string>;
    adminToken?: string;
    claimKeySecret?: string;
    log?: (line: string) => void;
    inspectorPort?: number;
  } = {},
): Promise<ExchangeTarget> {
  const adminToken = o.adminToken ?? `${o.prefix ?? "bench"}-admin-${randomBytes(12).toString("hex")}`;
  const ex = await withWorkerdPids(() =>
    startLocalExchange({
      configPath: join(o.checkout ?? REPO_ROOT, "wrangler.toml"),
      port: o.port ?? 0,
      persistDir: o.persistDir ?? null,
      adminToken,
      claimKeySecret: o.claimKeySecret ?? randomBytes(32).toString("hex"),
      ...(o.vars ? { vars: o.vars } : {}),
      ...(o.log ? { log: o.log } : {}),
      ...(o.inspectorPort !== undefined ? { inspectorPort: o.inspectorPort } : {}),
    }),
  );
  return {
    ...ex,
    adminToken,
    newEngine: (prefix) => createEngine(ex.url, adminToken, `${prefix}-${randomBytes(3).toString("hex")}`),
  };
}

/** An exchange with one fresh engine in it, `<prefix>-<hex>`: what the A/B tools need of each side. */
export async function serveEngine(o: Parameters<typeof serveExchange>[0] & { prefix: string }): Promise<Served & EngineAccess> {
  const ex = await serveExchange(o);
  try {
    return { ...(await ex.newEngine(o.prefix)), url: ex.url, pids: ex.pids, stop: ex.stop };
  } catch (e) {
    await ex.stop();
    throw e;
  }
}
