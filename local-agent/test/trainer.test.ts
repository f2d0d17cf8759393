/** Trainer supervision against real child processes (sh scripts in fixtures/). */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { realClock } from "../src/clock";
import { TrainerLog, rotateLog } from "../src/trainer-log";
import { groupAlive } from "../src/runs/process-group";
import { TrainerSupervisor, type TrainerExit, type TrainerOptions } from "../src/trainer";
import { unwritable } from "./support/full-disk";
import { MemoryLogger } from "./support/logger";
import { ManualClock } from "./support/manual-clock";
import { tempDir } from "./support/temp";
import { processAlive, processGroupOf, processState, waitUntil } from "./support/wait";

const FIXTURES = join(import.meta.dirname, "fixtures");
const script = (name: string): string[] => ["sh", join(FIXTURES, name), "{config}"];

let dir: ReturnType<typeof tempDir>;
let logger: MemoryLogger;
let exits: TrainerExit[];
const supervisors: TrainerSupervisor[] = [];

function supervisor(over: Partial<TrainerOptions> = {}): TrainerSupervisor {
  const s = new TrainerSupervisor({
    command: script("trainer-graceful.sh"),
    cwd: null,
    stateDir: join(dir.path, "state"),
    log: new TrainerLog(join(dir.path, "logs")),
    graceMs: 5000,
    placeholders: { facade_url: "http://127.0.0.1:10086", facade_port: "10086", engine: "e1" },
    env: { ROLLOUT_FACADE_URL: "http://127.0.0.1:10086", AJET_DAT_INTERCHANGE_PORT: "10086" },
    logger,
    clock: realClock,
    onUnexpectedExit: (e) => exits.push(e),
    ...over,
  });
  supervisors.push(s);
  return s;
}

const logText = (): string => readFileSync(join(dir.path, "logs", "trainer.log"), "utf8");

beforeEach(() => {
  dir = tempDir();
  logger = new MemoryLogger();
  exits = [];
});

afterEach(async () => {
  for (const s of supervisors.splice(0)) {
    const pid = s.status().pid;
    if (pid !== null) await s.stop("test cleanup").catch(() => {});
    s.close();
  }
  dir.remove();
});

