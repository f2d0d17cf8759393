/**
 * `npm start`: the exchange on this machine, ready to use.
 *
 * Creates `.dev.vars` (random ADMIN_TOKEN and CLAIM_KEY_SECRET) if needed, serves the Worker
 * with Miniflare on 127.0.0.1:8787 (PORT overrides) with D1 and Durable Object state kept in
 * `.local/state` (one `npm start` at a time: `.local/state.lock`), makes sure an engine named
 * `default` exists, and prints its base URL and tokens, also written to
 * `.local/credentials.json`. Ctrl-C stops it.
 */
import { join } from "node:path";
import { AdminClient, EngineClient, ExchangeError } from "../src/client";
import { ROLES, type Role } from "../src/protocol/admin";
import { engineBaseUrl, makeCredentials, readCredentials, writeCredentials, type LocalCredentials } from "./local/credentials";
import { ensureDevVars, type LocalSecrets } from "./local/dev-vars";
import { REPO_ROOT, startLocalExchange, type LocalExchange } from "./local/exchange";
import { lockStateDir } from "./local/state-lock";

const ENGINE = "default";
const CONFIG = join(REPO_ROOT, "wrangler.toml");
const STATE_DIR = join(REPO_ROOT, ".local", "state");
const CREDENTIALS = join(REPO_ROOT, ".local", "credentials.json");

const say = (line: string) => console.log(`[start] ${line}`);

/** A port to suggest instead of `port`. */
const otherPort = (port: number) => (port < 65535 ? port + 1 : port - 1);

/** PORT, or 8787 when unset. Set but empty is refused too: port 0 would serve on a port nobody knows. */
function portFromEnv(): number {
  const raw = process.env["PORT"];
  if (raw === undefined) return 8787;
  const port = /^\d{1,5}$/.test(raw) ? Number(raw) : NaN;
  if (!(port >= 1 && port <= 65535)) throw new Error(`PORT must be a port number from 1 to 65535, got '${raw}': e.g. PORT=8788 npm start`);
  return port;
}

/** npm start is configured by PORT alone: an argument (say --port, as wrangler dev takes) is refused, not ignored. */
function refuseArguments(): void {
  const args = process.argv.slice(2);
  if (args.length > 0) throw new Error(`npm start takes no arguments (got '${args.join(" ")}'); the port is set with PORT, e.g. PORT=8788 npm start`);
}

/** A token is still good unless the engine answers 401 (unknown or revoked); every role may read the status. */
async function tokenWorks(baseUrl: string, token: string): Promise<boolean> {
  try {
    await new EngineClient({ baseUrl, token }).getEngineStatus();
    return true;
  } catch (err) {
    if (err instanceof ExchangeError && err.status === 401) return false;
    throw err;
  }
}

/**
 * Repeats a delete of the engine under way. It must be repeated as it began, keeping its history
 * or not (a repeat the other way is refused 409): which, the refusal says.
 */
async function finishDelete(admin: AdminClient): Promise<void> {
  try {
    await admin.deleteEngine(ENGINE, { force: true });
  } catch (err) {
    if (!(err instanceof ExchangeError && err.status === 409 && err.code === "delete_keeps_history")) throw err;
    await admin.deleteEngine(ENGINE, { force: true, keep_history: true });
  }
}

/**
 * The engine's tokens: all new when the engine is created; otherwise the ones saved by an
 * earlier start that still work, and fresh ones (issued through the admin API) for the rest.
 */
async function engineTokens(admin: AdminClient, url: string): Promise<Record<Role, string>> {
  const { engines } = await admin.listEngines();
  const listed = engines.find((e) => e.name === ENGINE);
  if (listed !== undefined && listed.deleting_since !== null) {
    // A delete cut off half-way (docs/operations.md): finished as its user began it, then the engine is made anew.
    say(`engine '${ENGINE}' was being deleted (since ${new Date(listed.deleting_since).toISOString()}); finishing the delete`);
    await finishDelete(admin);
  }
  if (listed === undefined || listed.deleting_since !== null) {
    say(`creating engine '${ENGINE}'`);
    return (await admin.createEngine(ENGINE)).tokens;
  }
  const saved = await readCredentials(CREDENTIALS);
  const baseUrl = engineBaseUrl(url, ENGINE);
  const tokens = {} as Record<Role, string>;
  for (const role of ROLES) {
    const old = saved?.engine === ENGINE ? saved.tokens[role] : undefined;
    if (old && (await tokenWorks(baseUrl, old))) {
      tokens[role] = old;
    } else {
      say(`engine '${ENGINE}' exists; issuing a new ${role} token (${old ? "the saved one no longer works" : `none saved in ${CREDENTIALS}`})`);
      tokens[role] = (await admin.issueToken(ENGINE, role, "npm start")).token;
    }
  }
  return tokens;
}

