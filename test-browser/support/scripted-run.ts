/**
 * A small training run through the real API, as the trainer and clients would make it: the
 * trainer goes ROLLING at step 1, registers episodes, clients claim and end them with rewards,
 * and each time the trainer advances global_step the engine finalizes the finished step's
 * reward statistics. Rewards are chosen so every step has a different mean and spread.
 */
import type { TestEngine } from "./exchange";

export type RunOptions = {
  steps: number;
  episodesPerStep: number;
  /** Episodes left claimed (running) after the last step, so the page has some to show. */
  leaveRunning?: number;
  /** Episodes left registered and unclaimed at the end. */
  leaveRegistered?: number;
  /** Episodes ended in the current, still open step (the page's "tasks finished this step"). */
  finishInOpenStep?: number;
  /**
   * Play a GPU host's agent: heartbeat, and ack the delivery of every result but the last
   * `leavePending`. Without it, results have no runner address and no delivery is made.
   */
  agent?: { leavePending: number };
};

/** The reward of episode `i` of `step`: a learning curve that rises and flattens, spread by i. */
export const rewardOf = (step: number, i: number): number =>
  Number((0.85 - 0.65 * Math.exp(-step / 3.5) + 0.06 * (((i * 7) % 5) - 2) / (1 + step / 6)).toFixed(4));

let serial = 0;

/** One episode from registration to its end, with `reward`, on task `task-<i % 5>`. */
async function playEpisode(engine: TestEngine, i: number, reward: number, runner: string): Promise<void> {
  const episode_uuid = `ep-${(serial++).toString().padStart(4, "0")}-${i}`;
  await engine.as("trainer").registerEpisode({ episode_uuid, zmq_listen_result_addr: runner });
  const client_uuid = `client-${i % 3}`;
  const task_id = `task-${i % 5}`;
  const client = engine.as("client");
  const claim = await client.claimEpisode({ client_uuid, discard_episode_timeout: 600, throttle_policy: { current_task_id: task_id } });
  if (!claim.success) throw new Error(`claim failed: ${claim.fail_cause}`);
  await client.endEpisode({ client_uuid, episode_uuid: claim.episode_uuid, task_id, workflow_output: { reward, is_success: true, metadata: { task_id } } });
}

export async function scriptRun(engine: TestEngine, opts: RunOptions): Promise<void> {
  const trainer = engine.as("trainer");
  const client = engine.as("client");
  // A result is delivered to the runner at this address by the agent; no agent, no address.
  const runner = opts.agent ? "tcp://127.0.0.1:5557" : "";
  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
  for (let step = 1; step <= opts.steps; step++) {
    for (let i = 0; i < opts.episodesPerStep; i++) await playEpisode(engine, i, rewardOf(step, i), runner);
    // Advancing the step closes the previous one: its reward statistics join the history.
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", engine_status_detail: `rolling step ${step + 1}`, global_step: step + 1 });
  }
  for (let i = 0; i < (opts.finishInOpenStep ?? 0); i++) await playEpisode(engine, i, rewardOf(opts.steps + 1, i), runner);
  if (opts.agent) await playAgent(engine, opts.agent.leavePending);
  for (let i = 0; i < (opts.leaveRunning ?? 0); i++) {
    await trainer.registerEpisode({ episode_uuid: `running-${i}` });
    const claim = await client.claimEpisode({ client_uuid: `runner-${i}`, discard_episode_timeout: 300, throttle_policy: { current_task_id: `task-${i}` } });
    if (!claim.success) throw new Error(`claim failed: ${claim.fail_cause}`);
  }
  for (let i = 0; i < (opts.leaveRegistered ?? 0); i++) await trainer.registerEpisode({ episode_uuid: `waiting-${i}` });
}

/** The agent's side: one heartbeat, then every delivery command acked except the newest few. */
async function playAgent(engine: TestEngine, leavePending: number): Promise<void> {
  const trainer = engine.as("trainer");
  await trainer.heartbeat({
    agent_id: "agent-1",
    host: "gpu-node-1",
    pid: 4242,
    version: "0.1.0",
    trainer: { state: "running", pid: 4243, started_at: Date.now() / 1000 - 3600 },
    rollout_workers: { state: "running", pid: 4250, job_session: "job-1", detail: "running, group size 4" },
  });
  const deliveries = [];
  for (;;) {
    const { commands } = await trainer.pollCommands({ limit: 100 });
    if (commands.length === 0) break;
    deliveries.push(...commands.filter((c) => c.body.kind === "deliver"));
  }
  for (const c of deliveries.slice(0, Math.max(0, deliveries.length - leavePending))) await trainer.ackCommand({ seq: c.seq, ok: true, detail: "delivered" });
}