describe("TrainerSupervisor", () => {
  it("writes the synced YAML, starts the trainer in its own process group and stops the whole group with SIGTERM", async () => {
    const s = supervisor();
    const started = await s.start("ajet:\n  backbone: verl\n", 7);
    expect(started?.ok, started?.detail).toBe(true);
    const { pid, state } = s.status();
    expect(state).toBe("running");
    expect(readFileSync(join(dir.path, "state", "train-config.yaml"), "utf8")).toBe("ajet:\n  backbone: verl\n");
    expect(JSON.parse(readFileSync(join(dir.path, "state", "trainer.json"), "utf8"))).toMatchObject({ pid, seq: 7 });

    const helper = Number((await waitUntil(() => /helper pid (\d+)/.exec(logText()), "the trainer's helper to start"))[1]);
    // The script prints the helper's pid right after forking it; until that child has exec'd
    // sleep it still carries the shell's SIGTERM trap, which would swallow the signal and leave
    // "sleep 300" running (the supervisor would then rightly SIGKILL it after the grace period).
    await waitUntil(() => {
      try {
        return readFileSync(`/proc/${helper}/comm`, "utf8").trim() === "sleep";
      } catch {
        return false;
      }
    }, "the helper to be running sleep");
    expect(logText()).toContain(`config=${join(dir.path, "state", "train-config.yaml")} facade=http://127.0.0.1:10086 port=10086`);
    expect(logText()).toContain("yaml: ajet:");
    expect(processGroupOf(pid as number)).toBe(pid); // leader of its own group
    expect(processGroupOf(helper)).toBe(pid);

    const stopped = await s.stop("engine stopped");
    expect(stopped).toMatchObject({ ok: true, exit_code: 0 });
    expect(stopped.detail).toMatch(/stopped: exited with code 0 after SIGTERM/);
    expect(processAlive(pid as number)).toBe(false);
    expect(processAlive(helper)).toBe(false);
    expect(logText()).toContain("got SIGTERM, exiting");
    expect(s.status()).toEqual({ state: "idle", pid: null, started_at: null });
    expect(existsSync(join(dir.path, "state", "trainer.json"))).toBe(false);
    expect(exits).toEqual([]); // a requested stop is not an unexpected exit
  });

  it("kills a trainer that ignores SIGTERM with SIGKILL after the grace period", async () => {
    const s = supervisor({ command: script("trainer-ignores-sigterm.sh"), graceMs: 300 });
    expect((await s.start("x: 1", 1))?.ok).toBe(true);
    const pid = s.status().pid as number;
    await waitUntil(() => logText().includes("ignoring SIGTERM"), "the trap to be set");
    const t0 = Date.now();
    const stopped = await s.stop("engine stopped");
    expect(Date.now() - t0).toBeGreaterThanOrEqual(300);
    expect(stopped.detail).toBe(`trainer pid ${pid} ignored SIGTERM for 0.3 s and was killed with SIGKILL`);
    expect(stopped.signal).toBe("SIGKILL");
    expect(processAlive(pid)).toBe(false);
    expect(logger.has(/still running 0.3 s after SIGTERM: sending SIGKILL/)).toBe(true);
  });

  it("says how long it has waited every 5 s of a long grace period, then kills at its end", async () => {
    const clock = new ManualClock();
    const s = supervisor({ command: script("trainer-ignores-sigterm.sh"), graceMs: 12_000, clock });
    expect((await s.start("x: 1", 1))?.ok).toBe(true);
    const pid = s.status().pid as number;
    await waitUntil(() => logText().includes("ignoring SIGTERM"), "the trap to be set");
    let stopped: Awaited<ReturnType<TrainerSupervisor["stop"]>> | null = null;
    void s.stop("engine stopped").then((r) => (stopped = r));
    for (let waited = 0; stopped === null && waited < 20_000; waited += 100) {
      await clock.advance(100);
      // The SIGKILLed group needs real time to go.
      if (waited >= 12_000) await new Promise((r) => setTimeout(r, 5));
    }
    expect(stopped).toMatchObject({ signal: "SIGKILL" });
    const lines = logger.lines.filter((l) => l.includes(`waiting for trainer pid ${pid}`) || l.includes("after SIGTERM: sending SIGKILL"));
    expect(lines).toEqual([
      `info waiting for trainer pid ${pid} to exit: 5 s of 12 s grace`,
      `info waiting for trainer pid ${pid} to exit: 10 s of 12 s grace`,
      `warn trainer pid ${pid} still running 12 s after SIGTERM: sending SIGKILL to its process group`,
    ]);
  });

  it("reports a trainer that exits on its own, with its exit code and last lines", async () => {
    const s = supervisor({ command: script("trainer-exits-3.sh") });
    expect((await s.start("x: 1", 1))?.ok).toBe(true);
    const exit = await waitUntil(() => exits[0], "the unexpected exit report");
    expect(exit.exit_code).toBe(3);
    expect(exit.signal).toBeNull();
    expect(exit.log_tail).toMatch(/loading model\nstep 1 loss 0.9\nCUDA out of memory$/);
    expect(exit.detail).toMatch(/exited with code 3 without a stop command/);
    // Named by its start, so that the report sent again after a later start cannot stop that one's engine.
    expect(exit.start_seq).toBe(1);
    expect(s.status().state).toBe("exited");
    // Once it has exited, a new start is allowed.
    expect((await s.start("x: 2", 2))?.ok).toBe(true);
    expect((await waitUntil(() => exits[1], "the second run's exit")).start_seq).toBe(2);
  });

  it("kills what a trainer that exited on its own left in its group after the grace period, and starts the next only then", async () => {
    // The helper ignores SIGTERM (a wedged data loader); the leader dies with code 3.
    const s = supervisor({ command: ["sh", "-c", "(trap '' TERM; while true; do sleep 0.1; done) & sleep 0.3; exit 3"], graceMs: 500 });
    expect((await s.start("x: 1", 1))?.ok).toBe(true);
    const pgid = s.status().pid as number;
    const exit = await waitUntil(() => exits[0], "the unexpected exit report");
    expect(exit.detail).toMatch(/sent SIGTERM to the processes it left in its group/);
    expect(groupAlive(pgid)).toBe(true);
    // The next start waits for them to be gone: never two trainers' processes on the GPUs.
    const next = await s.start("x: 2", 2);
    expect(next?.ok).toBe(true);
    expect(groupAlive(pgid)).toBe(false);
    expect(logger.has(/left in its group still run 0.5 s after SIGTERM: sending SIGKILL/)).toBe(true);
  });

  it("starts no trainer once the agent's shutdown has begun, not even one that was waiting for the last trainer's leftovers", async () => {
    // The leftovers ignore SIGTERM and the grace period runs on a clock nobody moves: the next start waits until the shutdown.
    const clock = new ManualClock();
    const s = supervisor({ command: ["sh", "-c", "(trap '' TERM; while true; do sleep 0.1; done) & sleep 0.3; exit 3"], graceMs: 60_000, clock });
    expect((await s.start("x: 1", 1))?.ok).toBe(true);
    const pgid = s.status().pid as number;
    await waitUntil(() => exits[0], "the unexpected exit report");
    expect(groupAlive(pgid)).toBe(true);
    const waiting = s.start("x: 2", 2);

    // Nothing was running (the agent's old check, a pid, found none): nothing to stop, and nothing may start.
    expect(await s.shutdown("the agent is shutting down")).toBeNull();
    expect(await waiting).toBeNull();
    expect(await s.start("x: 3", 3)).toBeNull();
    expect(s.status().pid).toBeNull();
    expect(existsSync(join(dir.path, "state", "trainer.json"))).toBe(false);
    expect(logText().match(/rollout-agent starts/g)).toHaveLength(1);
    expect(logger.has(/not starting the trainer \(command 2\): the agent is shutting down/)).toBe(true);
    // The agent's exit (close) takes the leftovers with it at once, whatever remains of their grace period.
    s.close();
    await waitUntil(() => !groupAlive(pgid), "the leftovers to be killed");
  });

  it("stops, with the rest of the agent's shutdown, a trainer whose spawn was under way when it began", async () => {
    const s = supervisor();
    const starting = s.start("a: 1", 1); // spawning: no pid known yet
    expect(s.status().pid).toBeNull();
    const stopped = await s.shutdown("the agent is shutting down");
    const started = await starting;
    expect(started?.ok).toBe(true);
    const pid = Number(/pid (\d+)/.exec(started?.detail ?? "")?.[1]);
    expect(stopped).toMatchObject({ ok: true, detail: expect.stringMatching(new RegExp(`^trainer pid ${pid} stopped`)) });
    expect(groupAlive(pid)).toBe(false);
    expect(s.status()).toEqual({ state: "idle", pid: null, started_at: null });
    expect(existsSync(join(dir.path, "state", "trainer.json"))).toBe(false);
  });

  it("finishes a stop when the group holds only a zombie nobody reaps", async () => {
    // The trainer forks a keeper that forks a child which exits at once; the keeper moves to a
    // group of its own and never reaps it. kill(-pgid, 0) still succeeds through that zombie,
    // and SIGKILL cannot end it: a stop that waited for it would never end (and never be acked).
    const trainer = [
      "import os, signal, time",
      "keeper = os.fork()",
      "if keeper == 0:",
      "    child = os.fork()",
      "    if child == 0: os._exit(0)",
      "    os.setpgid(0, 0)",
      "    print('keeper', os.getpid(), 'child', child, flush=True)",
      "    time.sleep(60); os._exit(0)",
      "signal.signal(signal.SIGTERM, lambda *a: os._exit(0))",
      "time.sleep(60)",
    ].join("\n");
    const s = supervisor({ command: ["python3", "-c", trainer], graceMs: 300 });
    expect((await s.start("x: 1", 1))?.ok).toBe(true);
    const [keeper, child] = (await waitUntil(() => /keeper (\d+) child (\d+)/.exec(logText()), "the keeper's pids")).slice(1).map(Number) as [number, number];
    try {
      await waitUntil(() => processState(child) === "Z" || undefined, "the child to be a zombie");
      const stopped = await Promise.race([s.stop("engine stopped"), new Promise<null>((r) => setTimeout(() => r(null), 5000))]);
      expect(stopped?.detail).toMatch(/stopped: exited with code 0 after SIGTERM/);
      expect(s.status().state).toBe("idle");
    } finally {
      process.kill(keeper, "SIGKILL");
    }
  });

  it("refuses a command that does not exist, in plain words", async () => {
    const s = supervisor({ command: ["definitely-not-a-trainer-xyz", "--conf", "{config}"] });
    const r = await s.start("x: 1", 1);
    expect(r).toEqual({ ok: false, detail: 'trainer command not found: "definitely-not-a-trainer-xyz" (check trainerCommand and PATH)' });
    expect(s.status().state).toBe("idle");
    expect(logger.has(/error trainer command not found/)).toBe(true);
  });

  it("refuses to run without a command, in a missing directory, or with a non-executable file", async () => {
    expect((await supervisor({ command: null }).start("x", 1))?.detail).toMatch(/no trainer command configured/);
    expect((await supervisor({ cwd: join(dir.path, "nope") }).start("x", 1))?.detail).toMatch(/working directory .*nope does not exist/);
    const notExec = join(dir.path, "not-executable");
    writeFileSync(notExec, "#!/bin/sh\n");
    expect((await supervisor({ command: [notExec] }).start("x", 1))?.detail).toMatch(/is not executable/);
  });

  it("runs one trainer at a time: a second start is refused, a redelivered start is harmless", async () => {
    const s = supervisor();
    expect((await s.start("a: 1", 5))?.ok).toBe(true);
    const pid = s.status().pid;
    expect(await s.start("a: 1", 5)).toEqual({ ok: true, detail: `trainer already running (pid ${pid}), started by this same command` });
    const second = await s.start("b: 2", 6);
    expect(second?.ok).toBe(false);
    expect(second?.detail).toMatch(new RegExp(`a trainer is already running on this agent \\(pid ${pid}, started .*\\); stop it before starting another`));
    expect(s.status().pid).toBe(pid);
  });

  it("refuses the start of an engine made again under the name whose seq is the running trainer's, and names the start's engine in its exit report, also once adopted", async () => {
    // An engine deleted and made again counts its commands from 1 again (docs/agent.md).
    const first = supervisor();
    expect((await first.start("a: 1", 2, "incarnation-old"))?.ok).toBe(true);
    const pid = first.status().pid as number;
    const again = await first.start("b: 2", 2, "incarnation-new");
    expect(again?.ok).toBe(false);
    expect(again?.detail).toMatch(/a trainer is already running on this agent/);
    first.close();

    // The next agent adopts it from the pid file, which keeps the incarnation.
    const second = supervisor();
    second.adopt();
    expect(second.status().pid).toBe(pid);
    expect((await second.start("a: 1", 2, "incarnation-old"))?.detail).toBe(`trainer already running (pid ${pid}), started by this same command`);
    expect((await second.start("b: 2", 2, "incarnation-new"))?.ok).toBe(false);
    process.kill(-pid, "SIGKILL");
    expect(await waitUntil(() => exits[0], "the adopted trainer's exit report")).toMatchObject({ start_seq: 2, start_incarnation: "incarnation-old" });
  });

  it("treats a stop with no trainer as done, and concurrent stops as one", async () => {
    const s = supervisor();
    expect(await s.stop("x")).toMatchObject({ ok: true, detail: "no trainer was running" });
    await s.start("a: 1", 1);
    const [a, b] = await Promise.all([s.stop("one"), s.stop("two")]);
    expect(a).toEqual(b);
    expect(logger.lines.filter((l) => l.includes("SIGTERM to its process group"))).toHaveLength(1);
  });

  it("adopts a trainer left running by a previous agent and can still stop it", async () => {
    const first = supervisor();
    await first.start("a: 1", 3);
    const pid = first.status().pid as number;
    first.close(); // the old agent is gone; its child keeps running

    const second = supervisor();
    second.adopt();
    expect(second.status()).toMatchObject({ state: "running", pid });
    expect(logger.has(new RegExp(`adopting trainer pid ${pid}`))).toBe(true);
    expect((await second.start("a: 1", 3))?.ok).toBe(true); // the same start, redelivered
    const stopped = await second.stop("engine stopped");
    expect(stopped.ok).toBe(true);
    expect(processAlive(pid)).toBe(false);
  });

  it("notices when an adopted trainer dies, and when it died while no agent was running", async () => {
    const first = supervisor();
    await first.start("a: 1", 3);
    const pid = first.status().pid as number;
    first.close();
    const second = supervisor();
    second.adopt();
    process.kill(-pid, "SIGKILL");
    const exit = await waitUntil(() => exits[0], "the adopted trainer's exit report");
    expect(exit).toMatchObject({ exit_code: null, signal: null, start_seq: 3 });
    expect(exit.detail).toMatch(/exited \(status unknown: adopted from a previous agent\)/);

    // A pid file whose trainer is gone: reported at once on adoption.
    writeFileSync(join(dir.path, "state", "trainer.json"), JSON.stringify({ pid, started_at: Date.now(), seq: 3 }));
    exits.length = 0;
    supervisor().adopt();
    expect(exits[0]).toMatchObject({ detail: `the trainer (pid ${pid}) exited while the agent was not running; its exit status is unknown`, start_seq: 3 });
    expect(existsSync(join(dir.path, "state", "trainer.json"))).toBe(false);
  });

  it("takes a pid file of valid JSON that is no object (null, a number) for none, and removes it", () => {
    mkdirSync(join(dir.path, "state"), { recursive: true });
    for (const text of ["null", "7", '"x"']) {
      writeFileSync(join(dir.path, "state", "trainer.json"), text);
      const s = supervisor();
      expect(() => s.adopt()).not.toThrow();
      expect(s.status()).toMatchObject({ pid: null });
      expect(existsSync(join(dir.path, "state", "trainer.json"))).toBe(false);
    }
    expect(exits).toEqual([]);
  });

  it("adopts by the start /proc gave the trainer, whatever the agent's clock said", async () => {
    // An agent whose clock is a day off: its note's started_at is no use to recognise the trainer.
    const first = supervisor({ clock: new ManualClock(Date.now() - 86_400_000) });
    await first.start("a: 1", 3);
    const pid = first.status().pid as number;
    first.close();
    // That agent is gone: its trainer is the next one's to stop, not the cleanup's (on a clock nobody moves).
    supervisors.splice(supervisors.indexOf(first), 1);
    expect(JSON.parse(readFileSync(join(dir.path, "state", "trainer.json"), "utf8"))).toMatchObject({ pid, proc_started_at: expect.any(Number) });
    const second = supervisor();
    second.adopt();
    expect(second.status()).toMatchObject({ state: "running", pid });
    await second.stop("test over");
    expect(processAlive(pid)).toBe(false);
  });

  it("does not adopt, nor later signal, a process that holds the noted pid but started after the noted trainer", async () => {
    // An unrelated daemon (its own session and group, as any daemon that called setsid()) that got the old trainer's pid.
    const daemon = spawn("sleep", ["120"], { detached: true, stdio: "ignore" });
    daemon.unref();
    const pid = daemon.pid as number;
    try {
      await waitUntil(() => processAlive(pid), "the daemon to run");
      // The previous agent's note, in the format of agents that recorded only their own clock: a trainer with this pid, a day before the daemon existed.
      mkdirSync(join(dir.path, "state"), { recursive: true });
      writeFileSync(join(dir.path, "state", "trainer.json"), JSON.stringify({ pid, started_at: Date.now() - 86_400_000, seq: 3 }));
      const s = supervisor();
      s.adopt();
      const adopted = s.status().pid;
      // The engine stops its trainer (an operator's stop_engine): the agent signals what it adopted.
      await s.stop("stop_engine");
      expect({ adopted, daemonAlive: processAlive(pid) }).toEqual({ adopted: null, daemonAlive: true });
      expect(exits[0]?.detail).toBe(
        `the trainer (pid ${pid}) exited while the agent was not running; its exit status is unknown; pid ${pid} now belongs to another process, which is left alone`,
      );
    } finally {
      process.kill(-pid, "SIGKILL");
    }
  });
});

