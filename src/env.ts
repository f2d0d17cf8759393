import type { EngineObject } from "./engine/engine-object";

/** Bindings and secrets (wrangler.toml, .dev.vars locally, `wrangler secret` when deployed). */
export interface Env {
  DB: D1Database;
  /** The trajectory ledger's call bodies (src/ledger): one object per batch, indexed by D1's llm_calls. */
  LEDGER: R2Bucket;
  ENGINE: DurableObjectNamespace<EngineObject>;
  /** The deployment admin's bearer token: creates engines and issues tokens. */
  ADMIN_TOKEN: string;
  /** Signs the per-claim OpenAI keys handed to clients. */
  CLAIM_KEY_SECRET: string;
  /** Seconds an agent has to ack a command before it is handed out again (default 60). */
  COMMAND_LEASE_SECONDS?: string;
  /** Bytes of an engine's SQLite above which requests that add data are refused 503 storage_full (default 9 GiB; docs/operations.md). */
  STORAGE_HIGH_WATER_BYTES?: string;
  /** Seconds a relayed LLM call may take end to end (default 600). */
  RELAY_DEADLINE_SECONDS?: string;
  /** Bytes a relayed call's body may have (relay-routes.ts DEFAULT_RELAY_MAX_BODY_BYTES, 16 MiB). */
  RELAY_MAX_BODY_BYTES?: string;
  /** Milliseconds between SSE keep-alive comments while a streamed answer is pending (default 10000). */
  RELAY_KEEPALIVE_MS?: string;
  /**
   * Where relayed calls leave for the inference gateway. Unset when deployed: the global fetch
   * is direct there. The local server binds workerd's network service here, because Miniflare
   * routes the global fetch through an interceptor Worker that costs an isolate hop per call.
   */
  RELAY_NETWORK?: Fetcher;
  /** Per-token request limits of client, operator and viewer tokens (wrangler.toml `[[ratelimits]]`; http/rate-limit.ts). */
  RATE_LIMIT_CLIENT?: RateLimit;
  /** Per-token request limits of trainer tokens, the agent's channel counted apart. */
  RATE_LIMIT_TRAINER?: RateLimit;
  /** Requests per address with a token the engine has not yet accepted: no made-up token gets a budget of its own. */
  RATE_LIMIT_UNVERIFIED?: RateLimit;
}
