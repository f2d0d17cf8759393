/**
 * The media upload route's 12 MiB body limit holds for its every form: limitBody (src/http/body.ts)
 * picks the limit by the path the router routes by, so `/e/<engine>/t/<token>/agent/media/<sha256>`
 * (the token in the path, as a base URL carries it) takes what the bearer form takes.
 */
import { describe, expect, it } from "vitest";
import { MAX_MEDIA_UPLOAD_BODY_BYTES, MAX_REQUEST_BODY_BYTES } from "../src/protocol/limits";
import { MAX_MEDIA_BYTES } from "../src/ledger/media-refs";
import { createEngine, raw } from "./support/harness";

const screenshot = (n: number): string => `data:image/png;base64,${"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".repeat(Math.ceil(n / 64)).slice(0, n)}`;
const sha256 = async (t: string) => [...new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(t)))].map((b) => b.toString(16).padStart(2, "0")).join("");

describe("media upload body limit by route", () => {
  it("takes a medium over 4 MiB (within MAX_MEDIA_BYTES) through the bearer form and the token-in-path form alike", async () => {
    const e = await createEngine("rvmedia");
    const data = screenshot(MAX_REQUEST_BODY_BYTES + 1_000_000);
    expect(data.length).toBeLessThan(MAX_MEDIA_BYTES);
    const sha = await sha256(data);
    const body = JSON.stringify({ data });
    const bearer = await raw(`/e/${e.name}/agent/media/${sha}`, { method: "PUT", token: e.tokens.trainer, body });
    expect(bearer.status, bearer.text.slice(0, 200)).toBe(200);
    // The same route, its token in the path (as an AgentJet base URL carries it): routed to uploadMedia, but limitBody held it to 4 MiB.
    const inPath = await raw(`/e/${e.name}/t/${e.tokens.trainer}/agent/media/${sha}`, { method: "PUT", body });
    expect(inPath.status, inPath.text.slice(0, 200)).toBe(200);
  });

  it("checks the caller before it reads a large body: no token, or one the engine does not know, is a 401", async () => {
    const e = await createEngine("rvmedia");
    // Past even the route's 12 MiB: read first, it would be a 413.
    const data = screenshot(MAX_MEDIA_UPLOAD_BODY_BYTES + 1_000_000);
    const sha = await sha256(data);
    const body = JSON.stringify({ data });
    expect((await raw(`/e/${e.name}/agent/media/${sha}`, { method: "PUT", body })).status).toBe(401);
    expect((await raw(`/e/${e.name}/agent/media/${sha}`, { method: "PUT", token: "rx-not-a-token", body })).status).toBe(401);
    // A client's token is known, and may not upload: 403, the body never read.
    expect((await raw(`/e/${e.name}/agent/media/${sha}`, { method: "PUT", token: e.tokens.client, body })).status).toBe(403);
    expect(await raw(`/e/${e.name}/agent/media/${sha}`, { method: "PUT", token: e.tokens.trainer, body })).toMatchObject({ status: 413, json: { error: "payload_too_large" } });
  });
});