describe("TrainerSupervisor on a full state disk", () => {
  it("refuses a start whose train-config.yaml cannot be written, saying why, instead of leaving it unanswered", async () => {
    const s = supervisor();
    const config = join(dir.path, "state", "train-config.yaml");
    unwritable(config);
    // Seen: the start never acked, handed out again after every lease.
    const out = await s.start("x: 1", 1);
    expect(out).toEqual({ ok: false, detail: expect.stringMatching(new RegExp(`^cannot write ${config}: E[A-Z]+: `)) as string });
    expect(s.status().pid).toBeNull();
  });

  it("watches a trainer started while trainer.json cannot be written: its death is reported", async () => {
    const s = supervisor({ command: ["sh", "-c", "echo training; sleep 0.3; kill -9 $$"] });
    const pidFile = join(dir.path, "state", "trainer.json");
    unwritable(pidFile);
    expect((await s.start("x: 1", 1))?.ok).toBe(true);
    expect(logger.has(new RegExp(`^warn cannot write ${pidFile} .*an agent restarted after a crash will not find it`))).toBe(true);
    // Seen: the engine left ONLINE, and every later start refused "a trainer is already running".
    const exit = await waitUntil(() => exits[0], "the trainer's death to be reported");
    expect(exit.signal).toBe("SIGKILL");
    expect(s.status().state).toBe("exited");
  });
});

