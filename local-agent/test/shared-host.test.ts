/**
 * A GPU host shared with other users: what the agent writes is its own user's alone, a planted
 * symlink does not redirect its writes, and the processes it starts do not inherit its trainer
 * token. Real files, real child processes.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { realClock } from "../src/clock";
import { privateDir } from "../src/host-files";
import { OutcomeJournal } from "../src/outcome-journal";
import { RunProcess } from "../src/runs/run-process";
import { runWithDeadline } from "../src/runs/run-with-deadline";
import { TrainerSupervisor } from "../src/trainer";
import { TrainerLog } from "../src/trainer-log";
import { MemoryLogger } from "./support/logger";
import { tempDir } from "./support/temp";
import { waitUntil } from "./support/wait";

const TOKEN = "rx_trainer_shared_host_token_0123456789";
const mode = (p: string): string => (statSync(p).mode & 0o7777).toString(8).padStart(3, "0");

let dir: ReturnType<typeof tempDir>;
let logger: MemoryLogger;
const cleanups: Array<() => unknown> = [];
beforeEach(() => {
  dir = tempDir();
  logger = new MemoryLogger();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  dir.remove();
});

/** As the CLI is run: ROLLOUT_TRAINER_TOKEN=... rollout-agent */
function tokenInEnvironment(): void {
  const before = process.env.ROLLOUT_TRAINER_TOKEN;
  process.env.ROLLOUT_TRAINER_TOKEN = TOKEN;
  cleanups.push(() => (before === undefined ? delete process.env.ROLLOUT_TRAINER_TOKEN : (process.env.ROLLOUT_TRAINER_TOKEN = before)));
}

function trainer(stateDir: string, logDir: string, command: string[]): TrainerSupervisor {
  const s = new TrainerSupervisor({
    command,
    cwd: null,
    stateDir,
    log: new TrainerLog(logDir),
    graceMs: 2000,
    placeholders: { facade_url: "http://127.0.0.1:1", facade_port: "1", engine: "e" },
    env: { ROLLOUT_FACADE_URL: "http://127.0.0.1:1" },
    logger,
    clock: realClock,
    onUnexpectedExit: () => {},
  });
  cleanups.push(async () => {
    await s.stop("cleanup");
    s.close();
  });
  return s;
}

describe("the agent's files on a shared host", () => {
  it("makes the state and log dirs, synced train config, pid note, trainer log and outcome journal owner-only, also dirs that exist open to others", async () => {
    const stateDir = join(dir.path, "state");
    const logDir = join(dir.path, "logs");
    for (const d of [stateDir, logDir]) {
      mkdirSync(d);
      chmodSync(d, 0o755);
    }
    const s = trainer(stateDir, logDir, ["sh", "-c", "echo trainer up; exec sleep 30", "x", "{config}"]);
    expect(await s.start("secret_api_key: sk-upstream-123\n", 1)).toMatchObject({ ok: true });
    new OutcomeJournal(stateDir, "http://127.0.0.1:1/e/e").record(1, null, { ok: true, detail: "x" });
    const files = [stateDir, logDir, join(stateDir, "train-config.yaml"), join(stateDir, "trainer.json"), join(logDir, "trainer.log"), join(stateDir, "outcomes.jsonl")];
    expect(Object.fromEntries(files.map((p) => [p.slice(dir.path.length), mode(p)]))).toEqual({
      "/state": "700",
      "/logs": "700",
      "/state/train-config.yaml": "600",
      "/state/trainer.json": "600",
      "/logs/trainer.log": "600",
      "/state/outcomes.jsonl": "600",
    });
    expect(logger.lines.filter((l) => l.includes("owner-only"))).toEqual([
      `info made ${stateDir} owner-only (mode 0755 -> 0700): the agent's configs, logs and notes in it are for its own user`,
      `info made ${logDir} owner-only (mode 0755 -> 0700): the agent's configs, logs and notes in it are for its own user`,
    ]);
  });

  it("makes a log an older agent left open to others owner-only when it next writes to it", async () => {
    const logDir = join(dir.path, "logs");
    mkdirSync(logDir);
    writeFileSync(join(logDir, "trainer.log"), "an older agent's lines\n", { mode: 0o644 });
    chmodSync(join(logDir, "trainer.log"), 0o644);
    const s = trainer(join(dir.path, "state"), logDir, ["sh", "-c", "exec sleep 30", "x", "{config}"]);
    expect(await s.start("x: 1\n", 1)).toMatchObject({ ok: true });
    expect(mode(join(logDir, "trainer.log"))).toBe("600");
  });

  it("writes the synced train config through a temporary file that a planted symlink does not redirect", async () => {
    const stateDir = join(dir.path, "state");
    mkdirSync(stateDir);
    const target = join(dir.path, "elsewhere");
    writeFileSync(target, "untouched");
    const config = join(stateDir, "train-config.yaml");
    symlinkSync(target, `${config}.tmp-${process.pid}`);
    const s = trainer(stateDir, join(dir.path, "logs"), ["sh", "-c", "exec sleep 30", "x", "{config}"]);
    expect(await s.start("secret_api_key: sk-upstream-123\n", 1)).toMatchObject({ ok: true });
    expect(readFileSync(target, "utf8")).toBe("untouched");
    expect(readFileSync(config, "utf8")).toBe("secret_api_key: sk-upstream-123\n");
    expect(mode(config)).toBe("600");
  });

  it("leaves a shared sticky directory (like /tmp) as it is, and says why", () => {
    const shared = join(dir.path, "shared");
    mkdirSync(shared);
    chmodSync(shared, 0o1777);
    privateDir(shared, logger);
    expect(mode(shared)).toBe("1777");
    expect(logger.has(/shared \(mode 0777, sticky\): left as it is/)).toBe(true);
  });
});

describe("the agent's trainer token and the processes it starts", () => {
  it("is in the environment of none of them: trainer, run process, short-lived helper", async () => {
    tokenInEnvironment();
    // The marker is quoted so that only the output, not the logged command, holds it.
    const printEnv = ["sh", "-c", 'env; echo env-"done"; [ "$1" = wait ] && exec sleep 30; exit 0', "x"];

    const logDir = join(dir.path, "logs");
    const s = trainer(join(dir.path, "state"), logDir, [...printEnv, "wait", "{config}"]);
    expect(await s.start("x: 1\n", 1)).toMatchObject({ ok: true });
    const trainerLog = join(logDir, "trainer.log");
    await waitUntil(() => existsSync(trainerLog) && readFileSync(trainerLog, "utf8").includes("env-done"), "the trainer to print its environment");
    expect(readFileSync(trainerLog, "utf8")).toContain("ROLLOUT_FACADE_URL=http://127.0.0.1:1");
    expect(readFileSync(trainerLog, "utf8")).not.toContain(TOKEN);

    const runLog = join(dir.path, "env.log");
    const p = new RunProcess("env", 0, [...printEnv, "exit"], runLog, realClock);
    expect(await p.spawn({ cwd: null, env: { ROLLOUT_RUN_ID: "run_x" } })).toBeNull();
    await waitUntil(() => p.ended(), "the run process to exit");
    expect(readFileSync(runLog, "utf8")).toContain("ROLLOUT_RUN_ID=run_x");
    expect(readFileSync(runLog, "utf8")).not.toContain(TOKEN);

    const helper = await runWithDeadline([...printEnv, "exit"], { deadlineMs: 10_000, clock: realClock });
    expect(helper.stdout).toContain("env-done");
    expect(helper.stdout).not.toContain(TOKEN);
  });
});
