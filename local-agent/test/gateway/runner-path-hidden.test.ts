/**
 * Clients never see the trainer's ZeroMQ addresses (docs/relay.md, docs/security.md): a runner's
 * answer that is no completion is shown with the address hidden. For an ipc:// address only the
 * whole "ipc://..." spelling was hidden, so an answer naming the socket's bare path (as errors
 * about a file do) showed the runner's filesystem path. A real ZeroMQ runner.
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

describe("a runner's answer naming its ipc socket's path", () => {
  it("does not show the runner's ipc path to the client", async () => {
    const path = `/tmp/rx-hidden-path-${randomUUID()}.sock`;
    const sock = new Reply({ linger: 0 });
    await sock.bind(`ipc://${path}`);
    cleanups.push(() => sock.close());
    void (async () => {
      try {
        for await (const _ of sock) await sock.send(`episode context tracker for ${path} was reset`);
      } catch {
        // closed
      }
    })();
    const url = await ownGateway(SECRET, cleanups);
    const r = await post(url, envelope({ trainer_api_key: agentJetKey("ep-1", `ipc://${path}`), deadline_seconds: 3 }), SECRET);
    expect(r.status).toBe(502);
    expect(JSON.parse(r.text).error.code).toBe("upstream_garbage");
    expect(r.text).not.toContain(path);
  });
});
