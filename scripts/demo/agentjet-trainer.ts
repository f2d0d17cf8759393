/**
 * The demo's trainer, speaking AgentJet's trainer protocol to the agent's facade as an
 * unmodified AgentJet trainer does. Each step it registers a batch of episodes, each served by
 * its own runner (agentjet-runner.ts: an LLM socket and a result socket of its own), takes a
 * policy-gradient step on what the runners recorded, and moves the engine through a weight sync
 * to the next global step.
 */
import { TOOLS } from "./tasks";
import type { Policy, Sample } from "./policy";
import { EpisodeRunner, agentJetKey } from "./agentjet-runner";

export type StepResult = { step: number; meanReward: number; episodes: number; seconds: number; relayedCalls?: number };

const STEP_STALL_MS = 60_000;
/** AgentJet names the agent and the target of an episode's calls in its key. */
const AGENT_NAME = "demo-agent";
const TARGET_TAG = "policy";

export class AgentJetTrainer {
  private runners: EpisodeRunner[] = [];
  private stopped = false;
  /** The runners of the step being set up, once each is bound (or failed to be). */
  private binding: Promise<PromiseSettledResult<EpisodeRunner>[]> = Promise.resolve([]);

  constructor(
    private readonly facade: string,
    private readonly policy: Policy,
    private readonly policyUrl: string,
    private readonly episodesPerStep: number,
    /** Where the runners bind their ipc sockets. */
    private readonly socketDir: string,
  ) {}

  close(): void {
    for (const r of this.runners) r.close();
  }

  /**
   * Closes the runners for good: no step binds new ones after this, and it resolves once none
   * is still binding, so no socket file appears in socketDir after it (which is then removed).
   */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const r of await this.binding) if (r.status === "fulfilled") r.value.close();
    this.close();
  }

  async run(steps: number, onStep: (r: StepResult) => void): Promise<StepResult[]> {
    const results: StepResult[] = [];
    for (let step = 1; step <= steps; step++) {
      const t0 = performance.now();
      await this.call("/update_engine_status", { engine_status: "ENGINE.ROLLING", global_step: step, weight_version: this.policy.version });
      const { samples, relayedCalls } = await this.rollout(step);
      this.policy.learn(samples);
      // Leaving ROLLING ends the step's rolling phase, as a real trainer's weight sync does.
      await this.call("/update_engine_status", { engine_status: "ENGINE.WEIGHT_SYNCING" });
      const meanReward = samples.reduce((a, s) => a + s.reward, 0) / samples.length;
      const r = { step, meanReward, episodes: samples.length, seconds: (performance.now() - t0) / 1000, relayedCalls };
      results.push(r);
      onStep(r);
    }
    // A new global step writes the last one's reward history; the trainer is done.
    await this.call("/update_engine_status", { engine_status: "ENGINE.OFFLINE", engine_status_detail: "the demo's training finished", global_step: steps + 1 });
    return results;
  }

  /**
   * One step's episodes. A sample is what the episode's runner saw itself: the task of the
   * prompt and the tool it answered on its LLM socket, and the reward of the result that came
   * to its result socket. Nothing the client wrote in the result's metadata is trusted.
   */
  private async rollout(step: number): Promise<{ samples: Sample[]; relayedCalls: number }> {
    if (this.stopped) throw new Error(`step ${step}: the trainer was stopped`);
    const binds = Array.from({ length: this.episodesPerStep }, (_, i) => EpisodeRunner.bind(`s${step}-e${i}`, this.socketDir, this.policyUrl));
    this.binding = Promise.allSettled(binds);
    this.runners = await Promise.all(binds);
    try {
      await Promise.all(
        this.runners.map((r) =>
          this.call("/register_episode", {
            episode_uuid: r.episode,
            // AgentJet registers its interchange server here; the agent's gateway goes to the
            // runner over ZeroMQ for an sk-ajet- key instead.
            openai_base_url: this.policyUrl,
            openai_api_key: agentJetKey({ agent_name: AGENT_NAME, target_tag: TARGET_TAG, episode_uuid: r.episode, episode_address: r.llmAddress }),
            zmq_listen_result_addr: r.resultAddress,
          }),
        ),
      );
      let stalled: NodeJS.Timeout | undefined;
      const stall = new Promise<never>((_, reject) => {
        stalled = setTimeout(() => {
          const done = this.runners.filter((r) => r.finished).length;
          reject(new Error(`step ${step}: ${done} of ${this.runners.length} results in ${STEP_STALL_MS / 1000} s`));
        }, STEP_STALL_MS);
      });
      try {
        await Promise.race([Promise.all(this.runners.map((r) => r.result)), stall]);
      } finally {
        clearTimeout(stalled);
      }
      const samples: Sample[] = [];
      for (const r of this.runners) {
        const s = r.sample();
        if (typeof s === "string") throw new Error(`episode ${r.episode}: ${s}`);
        if (!TOOLS.includes(s.tool)) throw new Error(`episode ${r.episode}: the runner answered '${s.tool}', not a tool`);
        samples.push(s);
      }
      return { samples, relayedCalls: this.runners.reduce((a, r) => a + r.llmCalls, 0) };
    } finally {
      this.close();
    }
  }

  private async call(path: string, body: unknown): Promise<void> {
    const res = await fetch(this.facade + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const json = (await res.json()) as { success?: boolean; failure_reason?: string; detail?: string };
    if (!res.ok || json.success === false) throw new Error(`${path}: ${res.status} ${json.failure_reason ?? json.detail ?? JSON.stringify(json)}`);
  }
}
