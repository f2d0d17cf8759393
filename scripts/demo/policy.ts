/**
 * The demo's policy: a table of logits, one row per task and one column per tool, served as
 * an OpenAI-compatible chat model (what vLLM or SGLang would be for a real trainer) and
 * trained by a policy-gradient step with a per-task baseline (GRPO's group mean).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { TASKS, TOOLS, taskOfPrompt, type Tool } from "./tasks";
import type { Rng } from "./rng";

export type Sample = { taskId: string; tool: Tool; reward: number };

export const MODEL = "demo-tool-picker";
const LEARNING_RATE = 1;

export class Policy {
  /** The weights: logits[task][tool]. */
  private readonly logits = new Map<string, number[]>(TASKS.map((t) => [t.id, TOOLS.map(() => 0)]));
  version = 0;

  constructor(private readonly rng: Rng) {}

  probabilities(taskId: string): number[] {
    const row = this.logits.get(taskId);
    if (!row) throw new Error(`no task ${taskId}`);
    const max = Math.max(...row);
    const e = row.map((x) => Math.exp(x - max));
    const sum = e.reduce((a, b) => a + b, 0);
    return e.map((x) => x / sum);
  }

  sample(taskId: string): Tool {
    let u = this.rng();
    const p = this.probabilities(taskId);
    for (let i = 0; i < p.length - 1; i++) {
      if (u < p[i]!) return TOOLS[i]!;
      u -= p[i]!;
    }
    return TOOLS[TOOLS.length - 1]!;
  }

  /**
   * One policy-gradient step: each sample pushes its task's logits along the gradient of its
   * tool's log-probability, scaled by its reward less the mean reward of its task's samples.
   */
  learn(samples: Sample[]): void {
    const byTask = new Map<string, Sample[]>();
    for (const s of samples) byTask.set(s.taskId, [...(byTask.get(s.taskId) ?? []), s]);
    for (const [taskId, group] of byTask) {
      const row = this.logits.get(taskId);
      if (!row) continue;
      const baseline = group.reduce((a, s) => a + s.reward, 0) / group.length;
      const p = this.probabilities(taskId);
      for (const s of group) {
        const advantage = s.reward - baseline;
        const chosen = TOOLS.indexOf(s.tool);
        for (let i = 0; i < row.length; i++) row[i]! += LEARNING_RATE * advantage * ((i === chosen ? 1 : 0) - p[i]!);
      }
    }
    this.version++;
  }
}

type ChatRequest = { model?: unknown; messages?: unknown };

function lastUserText(body: ChatRequest): string | null {
  if (!Array.isArray(body.messages)) return null;
  for (let i = body.messages.length - 1; i >= 0; i--) {
    const m = body.messages[i] as { role?: unknown; content?: unknown };
    if (m?.role === "user" && typeof m.content === "string") return m.content;
  }
  return null;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

const openAIError = (message: string) => ({ error: { message, type: "invalid_request_error", param: null, code: null } });

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

/** Serves the policy on 127.0.0.1: POST /v1/chat/completions and GET /v1/models. */
export class PolicyServer {
  private readonly server: Server;
  calls = 0;

  constructor(private readonly policy: Policy) {
    this.server = createServer((req, res) => void this.handle(req, res).catch((e: unknown) => send(res, 500, openAIError(String(e)))));
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "").split("?")[0];
    if (req.method === "GET" && path === "/v1/models") return send(res, 200, { object: "list", data: [{ id: MODEL, object: "model", created: 0, owned_by: "demo" }] });
    if (req.method !== "POST" || path !== "/v1/chat/completions") return send(res, 404, openAIError(`no route ${req.method} ${path}`));
    let body: ChatRequest;
    try {
      body = (await readJson(req)) as ChatRequest;
    } catch {
      return send(res, 400, openAIError("the body is not JSON"));
    }
    const text = lastUserText(body);
    const task = text === null ? null : taskOfPrompt(text);
    if (task === null) return send(res, 400, openAIError("this model answers only the demo's tool questions"));
    this.calls++;
    const tool = this.policy.sample(task.id);
    send(res, 200, {
      id: `chatcmpl-demo-${this.calls}`,
      object: "chat.completion",
      created: Math.floor(Date.now() / 1000),
      model: MODEL,
      system_fingerprint: `weights-v${this.policy.version}`,
      choices: [{ index: 0, message: { role: "assistant", content: tool }, finish_reason: "stop", logprobs: null }],
      usage: { prompt_tokens: text!.split(/\s+/).length, completion_tokens: 1, total_tokens: text!.split(/\s+/).length + 1 },
    });
  }
}
