/**
 * An envelope that fails its check waits for the gateway's next secret fetch (a rotation's first
 * calls are signed with a secret it has not fetched yet), holding its body. Forged envelopes wait
 * too: what they may hold so is a quarter of the unverified-bytes bound, so that they cannot have
 * the Worker's calls refused busy. Real sockets, and the agent's own FetchedSecret.
 */
import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { Gateway } from "../../src/gateway/server";
import { FetchedSecret } from "../../src/gateway/secret";
import type { Logger } from "../../src/log";
import { GATEWAY_RELAY_PATH, SIGNATURE_HEADER, TIMESTAMP_HEADER } from "../../../src/protocol/relay";
import { agentJetKey, envelope, post } from "./envelope";
import { waitUntil } from "../support/wait";

const SECRET = "secret-wait-secret";
const MiB = 1024 * 1024;
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const logger: Logger = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** Sends a forged envelope of `bytes` (fresh, well-formed headers) and resolves with its answer's status line. */
async function forged(url: string, bytes: number): Promise<string> {
  const u = new URL(url);
  const sock: Socket = connect(Number(u.port), u.hostname);
  cleanups.push(() => sock.destroy());
  sock.on("error", () => undefined);
  let answer = "";
  sock.on("data", (b) => (answer += b.toString("latin1")));
  await new Promise<void>((r) => sock.once("connect", () => r()));
  sock.write(`POST ${GATEWAY_RELAY_PATH} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n${TIMESTAMP_HEADER}: ${Math.floor(Date.now() / 1000)}\r\n${SIGNATURE_HEADER}: ${"ab".repeat(32)}\r\ncontent-length: ${bytes}\r\n\r\n`);
  sock.write(Buffer.alloc(bytes, 0x20));
  await waitUntil(() => answer.includes("\r\n"), "the forged envelope's answer", 10_000);
  return answer.slice(0, answer.indexOf("\r\n"));
}

describe("envelopes that wait for the next secret fetch", () => {
  it("refuses a forged body at once past a quarter of the unverified bound, though a fetch is slow, and serves the Worker's calls meanwhile", async () => {
    let slow = false;
    const secret = new FetchedSecret(async () => {
      if (slow) await new Promise((r) => setTimeout(r, 3000));
      return SECRET;
    }, logger);
    secret.prefetch();
    await waitUntil(async () => (await secret.check(async (s) => (s === SECRET ? null : "bad signature"))) === null, "the first fetch");
    slow = true;
    const gw = new Gateway({ host: "127.0.0.1", port: 0, secret, models: ["m"], zmqReceiveTimeoutMs: 300, logger, upstream: null, sessionPath: false, unverifiedBodyBytes: 4 * MiB });
    const url = await gw.listen();
    cleanups.push(() => gw.close());
    const t0 = performance.now();
    expect(await forged(url, 2 * MiB)).toBe("HTTP/1.1 401 Unauthorized");
    expect(performance.now() - t0).toBeLessThan(2000);
    expect(gw.unverifiedBytes).toBe(0);
    const worker = await post(url, envelope({ endpoint: "/v1/models", request: null, trainer_api_key: agentJetKey("ep-1", "ipc:///tmp/none") }), SECRET);
    expect(worker.status).toBe(200);
  }, 20_000);

  it("lets a small one wait for the fetch, holding no more than that quarter", async () => {
    const secret = new FetchedSecret(async () => SECRET, logger);
    secret.prefetch();
    await waitUntil(async () => (await secret.check(async (s) => (s === SECRET ? null : "bad signature"))) === null, "the first fetch");
    const gw = new Gateway({ host: "127.0.0.1", port: 0, secret, models: ["m"], zmqReceiveTimeoutMs: 300, logger, upstream: null, sessionPath: false, unverifiedBodyBytes: 4 * MiB });
    const url = await gw.listen();
    cleanups.push(() => gw.close());
    // Within a second of the last fetch: it waits for the next one (a rotation's call would), then is refused.
    expect(await forged(url, MiB / 2)).toBe("HTTP/1.1 401 Unauthorized");
    expect(gw.unverifiedBytes).toBe(0);
  }, 20_000);
});
