/**
 * Makes workerd die with the process that started it. Miniflare spawns it with nothing tying it
 * to its parent, so an `npm start` killed by its pid alone (`kill -9 <pid>`, the pid its state
 * lock names; the OOM killer) left workerd serving the state directory: the next start took the
 * lock over, and on another port ran a second workerd over the same SQLite files, which the lock
 * exists to prevent. On Linux, util-linux's `setpriv --pdeathsig KILL` gives workerd a signal
 * when its parent dies; Miniflare runs the binary MINIFLARE_WORKERD_PATH names, here a script
 * that execs workerd through setpriv (one process, the same pid). Elsewhere (macOS, a system
 * without setpriv), or when MINIFLARE_WORKERD_PATH is set already, nothing changes.
 */
import { accessSync, constants, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { delimiter, join } from "node:path";

const quoted = (s: string): string => `'${s.replaceAll("'", `'"'"'`)}'`;

/** An executable named `name` on PATH; null if there is none. */
function onPath(name: string): string | null {
  for (const dir of (process.env["PATH"] ?? "").split(delimiter)) {
    if (dir === "") continue;
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // Not here.
    }
  }
  return null;
}

/** The workerd binary Miniflare would run: the `workerd` package's, as Miniflare resolves it. */
function workerdBinary(): string {
  const fromMiniflare = createRequire(createRequire(import.meta.url).resolve("miniflare"));
  return (fromMiniflare("workerd") as { default: string }).default;
}

/** Points Miniflare at workerd through `setpriv --pdeathsig KILL`, the script kept in `dir`. */
export function leashWorkerd(dir: string): void {
  if (process.platform !== "linux" || process.env["MINIFLARE_WORKERD_PATH"] !== undefined) return;
  const setpriv = onPath("setpriv");
  if (setpriv === null) return;
  const script = join(dir, "workerd-with-parent");
  const text = `#!/bin/sh\nexec ${quoted(setpriv)} --pdeathsig KILL -- ${quoted(workerdBinary())} "$@"\n`;
  let current: string | null = null;
  try {
    current = readFileSync(script, "utf8");
  } catch {
    // Not written yet.
  }
  if (current !== text) {
    mkdirSync(dir, { recursive: true });
    // Through a rename: another start in this checkout may be running the script this instant.
    const tmp = `${script}.${process.pid}`;
    writeFileSync(tmp, text, { mode: 0o755 });
    renameSync(tmp, script);
  }
  process.env["MINIFLARE_WORKERD_PATH"] = script;
}
