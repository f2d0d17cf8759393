/**
 * A runner whose every answer takes a little longer than the gateway's ZeroMQ receive timeout
 * (a model generating for 61 s under the default 60 s). The gateway closed a copy's socket when
 * it sent the next, so each answer arrived on a closed socket, the runner (one call at a time)
 * computed copy after copy, and the client got a 504 although the runner answered every one.
 * The earlier copies' sockets now go on waiting. A real ZeroMQ runner.
 */
import { randomUUID } from "node:crypto";
import { Reply } from "zeromq";
import { afterEach, describe, expect, it } from "vitest";
import { agentJetKey, envelope, post } from "./envelope";
import { ownGateway } from "./own-gateway";

const SECRET = "s".repeat(32);
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function slowRunner(addr: string, delayMs: number): Promise<{ calls: number }> {
  const sock = new Reply({ linger: 0 });
  await sock.bind(addr);
  const seen = { calls: 0 };
  cleanups.push(() => sock.close());
  void (async () => {
    try {
      for await (const [msg] of sock) {
        seen.calls++;
        JSON.parse(msg!.toString("utf8"));
        await new Promise((r) => setTimeout(r, delayMs));
        await sock.send(JSON.stringify({ id: "c1", object: "chat.completion", created: 0, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "done" }, finish_reason: "stop" }] }));
      }
    } catch {
      // closed
    }
  })();
  return seen;
}

describe("an AgentJet runner slower than the receive timeout", () => {
  it("gets the runner's answer to the client when every answer takes just over the receive timeout", async () => {
    const addr = `ipc:///tmp/rx-slow-runner-${randomUUID()}.sock`;
    const runner = await slowRunner(addr, 800);
    const url = await ownGateway(SECRET, cleanups, { zmqReceiveTimeoutMs: 500 });
    // 6 s of deadline for a runner that answers every call in 0.8 s.
    const r = await post(url, envelope({ trainer_api_key: agentJetKey("ep-1", addr), deadline_seconds: 6 }), SECRET);
    expect([r.status, r.text.slice(0, 200)]).toEqual([200, expect.any(String)]);
    // The first copy's answer, at 0.8 s: a copy or two more at most, not one per receive timeout until the deadline.
    expect(runner.calls).toBeLessThan(5);
    expect(JSON.parse(r.text).choices[0].message.content).toBe("done");
  }, 20_000);
});