describe("TrainerLog", () => {
  it("rotates by copy-and-truncate and keeps a bounded number of files", async () => {
    const log = new TrainerLog(dir.path);
    const rotate = () => rotateLog(log.path, 100, 2);
    const write = (text: string): void => writeFileSync(log.path, text, { flag: "a" });
    write("a".repeat(150) + "\n");
    expect(await rotate()).toBe(true);
    expect(readFileSync(log.path, "utf8")).toBe("");
    write("b".repeat(150) + "\n");
    await rotate();
    write("c".repeat(150) + "\n");
    await rotate();
    expect(readFileSync(`${log.path}.1`, "utf8")[0]).toBe("c");
    expect(readFileSync(`${log.path}.2`, "utf8")[0]).toBe("b");
    expect(existsSync(`${log.path}.3`)).toBe(false);
    expect(await rotate()).toBe(false);
  });

  it("keeps logFiles copies after the setting was lowered: the copies past it an earlier agent left go too", async () => {
    // From 5 copies to 2 (a filling disk): trainer.log.3 to .5, 50 MB each by default, stayed for ever.
    const log = new TrainerLog(dir.path);
    for (const n of [1, 2, 3, 5]) writeFileSync(`${log.path}.${n}`, `old copy ${n}\n`);
    writeFileSync(`${log.path}.x`, "not a copy\n");
    writeFileSync(log.path, "d".repeat(150) + "\n");
    expect(await rotateLog(log.path, 100, 2)).toBe(true);
    expect(readdirSync(dir.path).filter((f) => f.startsWith("trainer.log")).sort()).toEqual(["trainer.log", "trainer.log.1", "trainer.log.2", "trainer.log.x"]);
    expect([readFileSync(`${log.path}.1`, "utf8")[0], readFileSync(`${log.path}.2`, "utf8")]).toEqual(["d", "old copy 1\n"]);
  });

  it("tails the last lines, dropping a partial first line", () => {
    const log = new TrainerLog(dir.path);
    writeFileSync(log.path, Array.from({ length: 100 }, (_, i) => `line ${i}`).join("\n") + "\n");
    expect(log.tail(3)).toBe("line 97\nline 98\nline 99");
    expect(log.tail(100, 20)).toBe("line 98\nline 99");
    expect(new TrainerLog(join(dir.path, "none")).tail()).toBe("");
  });
});

