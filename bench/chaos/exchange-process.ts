/**
 * The local exchange as a process of its own, for bench/chaos/run.ts to SIGKILL: Miniflare and
 * its workerd child, state on disk. Prints `ready <origin>` once it serves.
 *
 * Settings come from the environment: CHAOS_PORT, CHAOS_STATE_DIR, CHAOS_ADMIN_TOKEN,
 * CHAOS_CLAIM_KEY_SECRET and CHAOS_COMMAND_LEASE_SECONDS.
 */
import { serveExchange } from "../serve/exchange";

function need(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

const exchange = await serveExchange({
  port: Number(need("CHAOS_PORT")),
  persistDir: need("CHAOS_STATE_DIR"),
  adminToken: need("CHAOS_ADMIN_TOKEN"),
  claimKeySecret: need("CHAOS_CLAIM_KEY_SECRET"),
  vars: { COMMAND_LEASE_SECONDS: need("CHAOS_COMMAND_LEASE_SECONDS") },
  log: (line) => void process.stderr.write(`${line}\n`),
});
process.stdout.write(`ready ${exchange.url}\n`);
