/**
 * `npm run demo` promises (scripts/demo/run.ts) that Ctrl-C stops its agent and removes
 * the demo's files, and it makes a temporary directory for them. Each run here gets a TMPDIR of
 * its own, so whatever the demo leaves behind is its own.
 */
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";

const DEMO = join(import.meta.dirname, "..", "scripts", "demo", "run.ts");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

function startDemo(args: string[], tmp: string) {
  const child = spawn(process.execPath, ["--import", "tsx", DEMO, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, TMPDIR: tmp } });
  const stderr: string[] = [];
  const waiters: { re: RegExp; resolve: () => void }[] = [];
  createInterface({ input: child.stderr! }).on("line", (l) => {
    stderr.push(l);
    for (const w of waiters) if (w.re.test(l)) w.resolve();
  });
  child.stdout!.resume();
  const exit = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  const line = (re: RegExp) => new Promise<void>((resolve) => (stderr.some((l) => re.test(l)) ? resolve() : waiters.push({ re, resolve })));
  cleanups.push(() => child.kill("SIGKILL"));
  return { child, stderr, exit, line };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
/** The demo's local-agent children, looked for up to 2 s until there is one. */
async function agentsOf(demo: number): Promise<number[]> {
  for (let i = 0; ; i++) {
    const agents = execFileSync("ps", ["-o", "pid=,args=", "--ppid", String(demo)], { encoding: "utf8" })
      .split("\n")
      .filter((l) => l.includes("local-agent"))
      .map((l) => Number(l.trim().split(/\s+/)[0]));
    if (agents.length > 0 || i >= 100) return agents;
    await sleep(20);
  }
}
const leftovers = (tmp: string) => readdirSync(tmp).filter((n) => n.startsWith("rollout-demo-"));

describe("npm run demo cleans up after itself", () => {
  it("Ctrl-C while the agent starts: stops the agent and leaves no rollout-demo-* directory", { timeout: 120_000 }, async () => {
    const tmp = mkdtempSync(join(tmpdir(), "rv-demo-tmp-"));
    cleanups.push(() => rmSync(tmp, { recursive: true, force: true }));
    const run = startDemo(["--mode", "agentjet", "--steps", "50"], tmp);
    // The agent is spawned in the same tick as this line is written (run.ts runDemo()), but
    // after the write: this process may read the line before the spawn is done.
    await run.line(/\[demo\] dashboard: /);
    const agents = await agentsOf(run.child.pid!);
    expect(agents).toHaveLength(1);
    const agent = agents[0]!;
    cleanups.push(() => alive(agent) && process.kill(agent, "SIGKILL"));
    run.child.kill("SIGINT");
    expect(await run.exit).toBe(130);
    const agentAliveAfterExit = alive(agent);
    // Give the orphan time to do what it does, then look at what is left.
    for (let i = 0; i < 50 && alive(agent); i++) await sleep(200);
    expect({ agentAliveAfterExit, leftovers: leftovers(tmp) }).toEqual({ agentAliveAfterExit: false, leftovers: [] });
  });

  it("a port in use: fails with a message and leaves no rollout-demo-* directory", { timeout: 120_000 }, async () => {
    const tmp = mkdtempSync(join(tmpdir(), "rv-demo-tmp-"));
    cleanups.push(() => rmSync(tmp, { recursive: true, force: true }));
    const server: Server = createServer();
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    cleanups.push(() => server.close());
    const port = (server.address() as { port: number }).port;
    const run = startDemo(["--mode", "buffer", "--steps", "1", "--port", String(port)], tmp);
    expect(await run.exit).toBe(1);
    expect(run.stderr.join("\n")).toMatch(/\[demo\] failed: Address already in use/);
    expect(leftovers(tmp)).toEqual([]);
  });
});