describe("a trainer's leftovers", () => {
  /** SIGKILLs the group `pgid` after the test, whatever the test left of it. */
  const killGroup = (pgid: number): void => {
    try {
      process.kill(-pgid, "SIGKILL");
    } catch {
      // gone
    }
  };

  it("an adopted trainer whose leader dies while a helper runs is reported, and the helper stopped, as for a trainer the agent started", async () => {
    const command = ["sh", "-c", 'sleep 300 & echo "helper pid $!"; while :; do sleep 0.05; done'];
    const first = supervisor({ command });
    expect((await first.start("x: 1", 4, "inc-1"))?.ok).toBe(true);
    const pid = first.status().pid as number;
    try {
      const helper = Number((await waitUntil(() => /helper pid (\d+)/.exec(logText()), "the helper to start"))[1]);
      // The agent goes away (as if SIGKILLed); the next one adopts the trainer.
      first.close();
      supervisors.splice(supervisors.indexOf(first), 1);
      const second = supervisor({ command });
      second.adopt();
      expect(second.status()).toMatchObject({ state: "running", pid });
      // The trainer itself dies (the OOM killer); its helper lives on in its group.
      process.kill(pid, "SIGKILL");
      await waitUntil(() => exits.length > 0, "the adopted trainer's exit to be reported");
      expect(exits[0]).toMatchObject({ exit_code: null, signal: null, start_seq: 4, start_incarnation: "inc-1" });
      expect(exits[0]!.detail).toMatch(/sent SIGTERM to the processes it left in its group/);
      await waitUntil(() => !processAlive(helper), "the helper to be stopped");
      expect(second.status()).toMatchObject({ state: "exited", pid: null });
    } finally {
      killGroup(pid);
    }
  });

  it("a stop after the trainer exited on its own is done only once what it left in its group is gone", async () => {
    // The trainer exits at once, leaving a helper that ignores SIGTERM: it is SIGKILLed after the grace period.
    const s = supervisor({ command: ["sh", "-c", `sh -c 'trap "" TERM; echo "helper pid $$"; while :; do sleep 0.05; done' & sleep 0.3; exit 2`], graceMs: 1000 });
    expect((await s.start("x: 1", 1))?.ok).toBe(true);
    const pid = s.status().pid as number;
    try {
      const helper = Number((await waitUntil(() => /helper pid (\d+)/.exec(logText()), "the helper to start"))[1]);
      await waitUntil(() => exits.length > 0, "the trainer's exit to be reported");
      expect(processAlive(helper)).toBe(true);
      const stopped = await s.stop("engine stopped");
      expect(stopped).toMatchObject({ ok: true, detail: "no trainer was running; the processes the last one left in its group were stopped" });
      expect(processAlive(helper)).toBe(false);
    } finally {
      killGroup(pid);
    }
  });
});

