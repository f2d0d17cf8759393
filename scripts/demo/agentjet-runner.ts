/**
 * One episode's runner, as AgentJet's swarm runner keeps one per registered episode:
 *
 * - an LLM socket (REP, ipc) at the `episode_address` its `sk-ajet-` key names. The agent's
 *   gateway sends each of the episode's relayed calls there as AgentJet's interchange JSON; the
 *   runner asks the policy server (what vLLM is to AgentJet) and answers the ChatCompletion,
 *   recording the call as AgentJet's context tracker does: that record is what the trainer learns
 *   from.
 * - a result socket (REP, ipc) at its `zmq_listen_result_addr`. "RUNNER.SPECIAL.RESET_CONTEXT_TRACKER"
 *   (the claim was reaped; the episode will be claimed again) forgets the calls and keeps
 *   listening; anything else is the workflow output: the runner replies "ack" and closes both.
 *
 * A result is the episode's by the address it arrived on, never by what the client wrote in it.
 */
import { join } from "node:path";
import { Reply } from "zeromq";
import { z } from "zod";
import { WorkflowOutput } from "../../src/protocol/swarm";
import type { Sample } from "./policy";
import { taskOfPrompt, type Tool } from "./tasks";

const RESET = "RUNNER.SPECIAL.RESET_CONTEXT_TRACKER";
const ABORT = "RUNNER.SPECIAL.ABORT";

/** The fields of an AgentJet key; the key is `sk-ajet-` + base64 of their JSON. */
export type AgentJetKeyFields = { agent_name: string; target_tag: string; episode_uuid: string; episode_address: string };

export function agentJetKey(fields: AgentJetKeyFields): string {
  return "sk-ajet-" + Buffer.from(JSON.stringify(fields)).toString("base64");
}

/** What AgentJet's interchange server (here: the agent's gateway) sends for one call. */
const InterchangeCall = z.object({
  completion_request: z.object({ messages: z.array(z.object({ role: z.string(), content: z.unknown() })) }).loose(),
  agent_name: z.string(),
  target_tag: z.string(),
  episode_uuid: z.string(),
  timeline_uuid: z.string(),
});

const ChatCompletion = z.object({ choices: z.array(z.object({ message: z.object({ content: z.string() }) })).min(1) });

type Call = { taskId: string; tool: string };

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

export class EpisodeRunner {
  private readonly llm = new Reply({ linger: 0 });
  private readonly results = new Reply({ linger: 0 });
  /** The episode's calls since its last reset, in order. */
  private calls: Call[] = [];
  private reward: number | null = null;
  /** The episode's LLM calls that reached this runner, all claims of it counted: each came through the relay. */
  llmCalls = 0;
  finished = false;
  readonly result: Promise<void>;

  private constructor(
    readonly episode: string,
    readonly llmAddress: string,
    readonly resultAddress: string,
    private readonly policyUrl: string,
  ) {
    this.result = this.serveResults();
    void this.serveCalls();
  }

  static async bind(episode: string, dir: string, policyUrl: string): Promise<EpisodeRunner> {
    const llm = `ipc://${join(dir, `${episode}.llm.sock`)}`;
    const result = `ipc://${join(dir, `${episode}.result.sock`)}`;
    const r = new EpisodeRunner(episode, llm, result, policyUrl);
    await Promise.all([r.llm.bind(llm), r.results.bind(result)]);
    return r;
  }

  /** The episode's last call and its reward, or why there is no sample. */
  sample(): Sample | string {
    const last = this.calls.at(-1);
    if (this.reward === null) return "its result carried no numeric reward";
    if (last === undefined) return "a result came, but none of the episode's LLM calls reached its runner";
    return { taskId: last.taskId, tool: last.tool as Tool, reward: this.reward };
  }

  close(): void {
    if (!this.llm.closed) this.llm.close();
    if (!this.results.closed) this.results.close();
  }

  private async serveResults(): Promise<void> {
    for await (const [msg] of this.results) {
      const text = msg?.toString("utf8") ?? "";
      if (text === RESET) {
        this.calls = [];
        await this.results.send("ack");
        continue;
      }
      await this.results.send("ack");
      const output = text === ABORT ? null : WorkflowOutput.safeParse(parseJson(text));
      if (output?.success && typeof output.data.reward === "number") this.reward = output.data.reward;
      break;
    }
    this.finished = true;
    this.close();
  }

  private async serveCalls(): Promise<void> {
    try {
      for await (const [msg] of this.llm) await this.llm.send(await this.answer(msg?.toString("utf8") ?? ""));
    } catch {
      // closed with the episode
    }
  }

  private async answer(text: string): Promise<string> {
    const call = InterchangeCall.safeParse(parseJson(text));
    if (!call.success) return JSON.stringify({ error: { message: `not an interchange call: ${call.error.message}` } });
    if (call.data.episode_uuid !== this.episode) return JSON.stringify({ error: { message: `a call of episode ${call.data.episode_uuid} at ${this.episode}'s runner` } });
    this.llmCalls++;
    const res = await fetch(`${this.policyUrl}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(call.data.completion_request),
    });
    const body = await res.text();
    const completion = res.ok ? ChatCompletion.safeParse(parseJson(body)) : null;
    const user = call.data.completion_request.messages.findLast((m) => m.role === "user")?.content;
    const task = typeof user === "string" ? taskOfPrompt(user) : null;
    if (completion?.success && task !== null) this.calls.push({ taskId: task.id, tool: completion.data.choices[0]!.message.content });
    return body;
  }
}
