/**
 * The agent on a full disk (support/full-disk.ts stands one in), and the logs that would fill
 * it. It keeps serving: it starts, acks what it finishes, warns naming the file it cannot write,
 * and leaves no partial files behind. Real agent, real Worker, real processes.
 */
import { mkdirSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";
import { runAgent, testConfig } from "./support/agent-harness";
import { AgentProcess } from "./support/agent-process";
import { runWithFileLimit } from "./support/full-disk";
import { ManualClock } from "./support/manual-clock";
import { FaultyProxy } from "./support/proxy";
import { exchangeSuite } from "./support/suite";
import { waitUntil } from "./support/wait";

const SRC = join(import.meta.dirname, "..", "src");
const t = exchangeSuite();
let proxy: FaultyProxy;

beforeEach(async () => {
  proxy = new FaultyProxy(t.ex.url);
  await proxy.listen();
  t.defer(() => proxy.close());
});

async function agent() {
  const a = await runAgent(testConfig(proxy.url, t.engine, t.dir, { requestTimeoutSeconds: 2, pollWaitSeconds: 1, retryMaxSeconds: 0.3 }));
  t.defer(() => a.stop());
  return a;
}

/** From now on every append to the outcome journal fails with ENOSPC (appendFileSync follows the link). */
function fillJournalDisk(): void {
  const path = join(t.dir, "state", "outcomes.jsonl");
  rmSync(path, { force: true });
  symlinkSync("/dev/full", path);
}

describe("a state file replaced on a full disk", () => {
  it("leaves no temporary file behind when the replace fails", () => {
    const target = join(t.dir, "trainer.json");
    // Three tries, as three agent processes crash-looping under systemd would make.
    for (let i = 0; i < 3; i++) {
      const out = runWithFileLimit(
        t.dir,
        100,
        `
        import { writePrivateAtomic } from ${JSON.stringify(join(SRC, "host-files.ts"))};
        try { writePrivateAtomic(${JSON.stringify(target)}, "y".repeat(1000)); console.log("ok"); } catch (e) { console.log("failed " + (e as NodeJS.ErrnoException).code); }
        `,
      );
      expect(out).toContain("failed EFBIG");
    }
    // Seen: a partial copy per pid, taking space the full disk did not have, never removed.
    expect(readdirSync(t.dir).filter((f) => f.startsWith("trainer.json.tmp-"))).toEqual([]);
  });
});

describe("the agent starting on a full state disk", () => {
  it("starts, warning that it cannot rewrite its journal, and leaves no temporary file", async () => {
    const state = join(t.dir, "state");
    const engine = "http://127.0.0.1:9/e/x"; // nothing listens: the agent only has to start
    mkdirSync(state, { recursive: true });
    // 50 acks owed (about 4.6 KB), which the journal rewrites on open; no file may grow past 1,000 bytes.
    writeFileSync(join(state, "outcomes.jsonl"), Array.from({ length: 50 }, (_, i) => JSON.stringify({ seq: i + 1, ok: true, detail: "delivered", engine, incarnation: "I" }) + "\n").join(""));
    const a = new AgentProcess(
      { ROLLOUT_SERVER: "http://127.0.0.1:9", ROLLOUT_ENGINE: "x", ROLLOUT_TRAINER_TOKEN: "t", ROLLOUT_FACADE_PORT: "0", ROLLOUT_GATEWAY_PORT: "0", ROLLOUT_STATE_DIR: state, ROLLOUT_LOG_DIR: join(t.dir, "logs") },
      [],
      ["prlimit", "--fsize=1000:unlimited", process.execPath, "--import", "tsx", join(SRC, "cli.ts")],
    );
    t.defer(() => a.kill("SIGKILL"));
    // Seen: "cannot start: ENOSPC", exit 1, and systemd restarting it in a loop, a temporary file left each time.
    await a.waitForLine(/inference gateway on/, "the agent to start", 30_000);
    expect(a.lines.filter((l) => l.includes("outcomes.jsonl"))).toEqual([expect.stringMatching(/could not rewrite .*\/state\/outcomes\.jsonl on open \(EFBIG.*\); appending to it as it is/)]);
    expect(readdirSync(state).filter((f) => f.includes(".tmp-"))).toEqual([]);
  });
});

describe("the outcome journal's disk is full", () => {
  it("still acks a finished command, at once, warning once that it cannot journal it", async () => {
    const a = await agent();
    fillJournalDisk();
    // A start with no trainer command configured: the agent finishes it at once (refused).
    await t.engine.operator.syncTrainConfig("x: 1\n");
    await t.engine.operator.startEngine();
    await waitUntil(() => a.lines.some((l) => /command \d+: start the trainer/.test(l)), "the agent to take the start");
    // Seen: no ack until the command's 60 s lease ran out, then the same again.
    await waitUntil(async () => (await t.engine.viewer.overview()).pending_commands === 0, "the start to be acked despite the full disk", 15_000);
    expect(a.lines.filter((l) => /cannot write .*outcomes\.jsonl \(ENOSPC/.test(l))).toHaveLength(1);
  });

  it("does not report a failed journal write as an exchange outage (or refusal) when the exchange took the ack", async () => {
    // The Worker is away while the command finishes: its outcome is journaled (disk fine), the ack retried.
    proxy.fault = (path) => (path.endsWith("/agent/ack") ? "503" : "pass");
    const a = await agent();
    await t.engine.operator.syncTrainConfig("x: 1\n");
    await t.engine.operator.startEngine();
    await waitUntil(() => proxy.faults("/agent/ack") >= 1, "the ack to meet the outage");
    // The disk fills up, then the Worker comes back: the ack goes through, its "acked" line cannot be written.
    fillJournalDisk();
    proxy.fault = () => "pass";
    await waitUntil(async () => (await t.engine.viewer.overview()).pending_commands === 0, "the ack to be taken", 15_000);
    await waitUntil(() => a.lines.some((l) => l.includes("ENOSPC")), "the agent to warn of the full disk", 10_000);
    // Seen: "cannot reach the exchange ... ENOSPC", sending the operator to the network, not the disk.
    expect(a.lines.filter((l) => l.includes("ENOSPC") && /cannot reach the exchange|refused the ack/.test(l))).toEqual([]);
  });
});

describe("chatty children", () => {
  // A rotation whose copy failed at every try (a disk something else filled) deleted one older
  // copy each time: within seconds every rotated log, with the crash output in it, was gone.
  it("keeps the older copies when the rotation's copy fails for lack of space", () => {
    const log = join(t.dir, "copies.log");
    writeFileSync(log, "x".repeat(64 * 1024));
    for (const i of [1, 2, 3]) writeFileSync(`${log}.${i}`, `copy ${i}`);
    const out = runWithFileLimit(
      t.dir,
      16 * 1024,
      `import { existsSync, readFileSync } from "node:fs";
       import { rotateLog } from ${JSON.stringify(join(SRC, "trainer-log.ts"))};
       const log = ${JSON.stringify(log)};
       void (async () => {
         let failed = null;
         try { await rotateLog(log, 1024, 3); } catch (e) { failed = e.code; }
         console.log(JSON.stringify({ failed, copies: [1, 2, 3].map((i) => existsSync(log + "." + i) ? readFileSync(log + "." + i, "utf8") : null), partial: existsSync(log + ".rotating") }));
       })();`,
    );
    expect(JSON.parse(out)).toEqual({ failed: "EFBIG", copies: ["copy 1", "copy 2", "copy 3"], partial: false });
    expect(statSync(log).size).toBe(64 * 1024);
  });

  // The start's banner line in trainer.log threw on a full log disk: the start was never answered.
  it("starts the trainer when its log cannot be written, and answers the start", () => {
    const logs = join(t.dir, "full-logs");
    mkdirSync(logs, { recursive: true });
    writeFileSync(join(logs, "trainer.log"), "x".repeat(32 * 1024));
    const out = runWithFileLimit(
      t.dir,
      16 * 1024,
      `import { TrainerSupervisor } from ${JSON.stringify(join(SRC, "trainer.ts"))};
       import { TrainerLog } from ${JSON.stringify(join(SRC, "trainer-log.ts"))};
       import { realClock } from ${JSON.stringify(join(SRC, "clock.ts"))};
       const quiet = { debug() {}, info() {}, warn() {}, error() {} };
       let exited = null;
       const s = new TrainerSupervisor({ command: ["sh", "-c", "exit 3"], cwd: null, stateDir: ${JSON.stringify(join(t.dir, "full-state"))},
         log: new TrainerLog(${JSON.stringify(logs)}), graceMs: 1000, placeholders: {}, env: {}, logger: quiet, clock: realClock,
         onUnexpectedExit: (e) => { exited = e.exit_code; } });
       void (async () => {
         const outcome = await s.start("x: 1", 1);
         while (exited === null) await new Promise((r) => setTimeout(r, 20));
         console.log(JSON.stringify({ ok: outcome.ok, exited }));
       })();`,
    );
    expect(JSON.parse(out)).toEqual({ ok: true, exited: 3 });
  });

  it("rotates the rollout workers' log past logMaxBytes, as trainer.log", async () => {
    const max = 64 * 1024;
    const clock = new ManualClock(Date.now());
    // Workers that write 1 MiB of output, then idle (a verbose rollout loop, compressed in time).
    const command = ["sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' 'x' | fold -w 100; sleep 60"];
    const a = await runAgent(testConfig(t.ex.url, t.engine, t.dir, { rolloutCommand: command, logMaxBytes: max, logFiles: 2 }), clock);
    // A stop that takes the workers along waits out its grace period on the manual clock: they are killed here instead.
    t.defer(() => a.stop());
    t.defer(() => {
      const pid = a.rollout.workers.status().pid;
      if (pid !== null) process.kill(-pid, "SIGKILL");
    });
    await t.engine.trainer.startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
    const log = join(t.dir, "logs", "rollout-workers.log");
    const size = (): number => {
      try {
        return statSync(log).size;
      } catch {
        return 0;
      }
    };
    await waitUntil(() => size() >= 1 << 20 || undefined, "the workers to write their output", 30_000);
    // Seen: never rotated, until the GPU host's disk was full.
    await clock.advance(5000);
    await waitUntil(() => a.lines.some((l) => l.endsWith(`rotated ${log}`)), "the rotation");
    expect(size()).toBeLessThanOrEqual(max);
    expect(statSync(`${log}.1`).size).toBeGreaterThanOrEqual(1 << 20);
  });
});
