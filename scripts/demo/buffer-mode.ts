/**
 * The demo through the rollout buffer (the slime / AIEvoBox contract): rollout workers sample a
 * group of answers per task from the policy, post them as step rows with the group's id, and
 * the trainer pulls whole ready groups with get_rollout_data, learning from each group against
 * its own mean reward (GRPO). Workers call the policy directly, as slime's do through its router:
 * the buffer has no claims, so there is no per-claim key to relay with.
 */
import { EngineClient } from "../../src/client";
import { MODEL, type Policy, type Sample } from "./policy";
import { pick, type Rng } from "./rng";
import { TASKS, TOOLS, prompt, reward, type Task, type Tool } from "./tasks";
import type { StepResult } from "./agentjet-trainer";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What the trainer asks the rollout workers for: groups still to produce for this weight version. */
export class GroupRequests {
  wanted = 0;
  version = 0;
  take(): number | null {
    if (this.wanted <= 0) return null;
    this.wanted--;
    return this.version;
  }
  /** A group taken for `version` that could not be made; forgotten if the trainer has moved on. */
  giveBack(version: number): void {
    if (version === this.version) this.wanted++;
  }
}

export async function runBufferTrainer(
  trainer: EngineClient,
  policy: Policy,
  requests: GroupRequests,
  o: { steps: number; groupsPerStep: number; groupSize: number },
  onStep: (r: StepResult) => void,
): Promise<StepResult[]> {
  await trainer.startRollout({ num_repeat_per_sample: o.groupSize });
  const results: StepResult[] = [];
  for (let step = 1; step <= o.steps; step++) {
    const t0 = performance.now();
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: step, weight_version: policy.version });
    requests.version = policy.version;
    requests.wanted = o.groupsPerStep;
    const samples: Sample[] = [];
    let groups = 0;
    const stallAt = performance.now() + 60_000;
    while (groups < o.groupsPerStep) {
      if (performance.now() > stallAt) throw new Error(`step ${step}: ${groups} of ${o.groupsPerStep} groups in 60 s`);
      const pulled = await trainer.getRolloutData({ max_groups: o.groupsPerStep - groups });
      groups += pulled.data.meta_info.finished_groups.length;
      for (const item of pulled.data.data) {
        const taskId = item.extra_info["task_id"];
        const tool = item.extra_info["tool"];
        if (typeof taskId === "string" && TOOLS.includes(tool as Tool)) samples.push({ taskId, tool: tool as Tool, reward: item.reward });
      }
      if (groups < o.groupsPerStep) await sleep(20);
    }
    policy.learn(samples);
    const r = { step, meanReward: samples.reduce((a, s) => a + s.reward, 0) / samples.length, episodes: samples.length, seconds: (performance.now() - t0) / 1000 };
    results.push(r);
    onStep(r);
  }
  await trainer.updateEngineStatus({ engine_status: "ENGINE.OFFLINE", engine_status_detail: "the demo's training finished", global_step: o.steps + 1, weight_version: policy.version });
  return results;
}

export async function runBufferWorker(
  id: number,
  engine: EngineClient,
  policyUrl: string,
  requests: GroupRequests,
  groupSize: number,
  rng: Rng,
  stopped: () => boolean,
): Promise<void> {
  let n = 0;
  while (!stopped()) {
    const version = requests.take();
    if (version === null) {
      await sleep(20);
      continue;
    }
    try {
      await postGroup(engine, policyUrl, `w${id}-g${n++}`, pick(rng, TASKS), groupSize, version);
    } catch (e) {
      // The group is still owed: hand it back for this worker or another to make. Said unless
      // the demo is stopping: then the error is the exchange or the policy going away.
      requests.giveBack(version);
      if (!stopped()) process.stderr.write(`[demo] rollout worker ${id}: ${e instanceof Error ? e.message : String(e)}; retrying\n`);
      await sleep(500);
    }
  }
}

/** One group: `groupSize` sessions of one task, sampled from the policy, posted as one batch of rows. */
async function postGroup(engine: EngineClient, policyUrl: string, name: string, task: Task, groupSize: number, version: number): Promise<void> {
  const group_id = `${name}-${task.id}`;
  const steps = [];
  for (let s = 0; s < groupSize; s++) {
    const messages = [{ role: "user", content: prompt(task) }];
    const res = await fetch(`${policyUrl}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages, temperature: 1 }),
    });
    if (!res.ok) throw new Error(`the policy answered ${res.status}: ${await res.text()}`);
    const answer = (await res.json()) as { choices: { message: { content: string } }[] };
    const tool = answer.choices[0]?.message.content ?? "";
    steps.push({
      session_id: `${group_id}-s${s}`,
      group_id,
      step_index: 0,
      messages,
      response: tool,
      reward: reward(task, tool),
      is_session_completed: true,
      weight_version: version,
      task_id: task.id,
      tool,
    });
  }
  await engine.postSteps({ steps });
}
