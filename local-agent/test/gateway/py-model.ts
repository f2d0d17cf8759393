/** Runs fixtures/model_rep.py (an AgentJet runner's LLM side, in Python with pyzmq). */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { PYTHON } from "../support/py-runner";
import { waitUntil } from "../support/wait";

export type PyCall = { addr: string; call: { completion_request: Record<string, unknown>; agent_name: string; target_tag: string; episode_uuid: string; timeline_uuid: string; preserve_sampling_params: boolean } };

export class PyModel {
  readonly calls: PyCall[] = [];
  private readonly listening = new Set<string>();
  private readonly stderr: string[] = [];
  private readonly child: ChildProcess;

  constructor(readonly addrs: string[]) {
    this.child = spawn(PYTHON, [join(import.meta.dirname, "fixtures", "model_rep.py"), ...addrs], { stdio: ["pipe", "pipe", "pipe"] });
    createInterface({ input: this.child.stdout! }).on("line", (line) => {
      const e = JSON.parse(line) as { event: string; addr: string } & Partial<PyCall>;
      if (e.event === "listening") this.listening.add(e.addr);
      else this.calls.push(e as PyCall);
    });
    createInterface({ input: this.child.stderr! }).on("line", (l) => this.stderr.push(l));
  }

  async ready(): Promise<void> {
    await waitUntil(() => this.addrs.every((a) => this.listening.has(a)) || undefined, `model_rep.py to listen (stderr: ${this.stderr.join(" | ")})`);
  }

  kill(): void {
    this.child.kill("SIGKILL");
  }
}
