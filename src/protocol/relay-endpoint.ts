/** The OpenAI-compatible endpoints the relay serves (their own file: relay.ts and ledger.ts both need them). */
import { z } from "zod";

export const RELAY_ENDPOINTS = ["/v1/chat/completions", "/v1/completions", "/v1/models"] as const;
export const RelayEndpoint = z.enum(RELAY_ENDPOINTS);
export type RelayEndpoint = z.infer<typeof RelayEndpoint>;
