/**
 * `npm run chaos` (bench/chaos/run.ts) as a benchmark that must tell the truth: its flags are
 * checked before it starts anything, it leaves nothing behind (ended, or stopped by Ctrl-C), it
 * watches for deliveries until a command leased at the exchange's SIGKILL would be handed out
 * again, and its chart draws a long run. The run's own verdict (nothing lost, nothing delivered
 * twice) is CI's `npm run chaos (short)` step. Each run gets a TMPDIR of its own, which every
 * process it starts inherits (the exchange's under it), so that what is left can be found.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";
import { renderChaosChart } from "../bench/chaos/chart";

const RUN = join(import.meta.dirname, "..", "bench", "chaos", "run.ts");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The processes whose TMPDIR is `tmp` or under it: the run's, its exchange's group, workerd, the agent. */
function processesUnder(tmp: string): string[] {
  const out: string[] = [];
  for (const pid of readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
    try {
      if (!readFileSync(`/proc/${pid}/environ`, "latin1").includes(`\0TMPDIR=${tmp}`)) continue;
      out.push(`${pid}: ${readFileSync(`/proc/${pid}/cmdline`, "latin1").replace(/\0/g, " ").slice(0, 120)}`);
    } catch {
      // Gone, or not ours.
    }
  }
  return out;
}

type Chaos = { tmp: string; pid: number; stderr: string[]; stdout: string[]; line(re: RegExp): Promise<number>; exit: Promise<number | null>; exitedAt(): number };

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

/** Runs the benchmark in a process group of its own, as a terminal's foreground job. */
function chaos(args: string[]): Chaos {
  const tmp = mkdtempSync(join(tmpdir(), "chaos-test-"));
  const child = spawn(process.execPath, ["--import", "tsx", RUN, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, TMPDIR: tmp }, detached: true });
  cleanups.push(() => {
    for (const p of processesUnder(tmp)) {
      try {
        process.kill(Number(p.split(":")[0]), "SIGKILL");
      } catch {
        // Gone.
      }
    }
    rmSync(tmp, { recursive: true, force: true });
  });
  const stderr: string[] = [];
  const stdout: string[] = [];
  const waiters: { re: RegExp; resolve: (at: number) => void }[] = [];
  createInterface({ input: child.stderr }).on("line", (l) => {
    stderr.push(l);
    for (const w of waiters) if (w.re.test(l)) w.resolve(Date.now());
  });
  createInterface({ input: child.stdout }).on("line", (l) => stdout.push(l));
  let exitedAt = 0;
  const exit = new Promise<number | null>((resolve) => child.on("close", (code) => ((exitedAt = Date.now()), resolve(code))));
  return { tmp, pid: child.pid!, stderr, stdout, line: (re) => new Promise((resolve) => waiters.push({ re, resolve })), exit, exitedAt: () => exitedAt };
}

/** What is left in a run's TMPDIR, but for tsx's compile cache (the benchmark runs under tsx). */
const leftIn = (tmp: string) => readdirSync(tmp).filter((n) => !n.startsWith("tsx-"));

const within = <T>(p: Promise<T>, ms: number) => Promise.race([p, sleep(ms).then(() => "still running" as const)]);

describe("npm run chaos", () => {
  it("refuses a bad --clients or an unknown flag at once, naming it, before it starts anything", { timeout: 60_000 }, async () => {
    // --clients abc ran a load of NaN workers to its end, then said FAILED; --quik ran the 80 s plan.
    for (const [args, says] of [
      [["--quick", "--clients", "abc"], "--clients must be a count from 1 to 9999, got 'abc'"],
      [["--quik"], "Unknown option '--quik'"],
    ] as const) {
      const run = chaos([...args]);
      expect(await within(run.exit, 20_000)).toBe(2);
      expect(run.stderr.join("\n")).toContain(says);
      expect(processesUnder(run.tmp)).toEqual([]);
    }
  });

  it("stopped by Ctrl-C during the load, leaves no process of its own and no directory", { timeout: 180_000 }, async () => {
    // The exchange runs in a group of its own, which the terminal's SIGINT does not reach: it ran on, with workerd.
    const run = chaos(["--quick"]);
    await run.line(/^\[chaos\] load:/);
    expect(readdirSync(run.tmp).filter((n) => n.startsWith("rollout-chaos-"))).toHaveLength(1);
    process.kill(-run.pid, "SIGINT");
    expect(await within(run.exit, 15_000)).toBe(130);
    const t0 = Date.now();
    while (Date.now() - t0 < 3000 && processesUnder(run.tmp).length > 0) await sleep(100);
    expect(processesUnder(run.tmp)).toEqual([]);
    expect(leftIn(run.tmp)).toEqual([]);
  });

  it("run to its end, watches a command lease past the exchange's restart and leaves nothing in TMPDIR", { timeout: 240_000 }, async () => {
    const run = chaos(["--quick"]);
    const killed = run.line(/^\[chaos\] exchange SIGKILLed/);
    const up = run.line(/^\[chaos\] exchange serving again/);
    expect(await within(run.exit, 220_000), run.stderr.join("\n")).toBe(0);
    const report = JSON.parse(run.stdout.join("\n")) as { settings: { command_lease_s: number }; lost: number };
    expect(report.lost).toBe(0);
    // A command whose ack died with the exchange is handed out again a lease after it was: a second
    // delivery then is what the run must see. It stopped ~25 s after the SIGKILL, under a 60 s lease.
    expect(await killed).toBeGreaterThan(0);
    expect(run.exitedAt() - (await up)).toBeGreaterThanOrEqual(report.settings.command_lease_s * 1000);
    // The last exchange, SIGKILLed, left its bundled Worker and Miniflare's directories in TMPDIR.
    expect(leftIn(run.tmp)).toEqual([]);
  });
});

describe("the chaos chart", () => {
  it("draws a run of 200,000 deliveries (spread into Math.max, they overflowed the stack)", () => {
    const t0 = 1_000_000;
    const receipts = Array.from({ length: 200_000 }, (_, i) => t0 + (i % 100_000));
    const svg = renderChaosChart({ t0, receipts, acknowledged: receipts.slice(0, 100_000), marks: [{ at: t0 + 50_000, label: "exchange SIGKILL" }], summary: "200000 delivered" });
    expect(svg).toMatch(/^<svg[^>]*>/);
    expect(svg).toContain("exchange SIGKILL");
  });
});
