/**
 * AgentJet calls under relay deadlines a timer cannot take as they are. The gateway handed
 * `deadlineAt - Date.now()` to AbortSignal.timeout, which takes whole milliseconds up to 2^32-1
 * only: a deadline of 2.0005 s (the envelope allows any positive number) or of 1e7 s (an
 * operator's "no deadline") threw, and every call was a 500 although the runner answered at once.
 * Real ZeroMQ runners.
 */
import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { agentJetKey, envelope, post } from "./envelope";
import { ownGateway } from "./own-gateway";
import { startZmqModel } from "./zmq-model";

const SECRET = "s".repeat(32);
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function runner(): Promise<string> {
  const m = await startZmqModel(`ipc:///tmp/rx-deadline-shape-${randomUUID()}.sock`);
  cleanups.push(() => m.close());
  return m.addr;
}

describe("relay deadlines a timer cannot take as they are", () => {
  for (const [seconds, what] of [
    [2.0005, "not a whole number of milliseconds"],
    [1e7, "longer than a timer's longest wait"],
  ] as const) {
    it(`answers an AgentJet call whose relay deadline is ${what} (${seconds} s)`, async () => {
      const addr = await runner();
      const url = await ownGateway(SECRET, cleanups);
      const r = await post(url, envelope({ trainer_api_key: agentJetKey("ep-1", addr), deadline_seconds: seconds }), SECRET);
      expect(r.status, r.text.slice(0, 300)).toBe(200);
      expect(JSON.parse(r.text).choices[0].message.content).toBe("echo: hi");
    });
  }
});
