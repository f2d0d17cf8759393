/**
 * The trainer's credentials in the upstream's URL and key, as the gateway serves calls, against a
 * real HTTP model: a password no percent-decoding reads broke every call, and a key repeated
 * URL-encoded reached the client.
 */
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { ownGateway } from "./own-gateway";
import { envelope, post } from "./envelope";

const SECRET = "upstream-credentials-secret";
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A real HTTP model: answers `status`/`type` with `body(headers)`; records the headers it was sent. */
async function upstream(status: number, type: string, body: (h: IncomingHttpHeaders) => string, seen: IncomingHttpHeaders[] = []): Promise<string> {
  const server = createServer((req, res) => {
    seen.push(req.headers);
    req.resume();
    res.writeHead(status, { "content-type": type }).end(body(req.headers));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise((r) => server.close(() => r(undefined)));
  });
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const chunk = (content: string, finish: string | null) => `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;

describe("a user:password in the upstream's URL", () => {
  it("serves a streamed call when the URL's password holds a bare '%' (a random password, not percent-encoded)", async () => {
    // Percent-decoding `50%off` threw (URL keeps such a password as it is): every streamed call
    // ended in a gateway_error event instead of the model's answer.
    const events = [chunk("Hello", null), chunk("", "stop"), "data: [DONE]\n\n"];
    const host = await upstream(200, "text/event-stream", () => events.join(""));
    const r = await post(
      await ownGateway(SECRET, cleanups),
      envelope({ trainer_api_key: "sk-trainer-x", trainer_base_url: `http://trainer:50%off@${host}/v1`, request: { model: "m", stream: true, messages: [{ role: "user", content: "hi" }] } }),
      SECRET,
    );
    expect(r.status).toBe(200);
    expect(r.text).not.toContain("gateway_error");
    expect(r.text).toBe(events.join(""));
  });

  it("passes the upstream's own error on (its status, its words) when the URL's password holds a bare '%'", async () => {
    // The same throw made an upstream's 400 (a context too long) a 500 gateway_error.
    const said = { error: { message: "maximum context length is 4096 tokens", type: "BadRequestError", param: null, code: null } };
    const host = await upstream(400, "application/json", () => JSON.stringify(said));
    const r = await post(await ownGateway(SECRET, cleanups), envelope({ trainer_api_key: "sk-trainer-x", trainer_base_url: `http://trainer:50%off@${host}/v1` }), SECRET);
    expect(r.status).toBe(400);
    expect(JSON.parse(r.text).error.message).toBe(said.error.message);
  });
});

describe("a user:password in the upstream's URL is how the gateway signs in", () => {
  // A Basic-auth proxy in front of the model server (nginx, a lab's gateway) is written into the
  // base URL as user:password; undici drops a URL's credentials, so every call was refused.
  it("sends it as Basic authorization when the trainer registered no key", async () => {
    const seen: IncomingHttpHeaders[] = [];
    const host = await upstream(200, "application/json", () => JSON.stringify({ object: "chat.completion", choices: [] }), seen);
    const r = await post(await ownGateway(SECRET, cleanups), envelope({ trainer_api_key: "", trainer_base_url: `http://lab%20user:p%40ss:w@${host}/v1` }), SECRET);
    expect(r.status).toBe(200);
    expect(seen[0]?.authorization).toBe(`Basic ${Buffer.from("lab user:p@ss:w").toString("base64")}`);
  });

  it("keeps the trainer's key as the Bearer authorization when it registered one", async () => {
    const seen: IncomingHttpHeaders[] = [];
    const host = await upstream(200, "application/json", () => JSON.stringify({ object: "chat.completion", choices: [] }), seen);
    const r = await post(await ownGateway(SECRET, cleanups), envelope({ trainer_api_key: "sk-trainer-x", trainer_base_url: `http://u:p@${host}/v1` }), SECRET);
    expect(r.status).toBe(200);
    expect(seen[0]?.authorization).toBe("Bearer sk-trainer-x");
  });
});

describe("the trainer's key in other spellings", () => {
  it("hides the trainer's key when the upstream's error repeats it URL-encoded", async () => {
    // Known raw and JSON-escaped only, a key with / + = named URL-encoded in a proxy's error reached the client.
    const KEY = "sk-trainer/Zm9v+YmFy=private";
    const host = await upstream(401, "application/json", (h) => {
      const key = String(h.authorization ?? "").replace(/^Bearer /, "");
      return JSON.stringify({ error: { message: `key rejected by https://auth.internal/check?api_key=${encodeURIComponent(key)}`, type: "invalid_request_error", param: null, code: "invalid_api_key" } });
    });
    const r = await post(await ownGateway(SECRET, cleanups), envelope({ trainer_api_key: KEY, trainer_base_url: `http://${host}/v1` }), SECRET);
    expect(r.status).toBe(401);
    expect(r.text).not.toContain(encodeURIComponent(KEY));
  });
});

describe("the episode's header to the upstream", () => {
  // x-episode-uuid carried the id as it is: an id a header cannot hold (任务-7, a space at its
  // end) made undici refuse the request, so every call of such an episode was a 502.
  it("names the episode as it is, or percent-encoded when a header cannot hold it", async () => {
    const seen: IncomingHttpHeaders[] = [];
    const host = await upstream(200, "application/json", () => JSON.stringify({ object: "chat.completion", choices: [] }), seen);
    const gateway = await ownGateway(SECRET, cleanups);
    for (const id of ["ep-7:a/b", "任务-7", "ep 7 "]) {
      const r = await post(gateway, envelope({ episode_uuid: id, trainer_api_key: "", trainer_base_url: `http://${host}/v1` }), SECRET);
      expect([id, r.status]).toEqual([id, 200]);
    }
    expect(seen.map((h) => h["x-episode-uuid"])).toEqual(["ep-7:a/b", encodeURIComponent("任务-7"), encodeURIComponent("ep 7 ")]);
  });
});
