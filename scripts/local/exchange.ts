/**
 * Serves the real Worker locally with Miniflare, directly: no `wrangler dev` proxy in front,
 * so what a client measures is workerd and our code. The Worker is bundled by wrangler itself
 * and its bindings come from wrangler.toml, so the local service matches a deployment.
 *
 *   const ex = await startLocalExchange({ adminToken, claimKeySecret, port: 0, persistDir: null });
 *   await fetch(`${ex.url}/health`);
 *   await ex.stop();
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Log, LogLevel, Miniflare, convertV4MiniflareOptions, type Json } from "miniflare";
import { unstable_getMiniflareWorkerOptions, unstable_readConfig } from "wrangler";
import { buildWorker } from "./build";
import { applyMigrations } from "./migrations";

export type LocalExchangeOptions = {
  /** Port on 127.0.0.1; 0 picks a free one. Default 8787. */
  port?: number;
  /** Directory for D1 and Durable Object state, kept across restarts; null (the default) keeps nothing. */
  persistDir?: string | null;
  adminToken: string;
  claimKeySecret: string;
  /** Receives progress lines, Miniflare's warnings and the Worker's console output. Default: silent. */
  log?: (line: string) => void;
  /** wrangler config of the Worker to serve. Default: the repository's wrangler.toml. */
  configPath?: string;
};

export type LocalExchange = {
  /** The origin, e.g. `http://127.0.0.1:8787` (no trailing slash). */
  url: string;
  /** Shuts workerd down and removes the build directory; persisted state stays. */
  stop(): Promise<void>;
};

export const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** The parts of wrangler's parsed config this launcher reads. */
type D1Config = { binding: string; migrations_dir?: string; migrations_table?: string };

/** Miniflare's own messages (warnings and errors) go to the caller's log. */
class LineLog extends Log {
  constructor(private readonly sink: (line: string) => void) {
    super(LogLevel.WARN);
  }
  protected override log(message: string): void {
    for (const line of message.split("\n")) this.sink(line);
  }
}

function assertNode22(): void {
  const major = Number(process.versions.node.split(".")[0]);
  if (major < 22) {
    throw new Error(
      `Miniflare and wrangler need Node >= 22 but this is Node ${process.versions.node}. ` +
        "Run through npm (npm start, npm run ...): the project's scripts use the Node 22 it installs.",
    );
  }
}

export async function startLocalExchange(opts: LocalExchangeOptions): Promise<LocalExchange> {
  assertNode22();
  const log = opts.log ?? (() => {});
  const configPath = resolve(opts.configPath ?? join(REPO_ROOT, "wrangler.toml"));
  const config = unstable_readConfig({ config: configPath });
  const { workerOptions, main } = unstable_getMiniflareWorkerOptions(config);
  if (!main) throw new Error(`${configPath} names no main module`);

  const buildDir = await mkdtemp(join(tmpdir(), "rollout-exchange-build-"));
  let mf: Miniflare | undefined;
  try {
    log(`building ${main} with wrangler`);
    const bundle = await buildWorker(configPath, main, buildDir);
    mf = new Miniflare(
      convertV4MiniflareOptions({
        host: "127.0.0.1",
        port: opts.port ?? 8787,
        ...(opts.persistDir ? { resourcePersistencePath: resolve(opts.persistDir) } : {}),
        log: new LineLog(log),
        handleStructuredLogs: ({ level, message }) => log(`[worker ${level}] ${message}`),
        telemetry: { enabled: false },
        // A placeholder `request.cf`: the real one would be fetched from Cloudflare, and we work offline.
        cf: false,
        ...workerOptions,
        // wrangler's bundle is one self-contained module: no rules are needed to find others.
        modulesRules: undefined,
        rootPath: buildDir,
        modules: true,
        scriptPath: bundle,
        modulesRoot: buildDir,
        bindings: { ...(workerOptions.bindings as Record<string, Json> | undefined), ADMIN_TOKEN: opts.adminToken, CLAIM_KEY_SECRET: opts.claimKeySecret },
      }),
    );
    const url = (await mf.ready).origin;
    for (const d1 of (config.d1_databases ?? []) as D1Config[]) {
      const dir = resolve(dirname(configPath), d1.migrations_dir ?? "migrations");
      const applied = await applyMigrations(await mf.getD1Database(d1.binding), dir, d1.migrations_table);
      log(applied.length ? `D1 ${d1.binding}: applied ${applied.join(", ")}` : `D1 ${d1.binding}: migrations up to date`);
    }
    log(`serving ${url}${opts.persistDir ? ` (state in ${opts.persistDir})` : " (in-memory state)"}`);
    const running = mf;
    let stopped: Promise<void> | undefined;
    return {
      url,
      stop: () => (stopped ??= running.dispose().finally(() => rm(buildDir, { recursive: true, force: true }))),
    };
  } catch (err) {
    await mf?.dispose().catch(() => {});
    await rm(buildDir, { recursive: true, force: true });
    throw err;
  }
}