function printCredentials(c: LocalCredentials): void {
  const width = Math.max(...ROLES.map((r) => r.length));
  const lines = [
    "",
    `Rollout Exchange is running. Engine '${c.engine}':`,
    "",
    `  base URL     ${c.base_url}`,
    `  admin token  ${c.admin_token}   (Authorization: Bearer ..., for ${c.url}/admin/...)`,
    "",
    "  tokens (send as Authorization: Bearer <token>):",
    ...ROLES.map((r) => `    ${r.padEnd(width)}  ${c.tokens[r]}`),
    "",
    "  base URLs with the token in the path (for clients that send no headers, e.g. AgentJet's SwarmClient):",
    ...ROLES.map((r) => `    ${r.padEnd(width)}  ${c.token_urls[r]}`),
    "",
    `  dashboard    ${c.url}/dashboard?engine=${encodeURIComponent(c.engine)}&token=${encodeURIComponent(c.tokens.viewer)}`,
    `  API docs     ${c.url}/docs   (OpenAPI document: ${c.url}/openapi.json)`,
    "",
    `  all of this is in ${CREDENTIALS}`,
    "",
    "Press Ctrl-C to stop.",
  ];
  console.log(lines.join("\n"));
}

/**
 * Ctrl-C (or SIGTERM, or SIGHUP from a closed terminal) ends the process at once: exit hooks
 * (Miniflare's and ours) kill workerd, remove the build directory and the state lock. Without a
 * handler of ours a signal would end the process with no 'exit' event, leaving the lock behind.
 * Miniflare's own stop kills workerd the same way; D1 and Durable Object state is SQLite under
 * .local/state and survives it.
 */
function stopOnSignals(): void {
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.on(signal, () => {
      say(`${signal}: stopped`);
      process.exit(0);
    });
  }
}

const addressInUse = (err: unknown): err is Error => err instanceof Error && (err as { code?: unknown }).code === "ERR_ADDRESS_IN_USE";

/** The exchange on `port`; a taken port is reported with the way npm start takes another (Miniflare's message names a --port it has not). */
async function serve(port: number, secrets: LocalSecrets): Promise<LocalExchange> {
  try {
    return await startLocalExchange({
      port,
      persistDir: STATE_DIR,
      adminToken: secrets.ADMIN_TOKEN,
      claimKeySecret: secrets.CLAIM_KEY_SECRET,
      rateLimits: true,
      log: say,
    });
  } catch (err) {
    if (!addressInUse(err)) throw err;
    throw new Error(`port ${port} on 127.0.0.1 is taken (Address already in use): set PORT to another, e.g. PORT=${otherPort(port)} npm start`);
  }
}

async function main(): Promise<void> {
  stopOnSignals();
  say(`Node ${process.versions.node} (${process.execPath})`);
  refuseArguments();
  const port = portFromEnv();
  const lock = lockStateDir(STATE_DIR);
  if (lock.tookOverFrom !== null) say(`took over ${lock.path}: its npm start (pid ${lock.tookOverFrom}) is gone`);
  const { path: devVars, secrets, created } = await ensureDevVars(CONFIG);
  say(created.length ? `wrote new ${created.join(" and ")} to ${devVars}` : `using the secrets in ${devVars}`);

  say(`starting the exchange on 127.0.0.1:${port} (state in ${STATE_DIR})`);
  const exchange = await serve(port, secrets);

  try {
    const admin = new AdminClient({ origin: exchange.url, adminToken: secrets.ADMIN_TOKEN });
    const tokens = await engineTokens(admin, exchange.url);
    const creds = makeCredentials(exchange.url, ENGINE, secrets.ADMIN_TOKEN, tokens);
    await writeCredentials(CREDENTIALS, creds);
    printCredentials(creds);
  } catch (err) {
    await exchange.stop();
    throw new Error(`${err instanceof Error ? err.message : String(err)} (to start from scratch, delete ${join(REPO_ROOT, ".local")})`);
  }
}

main().catch((err: unknown) => {
  console.error(`[start] failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
