/** The rollout workers' supervision against real child processes (fixtures/worker.sh). */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { groupAlive } from "../../src/runs/process-group";
import { RolloutWorkers, type RolloutWorkersOptions, type StartRolloutBody } from "../../src/rollout/workers";
import { parseRolloutCommand } from "../../src/rollout/template";
import { RolloutWorkersStatus } from "../../../src/protocol/agent";
import { fixtureWorkers } from "../support/dispatcher";
import { MemoryLogger } from "../support/logger";
import { tempDir } from "../support/temp";
import { processGroupOf, waitUntil } from "../support/wait";


let dir: ReturnType<typeof tempDir>;
let logger: MemoryLogger;
const made: RolloutWorkers[] = [];

function workers(over: Partial<RolloutWorkersOptions> = {}): RolloutWorkers {
  const w = fixtureWorkers(dir.path, logger, over);
  made.push(w);
  return w;
}

const cmd = (job: string, restart = false, group = 4): StartRolloutBody => ({ kind: "start_rollout", job_session: job, group_size: group, restart_training: restart });
const log = (w: RolloutWorkers): string => readFileSync(w.logPath, "utf8");

beforeEach(() => {
  dir = tempDir();
  logger = new MemoryLogger();
});

afterEach(async () => {
  for (const w of made.splice(0)) await w.stop("test cleanup");
  dir.remove();
});

