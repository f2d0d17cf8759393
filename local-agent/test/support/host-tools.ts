/**
 * The machine's own Node and npm, found as a GPU host's shell finds them, and a way to run
 * commands there. npm scripts (and so vitest) put node_modules/.bin first on PATH, where the
 * project's pinned Node 22 sits: the host's tools are the first ones on PATH outside any
 * node_modules/.bin, else /usr/local/bin's.
 */
import { spawn } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";

const FALLBACK_DIR = "/usr/local/bin";

/** PATH without its node_modules/.bin folders. */
export function hostPath(path = process.env["PATH"] ?? ""): string {
  return path
    .split(delimiter)
    .filter((d) => d !== "" && !/[\\/]node_modules[\\/]\.bin[\\/]?$/.test(d))
    .join(delimiter);
}

function isExecutable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

/** The first executable `name` on the host's PATH, else in /usr/local/bin. */
export function hostTool(name: string): string {
  for (const dir of [...hostPath().split(delimiter), FALLBACK_DIR]) {
    const file = join(dir, name);
    if (isExecutable(file)) return file;
  }
  throw new Error(`no ${name} on PATH outside node_modules/.bin, nor in ${FALLBACK_DIR}`);
}

/**
 * The environment of a shell on the host: its PATH (with `prependPath` first), and none of the
 * npm_* variables a process started by an npm script inherits (they describe that run of npm).
 */
export function hostEnv(prependPath: string[] = []): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !/^npm_/i.test(k)) env[k] = v;
  env["PATH"] = [...prependPath, hostPath()].join(delimiter);
  return env;
}

export type Ran = { code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string };

/** Runs `argv` to its end and collects its output; never throws for a failing command. */
export function run(argv: readonly string[], opts: { cwd: string; env?: Record<string, string> }): Promise<Ran> {
  const [command, ...args] = argv as [string, ...string[]];
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

/** `ran` as text for an assertion's message. */
export function described(argv: readonly string[], ran: Ran): string {
  return `${argv.join(" ")} exited ${ran.code ?? ran.signal}\n--- stdout\n${ran.stdout}\n--- stderr\n${ran.stderr}`;
}
