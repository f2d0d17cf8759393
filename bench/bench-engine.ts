/**
 * One exchange on Miniflare, served from a checkout's wrangler.toml with state in memory, and
 * one fresh engine in it: what the A/B tools need of each side they compare.
 */
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { AdminClient } from "../src/client";
import { REPO_ROOT, startLocalExchange } from "../scripts/local/exchange";

export type BenchEngine = { origin: string; baseUrl: string; clientToken: string; trainerToken: string; operatorToken: string; stop(): Promise<void> };

/** `prefix` names the admin token and the engine, so a run's engines are told apart in logs. */
export async function startBenchEngine(prefix: string, checkout: string = REPO_ROOT): Promise<BenchEngine> {
  const adminToken = `${prefix}-${randomBytes(12).toString("hex")}`;
  const ex = await startLocalExchange({
    configPath: join(checkout, "wrangler.toml"),
    port: 0,
    persistDir: null,
    adminToken,
    claimKeySecret: randomBytes(32).toString("hex"),
  });
  try {
    const created = await new AdminClient({ origin: ex.url, adminToken }).createEngine(`${prefix}-${randomBytes(3).toString("hex")}`);
    return {
      origin: ex.url,
      baseUrl: `${ex.url}/e/${created.engine}`,
      clientToken: created.tokens.client!,
      trainerToken: created.tokens.trainer!,
      operatorToken: created.tokens.operator!,
      stop: () => ex.stop(),
    };
  } catch (e) {
    await ex.stop();
    throw e;
  }
}
