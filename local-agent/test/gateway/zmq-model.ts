/**
 * An AgentJet runner's LLM side in Node: a ZeroMQ REP socket that takes the interchange JSON
 * and answers a ChatCompletion string, as AgentJet's InterchangeClient does. By model name:
 * "garbage" answers text that is not JSON; "slow-first" sleeps `slowMs` on the first call it
 * sees (so the gateway's receive times out and it resends), "tiny" answers at once.
 */
import { Reply } from "zeromq";
import { completion, lastUserText } from "./model-server";

export type ZmqModel = { addr: string; received: Record<string, unknown>[]; close(): void };

export async function startZmqModel(addr: string, opts: { slowMs?: number } = {}): Promise<ZmqModel> {
  const sock = new Reply({ linger: 0 });
  await sock.bind(addr);
  const received: Record<string, unknown>[] = [];
  let slowDone = false;
  void (async () => {
    try {
      for await (const [msg] of sock) {
        const call = JSON.parse(msg?.toString("utf8") ?? "{}") as Record<string, unknown>;
        received.push(call);
        const req = call["completion_request"] as Record<string, unknown>;
        const model = String(req["model"] ?? "");
        if (model === "garbage") {
          await sock.send("this is not json");
          continue;
        }
        if (model === "slow-first" && !slowDone && (slowDone = true)) await new Promise((r) => setTimeout(r, opts.slowMs ?? 500));
        await sock.send(JSON.stringify(completion(model, `echo: ${lastUserText(req)}`)));
      }
    } catch {
      // closed
    }
  })();
  return { addr, received, close: () => sock.close() };
}
