/** A typed client for the deployment admin's API (engines and tokens). */
import { z } from "zod";
import {
  CreateEngineResponse,
  DeleteEngineResponse,
  EngineListResponse,
  IssuedToken,
  TokenListResponse,
  type Jurisdiction,
  type LocationHint,
  type Role,
} from "../protocol/admin";
import { requestJson, type FetchLike } from "./http";

export class AdminClient {
  private readonly base: string;
  private readonly fetchFn: FetchLike;
  constructor(opts: { origin: string; adminToken: string; fetch?: FetchLike }, private readonly token = opts.adminToken) {
    this.base = opts.origin.replace(/\/+$/, "") + "/admin";
    this.fetchFn = opts.fetch ?? ((input, init) => fetch(input, init));
  }

  /** `location_hint` and `jurisdiction` place the engine's Durable Object (README, "Admin API"); both optional. */
  createEngine = (name: string, placement: { location_hint?: LocationHint; jurisdiction?: Jurisdiction } = {}) =>
    requestJson(this.fetchFn, `${this.base}/engines`, CreateEngineResponse, { method: "POST", body: { name, ...placement }, token: this.token });
  listEngines = () => requestJson(this.fetchFn, `${this.base}/engines`, EngineListResponse, { method: "GET", token: this.token });
  listTokens = (engine: string) =>
    requestJson(this.fetchFn, `${this.base}/engines/${encodeURIComponent(engine)}/tokens`, TokenListResponse, { method: "GET", token: this.token });
  issueToken = (engine: string, role: Role, label = "") =>
    requestJson(this.fetchFn, `${this.base}/engines/${encodeURIComponent(engine)}/tokens`, IssuedToken, { method: "POST", body: { role, label }, token: this.token });
  revokeToken = (engine: string, id: string) =>
    requestJson(this.fetchFn, `${this.base}/engines/${encodeURIComponent(engine)}/tokens/${encodeURIComponent(id)}`, z.object({ success: z.boolean() }), {
      method: "DELETE",
      token: this.token,
    });

  /** One DELETE: it may end with work left (`done: false`, a 202), which the next one carries on. */
  deleteEngineOnce = (engine: string, opts: { force?: boolean; keep_history?: boolean } = {}) =>
    requestJson(this.fetchFn, `${this.base}/engines/${encodeURIComponent(engine)}?force=${opts.force === true}&keep_history=${opts.keep_history === true}`, DeleteEngineResponse, {
      method: "DELETE",
      token: this.token,
    });

  /** Deletes an engine, repeating the DELETE until it is done; answers the rows deleted (or kept) by table. */
  async deleteEngine(engine: string, opts: { force?: boolean; keep_history?: boolean } = {}): Promise<DeleteEngineResponse> {
    const rows: Record<string, number> = {};
    for (;;) {
      const r = await this.deleteEngineOnce(engine, opts);
      for (const [table, n] of Object.entries(r.rows)) rows[table] = (rows[table] ?? 0) + n;
      if (r.done) return { ...r, rows };
    }
  }
}
