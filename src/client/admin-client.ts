/** A typed client for the deployment admin's API (engines and tokens). */
import { z } from "zod";
import { CreateEngineResponse, EngineListResponse, IssuedToken, TokenListResponse, type Jurisdiction, type LocationHint, type Role } from "../protocol/admin";
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
}
