/** A typed client for the deployment admin's API (engines, tokens, and the histories kept under archive names). */
import { z } from "zod";
import {
  ArchiveListResponse,
  CreateEngineResponse,
  DeleteArchiveResponse,
  DeleteEngineResponse,
  EngineListResponse,
  IssuedToken,
  TokenListResponse,
  type Jurisdiction,
  type LocationHint,
  type Role,
} from "../protocol/admin";
import { pathSegment, requestJson, type FetchLike } from "./http";

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
  listTokens = async (engine: string) =>
    requestJson(this.fetchFn, `${this.base}/engines/${pathSegment("engine", engine)}/tokens`, TokenListResponse, { method: "GET", token: this.token });
  issueToken = async (engine: string, role: Role, label = "") =>
    requestJson(this.fetchFn, `${this.base}/engines/${pathSegment("engine", engine)}/tokens`, IssuedToken, { method: "POST", body: { role, label }, token: this.token });
  revokeToken = async (engine: string, id: string) =>
    requestJson(this.fetchFn, `${this.base}/engines/${pathSegment("engine", engine)}/tokens/${pathSegment("token id", id)}`, z.object({ success: z.boolean() }), {
      method: "DELETE",
      token: this.token,
    });

  /** One DELETE: it may end with work left (`done: false`, a 202), which the next one carries on. */
  deleteEngineOnce = async (engine: string, opts: { force?: boolean; keep_history?: boolean } = {}) =>
    requestJson(this.fetchFn, `${this.base}/engines/${pathSegment("engine", engine)}?force=${opts.force === true}&keep_history=${opts.keep_history === true}`, DeleteEngineResponse, {
      method: "DELETE",
      token: this.token,
    });

  /**
   * Deletes an engine, repeating the DELETE until it is done; answers the rows deleted (or kept)
   * by table. A refusal is thrown, a 503 too: `delete_in_progress` (another delete of the engine
   * has been under way for seconds, stuck on D1) and `history_not_written` (keep_history, and D1
   * took no write) each mean nothing was done; the caller chooses whether and when to repeat.
   */
  async deleteEngine(engine: string, opts: { force?: boolean; keep_history?: boolean } = {}): Promise<DeleteEngineResponse> {
    const rows: Record<string, number> = {};
    for (;;) {
      const r = await this.deleteEngineOnce(engine, opts);
      for (const [table, n] of Object.entries(r.rows)) rows[table] = (rows[table] ?? 0) + n;
      if (r.done) return { ...r, rows };
    }
  }

  /** A page of the histories kept under archive names (keep_history); pass its `next` as `after` for the next page. */
  archives = (opts: { after?: string; limit?: number } = {}) => {
    const q = new URLSearchParams();
    if (opts.after !== undefined) q.set("after", opts.after);
    if (opts.limit !== undefined) q.set("limit", String(opts.limit));
    const qs = q.toString();
    return requestJson(this.fetchFn, `${this.base}/archives${qs === "" ? "" : `?${qs}`}`, ArchiveListResponse, { method: "GET", token: this.token });
  };

  /** One DELETE of an archive: it may end with work left (`done: false`, a 202), which the next one carries on. */
  deleteArchiveOnce = async (name: string) =>
    requestJson(this.fetchFn, `${this.base}/archives/${pathSegment("archive", name)}`, DeleteArchiveResponse, { method: "DELETE", token: this.token });

  /** Deletes an archive, repeating the DELETE until it is done; answers the rows deleted by table. */
  async deleteArchive(name: string): Promise<DeleteArchiveResponse> {
    const rows: Record<string, number> = {};
    for (;;) {
      const r = await this.deleteArchiveOnce(name);
      for (const [table, n] of Object.entries(r.rows)) rows[table] = (rows[table] ?? 0) + n;
      if (r.done) return { ...r, rows };
    }
  }
}
