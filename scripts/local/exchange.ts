/**
 * Serves the real Worker locally with Miniflare, directly: no `wrangler dev` proxy in front, and
 * clients connect to a workerd socket bound to the Worker itself rather than to Miniflare's
 * entry worker (which would pass every request through one more isolate: about 2 ms per request
 * here, more than the engine's own work). So what a client measures is workerd and our code.
 * The Worker is bundled by wrangler itself and its bindings come from wrangler.toml, so the
 * local service matches a deployment.
 *
 *   const ex = await startLocalExchange({ adminToken, claimKeySecret, port: 0, persistDir: null });
 *   await fetch(`${ex.url}/health`);
 *   await ex.stop();
 */
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Log, LogLevel, Miniflare, type MiniflareOptions } from "miniflare";
import { buildWorker } from "./build";
import { applyMigrations } from "./migrations";
import { readWorkerSetup } from "./worker-config";
import { leashWorkerd } from "./workerd-leash";

export type LocalExchangeOptions = {
  /** Port on 127.0.0.1; 0 picks a free one. Default 8787. */
  port?: number;
  /** Directory for D1 and Durable Object state, kept across restarts; null (the default) keeps nothing. */
  persistDir?: string | null;
  adminToken: string;
  claimKeySecret: string;
  /** More plain-text vars for the Worker (e.g. RELAY_DEADLINE_SECONDS in tests); wrangler.toml's come first. */
  vars?: Record<string, string>;
  /** Receives progress lines, Miniflare's warnings and the Worker's console output. Default: silent. */
  log?: (line: string) => void;
  /** wrangler config of the Worker to serve. Default: the repository's wrangler.toml. */
  configPath?: string;
  /**
   * Relayed calls leave through workerd's network service (Env.RELAY_NETWORK). Default true;
   * false serves the Worker as deployed, where they use the global fetch (tests cover both).
   */
  relayNetwork?: boolean;
  /**
   * Serves wrangler.toml's per-token request limits (`[[ratelimits]]`), as a deployment does.
   * Default false: the tests and benchmarks that start an exchange drive one token far past a
   * deployment's limits on purpose. `npm start` turns them on.
   */
  rateLimits?: boolean;
  /** Opens workerd's V8 inspector on this port (Chrome DevTools protocol), for profiling. Default: closed. */
  inspectorPort?: number;
};

export type LocalExchange = {
  /** The origin, e.g. `http://127.0.0.1:8787` (no trailing slash). */
  url: string;
  /** Shuts workerd down and removes the build directory; persisted state stays. */
  stop(): Promise<void>;
};

