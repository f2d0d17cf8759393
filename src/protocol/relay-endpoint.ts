/** The OpenAI-compatible endpoints the relay serves, and the bound on their bodies (their own file: relay.ts, ledger.ts and the agent need them). */
import { z } from "zod";

export const RELAY_ENDPOINTS = ["/v1/chat/completions", "/v1/completions", "/v1/models"] as const;
export const RelayEndpoint = z.enum(RELAY_ENDPOINTS);
export type RelayEndpoint = z.infer<typeof RelayEndpoint>;

/**
 * A relayed call's body, unless RELAY_MAX_BODY_BYTES says otherwise. Not MAX_BODY_BYTES: the
 * relay stores nothing of it in D1 or a Durable Object (the ledger's bodies go to R2, a large
 * image by reference), and a vision agent resends its screenshots, a megabyte or two each, in
 * every call. The Worker holds about four copies of a body while it relays it (the text, the
 * parsed request, the envelope, its bytes on the way out), and an isolate has 128 MB for all the
 * calls it serves at once: 16 MiB is several screenshots, and a few such calls at a time.
 * The gateway's own bound on an envelope (32 MiB) is above it.
 */
export const DEFAULT_RELAY_MAX_BODY_BYTES = 16 * 1024 * 1024;
