/**
 * Builds the Worker exactly as `wrangler deploy` would (same bundler, same config), without
 * deploying: `wrangler deploy --dry-run --outdir <dir>` writes `<dir>/<name of main>.js`.
 */
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { basename, dirname, join } from "node:path";

/** The wrangler CLI script of the pinned devDependency, run with this process's Node. */
function wranglerBin(): string {
  const require = createRequire(import.meta.url);
  const pkgPath = require.resolve("wrangler/package.json");
  const bin = (require(pkgPath) as { bin: Record<string, string> }).bin["wrangler"];
  if (!bin) throw new Error(`wrangler's package.json (${pkgPath}) names no 'wrangler' bin`);
  return join(dirname(pkgPath), bin);
}

/**
 * Bundles the Worker of `configPath` (whose entry point is `main`) into `outdir` and returns
 * the path of the bundled main module.
 */
export async function buildWorker(configPath: string, main: string, outdir: string): Promise<string> {
  const args = [wranglerBin(), "deploy", "--dry-run", "--config", configPath, "--outdir", outdir];
  const output: string[] = [];
  const code = await new Promise<number | null>((resolve, reject) => {
    const child = spawn(process.execPath, args, {
      cwd: dirname(configPath),
      env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1" },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    // A start stopped while it builds exits at once: the build must go with it, or it runs on
    // and writes its bundle into the build directory the exit has just removed. Its group, since
    // wrangler's bin runs its CLI in a child of its own, which outlives a kill of the bin alone.
    const stop = () => {
      try {
        process.kill(-(child.pid as number), "SIGKILL");
      } catch {
        // Ended already.
      }
    };
    process.on("exit", stop);
    child.stdout.on("data", (b: Buffer) => output.push(b.toString()));
    child.stderr.on("data", (b: Buffer) => output.push(b.toString()));
    child.on("error", (e) => {
      process.off("exit", stop);
      reject(e);
    });
    child.on("close", (c) => {
      process.off("exit", stop);
      resolve(c);
    });
  });
  if (code !== 0) throw new Error(`wrangler deploy --dry-run failed (exit ${code}):\n${output.join("")}`);
  const bundle = join(outdir, basename(main).replace(/\.[cm]?[jt]sx?$/, "") + ".js");
  if (!existsSync(bundle)) throw new Error(`wrangler built no ${bundle}:\n${output.join("")}`);
  return bundle;
}