export const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** Miniflare's own messages (warnings and errors) go to the caller's log. */
export class LineLog extends Log {
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

const BUILD_PREFIX = "rollout-exchange-build-";

/**
 * Makes a build directory that goes away with the process, however it ends short of SIGKILL:
 * Miniflare ends the process itself on SIGINT/SIGTERM (after killing workerd), so no async
 * cleanup would run. Its name holds the pid, so that the next start removes what a SIGKILLed one
 * (the OOM killer, a closed container) left: each a copy of the bundled Worker.
 */
function buildDirectory(): { path: string; remove(): void } {
  removeLeftBuilds();
  const path = mkdtempSync(join(tmpdir(), `${BUILD_PREFIX}${process.pid}-`));
  const remove = () => {
    process.off("exit", remove);
    rmSync(path, { recursive: true, force: true });
  };
  process.on("exit", remove);
  return { path, remove };
}

/** Removes the build directories of processes that are gone (their pid in the name; a reused pid keeps one a while longer). */
function removeLeftBuilds(): void {
  let names: string[];
  try {
    names = readdirSync(tmpdir());
  } catch {
    return;
  }
  for (const name of names) {
    const pid = name.startsWith(BUILD_PREFIX) ? /^(\d+)-/.exec(name.slice(BUILD_PREFIX.length))?.[1] : undefined;
    if (pid === undefined || alive(Number(pid))) continue;
    rmSync(join(tmpdir(), name), { recursive: true, force: true });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Miniflare's shared options for the exchange: workerd on 127.0.0.1, state in memory or under
 * `persistDir`, logs to `log`. Miniflare's own entry socket takes any free port: clients use
 * the Worker's direct socket instead.
 */
function serverOptions(opts: { persistDir: string | null; log: (line: string) => void }): Omit<MiniflareOptions, "workers"> {
  return {
    host: "127.0.0.1",
    port: 0,
    ...(opts.persistDir ? { resourcePersistencePath: resolve(opts.persistDir) } : {}),
    log: new LineLog(opts.log),
    handleStructuredLogs: ({ level, message }) => opts.log(`[worker ${level}] ${message}`),
    logRequests: false,
    enableDevRegistry: false,
    telemetry: { enabled: false },
    // A placeholder `request.cf`: the real one would be fetched from Cloudflare, and we work offline.
    cf: false,
  };
}

export async function startLocalExchange(opts: LocalExchangeOptions): Promise<LocalExchange> {
  assertNode22();
  const log = opts.log ?? (() => {});
  const configPath = resolve(opts.configPath ?? join(REPO_ROOT, "wrangler.toml"));
  const setup = readWorkerSetup(configPath);
  const buildDir = buildDirectory();
  // Beside the dependencies it runs, not in the build directory: other exchanges of this process may run it after this one stops.
  leashWorkerd(join(REPO_ROOT, "node_modules", ".cache", "rollout-exchange"));
  let mf: Miniflare | undefined;
  try {
    log(`building ${setup.main} with wrangler`);
    const bundle = await buildWorker(configPath, setup.main, buildDir.path);
    const mainModule = basename(bundle);
    mf = new Miniflare({
      ...serverOptions({ persistDir: opts.persistDir ?? null, log }),
      ...(opts.inspectorPort !== undefined ? { inspectorPort: opts.inspectorPort } : {}),
      workers: [
        {
          config: {
            ...setup.config,
            env: {
              ...setup.config.env,
              ...(opts.rateLimits ? setup.rateLimits : {}),
              ADMIN_TOKEN: { type: "text", value: opts.adminToken },
              CLAIM_KEY_SECRET: { type: "text", value: opts.claimKeySecret },
              // Relayed calls go straight out (see Env.RELAY_NETWORK): "local" lets a gateway on this host in.
              ...(opts.relayNetwork === false ? {} : { RELAY_NETWORK: { type: "network" as const, allow: ["public", "private", "local"] } }),
              ...Object.fromEntries(Object.entries(opts.vars ?? {}).map(([k, value]) => [k, { type: "text" as const, value }])),
            },
            manifest: {
              mainModule,
              modulesRoot: dirname(bundle),
              modules: { [mainModule]: { type: "esm", contents: await readFile(bundle, "utf8") } },
            },
          },
          // Clients connect here: straight into the Worker, not through Miniflare's entry worker.
          dev: { unsafeDirectSockets: [{ host: "127.0.0.1", port: opts.port ?? 8787 }] },
        },
      ],
    });
    await mf.ready;
    const url = (await mf.unsafeGetDirectURL()).origin;
    for (const d1 of setup.d1Migrations) {
      const applied = await applyMigrations(await mf.getD1Database(d1.binding), d1.dir, d1.table);
      log(applied.length ? `D1 ${d1.binding}: applied ${applied.join(", ")}` : `D1 ${d1.binding}: migrations up to date`);
    }
    log(`serving ${url}${opts.persistDir ? ` (state in ${opts.persistDir})` : " (in-memory state)"}`);
    const running = mf;
    let stopped: Promise<void> | undefined;
    return { url, stop: () => (stopped ??= running.dispose().finally(buildDir.remove)) };
  } catch (err) {
    await mf?.dispose().catch(() => {});
    buildDir.remove();
    throw err;
  }
}
