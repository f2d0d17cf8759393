/**
 * The demo's trainer, speaking AgentJet's trainer protocol to the agent's facade, as an
 * unmodified AgentJet trainer does: each step it registers a batch of episodes whose results
 * come back over ZeroMQ (one REP socket, acking every message), takes a policy-gradient step
 * on them, and moves the engine through a weight sync to the next global step.
 */
import { Reply } from "zeromq";
import { WorkflowOutput } from "../../src/protocol/swarm";
import { TOOLS, type Tool } from "./tasks";
import type { Policy, Sample } from "./policy";

export type StepResult = { step: number; meanReward: number; episodes: number; seconds: number };

const STEP_STALL_MS = 60_000;

export class AgentJetTrainer {
  private readonly sock = new Reply({ linger: 0 });
  private address = "";
  private waiting: ((s: Sample) => void) | null = null;
  /** Results that arrived for episodes of the step in progress, by episode id. */
  private received = new Map<string, Sample>();
  private stepPrefix = "";

  constructor(
    private readonly facade: string,
    private readonly policy: Policy,
    private readonly policyUrl: string,
    private readonly episodesPerStep: number,
  ) {}

  async start(): Promise<void> {
    await this.sock.bind("tcp://127.0.0.1:*");
    this.address = this.sock.lastEndpoint as string;
    void this.serve();
  }

  close(): void {
    if (!this.sock.closed) this.sock.close();
  }

  async run(steps: number, onStep: (r: StepResult) => void): Promise<StepResult[]> {
    const results: StepResult[] = [];
    for (let step = 1; step <= steps; step++) {
      const t0 = performance.now();
      await this.call("/update_engine_status", { engine_status: "ENGINE.ROLLING", global_step: step, weight_version: this.policy.version });
      const samples = await this.rollout(step);
      this.policy.learn(samples);
      // Leaving ROLLING ends the step's rolling phase, as a real trainer's weight sync does.
      await this.call("/update_engine_status", { engine_status: "ENGINE.WEIGHT_SYNCING" });
      const r = { step, meanReward: samples.reduce((a, s) => a + s.reward, 0) / samples.length, episodes: samples.length, seconds: (performance.now() - t0) / 1000 };
      results.push(r);
      onStep(r);
    }
    // A new global step writes the last one's reward history; the trainer is done.
    await this.call("/update_engine_status", { engine_status: "ENGINE.OFFLINE", engine_status_detail: "the demo's training finished", global_step: steps + 1 });
    return results;
  }

  private async rollout(step: number): Promise<Sample[]> {
    this.stepPrefix = `s${step}-`;
    this.received = new Map();
    const ids = Array.from({ length: this.episodesPerStep }, (_, i) => `${this.stepPrefix}${i}`);
    await Promise.all(
      ids.map((episode_uuid) =>
        this.call("/register_episode", { episode_uuid, openai_base_url: this.policyUrl, openai_api_key: "sk-demo-policy", zmq_listen_result_addr: this.address }),
      ),
    );
    while (this.received.size < ids.length) {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`step ${step}: no result for ${STEP_STALL_MS / 1000} s (${this.received.size} of ${ids.length} in)`)), STEP_STALL_MS);
        this.waiting = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    return [...this.received.values()];
  }

  private async serve(): Promise<void> {
    try {
      for await (const [msg] of this.sock) {
        this.take(msg?.toString("utf8") ?? "");
        await this.sock.send("ack");
      }
    } catch {
      // closed
    }
  }

  /** A result of this step's episodes; runner control messages (resets) and repeats change nothing. */
  private take(text: string): void {
    let output: WorkflowOutput;
    try {
      output = WorkflowOutput.parse(JSON.parse(text));
    } catch {
      return;
    }
    const episode = output.metadata["episode_uuid"];
    const taskId = output.metadata["task_id"];
    const tool = output.metadata["tool"];
    if (typeof episode !== "string" || !episode.startsWith(this.stepPrefix) || typeof taskId !== "string") return;
    if (typeof output.reward !== "number" || !TOOLS.includes(tool as Tool)) return;
    this.received.set(episode, { taskId, tool: tool as Tool, reward: output.reward });
    const w = this.waiting;
    this.waiting = null;
    w?.(this.received.get(episode)!);
  }

  private async call(path: string, body: unknown): Promise<void> {
    const res = await fetch(this.facade + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const json = (await res.json()) as { success?: boolean; failure_reason?: string; detail?: string };
    if (!res.ok || json.success === false) throw new Error(`${path}: ${res.status} ${json.failure_reason ?? json.detail ?? JSON.stringify(json)}`);
  }
}
