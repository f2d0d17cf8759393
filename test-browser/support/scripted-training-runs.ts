/**
 * Training runs through the real runs API, with the GPU host's agent played through its
 * trainer-token routes, as the Worker tests do (no agent process needed): the agent reports its
 * catalog, an operator selects an environment and starts runs, and the agent reports each run's
 * processes and metrics. Earlier runs end completed, failed or stopped; the last stays running.
 */
import type { z } from "zod";
import type { ProcessReport } from "../../src/protocol/runs";
import { sampleCatalog } from "../../test/support/sample-catalog";
import type { TestEngine } from "./exchange";

type Process = z.input<typeof ProcessReport>;

const NOW = () => Date.now() / 1000;

/** The three processes of a tinker-atropos run, all in `state`. */
export function processes(state: Process["state"], extra: Partial<Process> = {}): Process[] {
  return ["api", "trainer", "env"].map((name, order) => ({
    name,
    order,
    state,
    pid: 7000 + order,
    command: `${name} --config run.yaml`,
    started_at: NOW() - 600,
    ...(state === "ready" ? { ready_at: NOW() - 590 + order } : {}),
    ...extra,
  }));
}

/** Metrics lines as a run's processes append them. */
export const metricsAt = (index: number, step: number) => ({
  index,
  step,
  at: NOW(),
  values: { "train/reward_mean": Number((0.2 + step * 0.05).toFixed(3)), "train/loss": Number((1.5 / step).toFixed(4)), "eval/accuracy": 0.4 + step / 100, note: `step ${step}` },
});

export type RunsScript = { finished: number };

/** Runs `finished` runs to an end, then starts one more and leaves it running. Returns its id. */
export async function scriptTrainingRuns(engine: TestEngine, opts: RunsScript): Promise<string> {
  const operator = engine.runsAs("operator");
  const agent = engine.runsAs("trainer");
  await agent.reportCatalog(sampleCatalog());
  await operator.selectEnvironment({ name: "gsm8k" });
  await operator.editConfig("group_size", 8);
  for (let i = 0; i < opts.finished; i++) {
    const { run_id } = await operator.startRun();
    await agent.reportRun(run_id, { status: "running", processes: processes("ready"), metrics: [metricsAt(0, 1)] });
    if (i % 3 === 0) await agent.reportRun(run_id, { status: "completed", detail: "env exited with code 0", processes: processes("exited", { exit_code: 0, ended_at: NOW() }) });
    else if (i % 3 === 1) await agent.reportRun(run_id, { status: "failed", detail: "trainer exited with code 1", processes: processes("failed", { exit_code: 1, ended_at: NOW() }) });
    else await operator.stopRun(run_id, { reason: "enough", force: true });
  }
  const { run_id } = await operator.startRun();
  await agent.reportRun(run_id, {
    status: "running",
    agent_id: "gpu-node-1",
    processes: [...processes("ready").slice(0, 2), ...processes("starting").slice(2)],
    metrics: [metricsAt(0, 1), metricsAt(1, 2), metricsAt(2, 3)],
  });
  return run_id;
}
