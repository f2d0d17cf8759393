/**
 * Ctrl-C or SIGTERM to npm start while it builds the Worker (the first seconds of every start):
 * the start exits at once, and its `wrangler deploy --dry-run` (scripts/local/build.ts) goes
 * with it. The build ran on, orphaned, and wrote the bundled Worker into the build directory the
 * exit had just removed, which then stayed in TMPDIR.
 */
import { readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { alive, copyRepo, descendants, nodeStart, removeDir, type Started } from "./support/npm-start";

const starts: Started[] = [];
const dirs: string[] = [];
const left: number[] = [];
afterEach(() => {
  for (const s of starts.splice(0)) s.kill();
  for (const pid of left.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  for (const d of dirs.splice(0)) removeDir(d);
});

describe("SIGTERM to npm start while it builds the Worker", () => {
  it("leaves no process of the start running and no build directory in TMPDIR", async () => {
    const dir = copyRepo("stop-building");
    dirs.push(dir);
    writeFileSync(join(dir, ".dev.vars"), "ADMIN_TOKEN=stop-building-admin\nCLAIM_KEY_SECRET=stop-building-claim\n");
    const s = nodeStart(dir, { PORT: "8935" });
    starts.push(s);
    expect(await s.waitFor("with wrangler")).toBe(true);
    // Wait until the wrangler build child is there.
    let under: { pid: number; comm: string }[] = [];
    const t0 = Date.now();
    while (Date.now() - t0 < 20_000) {
      under = descendants(s.child.pid!).filter((p) => p.comm === "node");
      if (under.length > 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(under.length).toBeGreaterThan(0);
    // wrangler's bin runs its CLI in a child of its own: every process under the start, as the signal comes.
    await new Promise((r) => setTimeout(r, 500));
    under = descendants(s.child.pid!);
    left.push(...under.map((p) => p.pid));

    s.signal("SIGTERM");
    await s.exited();
    expect(s.output()).toContain("[start] SIGTERM: stopped");
    await new Promise((r) => setTimeout(r, 1_000));
    const running = under.filter((p) => alive(p.pid)).map((p) => p.comm);
    const builds = readdirSync(join(dir, "tmp")).filter((f) => f.startsWith("rollout-exchange-build-"));
    expect({ runningAfterExit: running, builds }).toEqual({ runningAfterExit: [], builds: [] });
  }, 120_000);
});