describe("RolloutWorkers", () => {
  it("starts the workers in their own process group with the command's values, and logs their output", async () => {
    const w = workers();
    const out = await w.start(cmd("job-1", false, 8), 1);
    expect(out?.ok, out?.detail).toBe(true);
    const pid = w.status().pid as number;
    expect(processGroupOf(pid)).toBe(pid);
    await waitUntil(() => log(w).includes("worker job=job-1 group=8 restart=false engine_url=http://127.0.0.1:1/e/e1 env_job=job-1"), "the worker's first line");
    expect(w.status()).toEqual({ running: true, pid, job_session: "job-1", group_size: 8 });
  });

  it("does not let a job session run commands through a template that runs a shell: refused, a plain one runs", async () => {
    // The job session is any string whoever holds the trainer token sends; filled into an
    // `sh -c` script, `x; touch <file>` ran on the host as the agent's user.
    const pwned = join(dir.path, "pwned");
    const w = workers({ command: parseRolloutCommand(`sh -c 'echo launched job={job_session}; echo launcher-ready; sleep 30'`) });
    const out = await w.start(cmd(`x; touch ${pwned}; echo`), 1);
    expect(out).toEqual({ ok: false, detail: expect.stringMatching(/^rolloutCommand: \{job_session\} is .*sent by the exchange, and the command may run it as code.*"\$ROLLOUT_JOB_SESSION"/) });
    expect(existsSync(pwned)).toBe(false);
    expect(w.report()).toBeNull();
    // Through programs that hand their -c to a shell themselves, or run it as code of their own:
    // only a shell's own name followed by -c was recognised, and these ran the sender's commands.
    // Also with the option bundled (perl's -le), another letter (node's -p), a long option with
    // `=`, or the code in the option's own word.
    for (const template of [
      `flock ${join(dir.path, "lock")} -c 'echo job={job_session}'`,
      `script -q -c 'echo job={job_session}' /dev/null`,
      `python3 -c 'print("{job_session}")'`,
      `perl -le 'print "job={job_session}"'`,
      `node -p '"job={job_session}"'`,
      `node --eval='console.log("job={job_session}")'`,
      `python3 -c'print("{job_session}")'`,
    ]) {
      const wrapped = workers({ command: parseRolloutCommand(template) });
      expect(await wrapped.start(cmd(`x; touch ${pwned}; echo`), 1), template).toMatchObject({ ok: false, detail: expect.stringContaining("may run it as code") });
      expect(wrapped.report(), template).toBeNull();
    }
    // A job session no shell reads as syntax runs, in the script as given.
    expect(await w.start(cmd("run-2026-12-07_a.b:c/d"), 2)).toMatchObject({ ok: true });
    await waitUntil(() => /^launched job=run-2026-12-07_a\.b:c\/d$/m.test(log(w)), "the launcher's first line");
  });

  it("answers a second start as already running, and a redelivered start as started by that command", async () => {
    const w = workers();
    await w.start(cmd("job-1"), 1);
    const pid = w.status().pid;
    const again = await w.start(cmd("job-2"), 2);
    expect(again).toMatchObject({ ok: true, detail: expect.stringContaining("already running") });
    const redelivered = await w.start(cmd("job-1"), 1);
    expect(redelivered).toMatchObject({ ok: true, detail: expect.stringContaining("started by this same command") });
    expect(w.status()).toMatchObject({ pid, job_session: "job-1" });
  });

  it("restart_training stops the running workers' whole group and starts new ones with the new values", async () => {
    const w = workers();
    await w.start(cmd("job-1"), 1);
    // Its trap must be set before the restart signals it.
    await waitUntil(() => log(w).includes("worker job=job-1"), "the first workers' first line");
    const old = w.status().pid as number;
    const out = await w.start(cmd("job-2", true, 2), 2);
    expect(out?.ok, out?.detail).toBe(true);
    expect(out?.detail).toContain(`previous workers, pid ${old}, were stopped`);
    expect(groupAlive(old)).toBe(false);
    const now = w.status().pid as number;
    expect(now).not.toBe(old);
    await waitUntil(() => log(w).includes("worker job=job-2 group=2 restart=true"), "the new workers' first line");
    expect(log(w)).toContain("worker got TERM");
  });

  it("starts again once the workers ended on their own", async () => {
    const w = workers({ command: ["sh", "-c", "echo short-lived {job_session}"] });
    await w.start(cmd("job-1"), 1);
    const first = w.status().pid;
    await waitUntil(() => !w.status().running, "the short-lived workers to end");
    // What the heartbeat tells the engine: they ended on their own, and how.
    expect(w.report()).toEqual({ state: "exited", pid: first, job_session: "job-1", detail: expect.stringMatching(/^rollout workers exited with code 0; see .*rollout-workers\.log/) });
    const out = await w.start(cmd("job-2"), 2);
    expect(out?.detail).not.toContain("already");
    await waitUntil(() => log(w).includes("short-lived job-2"), "the second run's output");
    expect(logger.has(/rollout workers pid \d+ exited with code 0/)).toBe(true);
  });

  it("keeps its report within the heartbeat's limits, however long the log path and job session", async () => {
    const deep = join(dir.path, ...Array.from({ length: 6 }, (_, i) => `${i}`.padEnd(200, "d")));
    const w = workers({ command: ["sh", "-c", "exit 3"], logDir: deep });
    await w.start(cmd("j".repeat(400)), 1);
    await waitUntil(() => !w.status().running, "the workers to exit");
    const r = w.report();
    expect(RolloutWorkersStatus.parse(r)).toMatchObject({ state: "exited", detail: expect.stringMatching(/^rollout workers exited with code 3; see /) });
    expect(r?.detail.length).toBe(1000);
  });

  it("reports running workers, and nothing once the agent itself stopped them", async () => {
    const w = workers();
    expect(w.report()).toBeNull();
    await w.start(cmd("job-1", false, 8), 1);
    expect(w.report()).toEqual({ state: "running", pid: w.status().pid, job_session: "job-1", detail: "running, group size 8" });
    await w.stop("test");
    expect(w.report()).toBeNull();
  });

  it("starts no new workers when the agent shuts down while a restart_training is stopping the old ones, and leaves the command unacked", async () => {
    // Workers that take the whole grace period to stop, so the shutdown comes while the restart waits.
    const w = workers({ command: ["sh", "-c", "trap '' TERM; echo workers up; while :; do sleep 0.1; done"], graceMs: 1000 });
    await w.start(cmd("job-1"), 1);
    const old = w.status().pid as number;
    await waitUntil(() => log(w).includes("workers up"), "the first workers' trap");
    const restart = w.start(cmd("job-2", true), 2);
    await waitUntil(() => logger.has(/stopping rollout workers pid \d+ \(restart_training\)/), "the restart to stop the old workers");
    await w.shutdown("the agent is shutting down");
    expect(await restart).toBeNull();
    expect(w.status()).toMatchObject({ running: false, pid: null });
    expect(groupAlive(old)).toBe(false);
    expect(log(w).match(/rollout-agent starts/g)).toHaveLength(1);
  });

  it("stops, with the agent's shutdown, the workers whose spawn was under way when it began", async () => {
    const w = workers();
    const starting = w.start(cmd("job-1"), 1); // spawning: no pid known yet
    expect(w.status().pid).toBeNull();
    await w.shutdown("the agent is shutting down");
    const started = await starting;
    expect(started?.ok).toBe(true);
    const pid = Number(/pid (\d+)/.exec(started?.detail ?? "")?.[1]);
    expect(groupAlive(pid)).toBe(false);
    expect(w.status()).toMatchObject({ running: false, pid: null });
    expect(existsSync(join(dir.path, "state", "rollout-workers.json"))).toBe(false);
  });

  it("reports, after a restart of the agent, workers that ended on their own, so that the job's next start brings them back", async () => {
    // Ended while no agent ran: the restarted agent found them gone and said nothing of them, and
    // the engine took the trainer's next start_rollout for a repeat (docs/buffer.md).
    const first = workers();
    expect((await first.start(cmd("job-1"), 1))?.ok).toBe(true);
    const pid = first.status().pid as number;
    process.kill(-pid, "SIGKILL");
    await waitUntil(() => !groupAlive(pid), "the workers' group to be gone");
    const second = workers();
    second.adopt();
    expect(second.status().running).toBe(false);
    expect(second.report()).toEqual({ state: "exited", pid, job_session: "job-1", detail: expect.stringContaining("ended while no agent was running") });
    // Ended while an agent ran, which was then restarted, and restarted again: still said.
    for (const _restart of [1, 2]) {
      const next = workers();
      next.adopt();
      expect(next.report()).toMatchObject({ state: "exited", pid, job_session: "job-1" });
    }
    const seen = workers({ command: ["sh", "-c", "exit 7"] });
    expect((await seen.start(cmd("job-2"), 2))?.ok).toBe(true);
    await waitUntil(() => seen.report()?.state === "exited", "the agent to see the workers exit");
    const after = workers();
    after.adopt();
    expect(after.report()).toMatchObject({ state: "exited", job_session: "job-2", detail: expect.stringContaining("exited with code 7") });
    expect(RolloutWorkersStatus.safeParse(after.report()).success).toBe(true);
    // A new start clears it.
    expect((await after.start(cmd("job-3"), 3))?.ok).toBe(true);
    expect(after.report()).toMatchObject({ state: "running", job_session: "job-3" });
  });

  it("adopts workers left running by a previous agent instead of starting a second set", async () => {
    const first = workers();
    await first.start(cmd("job-1"), 1);
    const pid = first.status().pid;
    const second = workers();
    second.adopt();
    expect(second.status()).toMatchObject({ running: true, pid, job_session: "job-1" });
    expect((await second.start(cmd("job-2"), 5))?.detail).toContain("already running");
    await second.stop("test");
    expect(groupAlive(pid as number)).toBe(false);
  });

  it("refuses clearly without a command, with a missing program, or a missing working directory", async () => {
    expect(await workers({ command: null }).start(cmd("j"), 1)).toMatchObject({ ok: false, detail: expect.stringContaining("set rolloutCommand") });
    expect(await workers({ command: ["/nonexistent/launcher"] }).start(cmd("j"), 1)).toMatchObject({ ok: false, detail: expect.stringContaining("command not found") });
    expect(await workers({ cwd: join(dir.path, "missing") }).start(cmd("j"), 1)).toMatchObject({ ok: false, detail: expect.stringContaining("does not exist") });
  });

  // Node's spawn throws for a NUL in an argument or the environment: the start threw, was never
  // acked and was handed out for ever, and a restart_training had stopped the running workers first.
  it("refuses a job session holding a NUL with an outcome, before a restart_training stops the running workers", async () => {
    expect(await workers().start(cmd("job\u0000x"), 1)).toMatchObject({ ok: false, detail: expect.stringContaining("NUL") });
    const w = workers();
    await w.start(cmd("job-1"), 1);
    await waitUntil(() => log(w).includes("worker job=job-1"), "the first workers' first line");
    const pid = w.status().pid;
    expect(await w.start(cmd("job\u0000x", true), 2)).toMatchObject({ ok: false });
    expect(w.status()).toMatchObject({ running: true, pid, job_session: "job-1" });
  });

  it("rejects unknown placeholders when the template is parsed", () => {
    expect(() => parseRolloutCommand("python3 launcher.py --job {job}")).toThrow(/unknown placeholder \{job\}/);
  });
});
