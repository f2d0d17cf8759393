/** The real Worker served locally by Miniflare (in-memory state) for one test file. */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { REPO_ROOT, startLocalExchange, type LocalExchange, type LocalExchangeOptions } from "../../scripts/local/exchange";
import { AdminClient, EngineClient } from "../../src/client";
import type { Role } from "../../src/protocol/admin";

export const ADMIN_TOKEN = "browser-test-admin-token";

export type TestExchange = LocalExchange & { admin: AdminClient };

/**
 * workerd refuses a main module that exports anything but handlers and classes, and
 * src/index.ts currently also exports MAX_BODY_BYTES. Until that export goes, the same Worker
 * is served through an entry that re-exports only its handler and Durable Object class.
 */
async function handlersOnlyConfig(dir: string): Promise<string> {
  await writeFile(join(dir, "entry.ts"), `export { default, EngineObject } from ${JSON.stringify(join(REPO_ROOT, "src", "index.ts"))};\n`);
  const toml = (await readFile(join(REPO_ROOT, "wrangler.toml"), "utf8"))
    .replace(/^main\s*=.*$/m, 'main = "entry.ts"')
    .replace(/^migrations_dir\s*=.*$/m, `migrations_dir = ${JSON.stringify(join(REPO_ROOT, "migrations"))}`);
  await writeFile(join(dir, "wrangler.toml"), toml);
  return join(dir, "wrangler.toml");
}

export async function startExchange(): Promise<TestExchange> {
  const opts: LocalExchangeOptions = {
    port: 0,
    persistDir: null,
    adminToken: ADMIN_TOKEN,
    claimKeySecret: "browser-test-claim-key-secret",
    ...(process.env["RX_TEST_LOG"] ? { log: (line: string) => console.log(line) } : {}),
  };
  const dir = await mkdtemp(join(tmpdir(), "rx-browser-worker-"));
  let ex: LocalExchange;
  try {
    ex = await startLocalExchange(opts).catch(async (e: unknown) => {
      if (!String(e).includes("Incorrect type for map entry")) throw e;
      return startLocalExchange({ ...opts, configPath: await handlersOnlyConfig(dir) });
    });
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    url: ex.url,
    stop: async () => {
      await ex.stop();
      await rm(dir, { recursive: true, force: true });
    },
    admin: new AdminClient({ origin: ex.url, adminToken: ADMIN_TOKEN }),
  };
}

export type TestEngine = { name: string; tokens: Record<Role, string>; as(role: Role): EngineClient };

export async function createEngine(ex: TestExchange, name: string): Promise<TestEngine> {
  const { tokens } = await ex.admin.createEngine(name);
  return { name, tokens, as: (role) => new EngineClient({ baseUrl: `${ex.url}/e/${name}`, token: tokens[role] }) };
}
