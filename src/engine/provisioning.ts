/**
 * Which tokens may act on this engine: their hashes, kept in the engine's own table and in
 * memory, so that checking a caller costs no D1 query. Written by the admin routes when an
 * engine is created, a token issued or revoked.
 */
import type { Role } from "../protocol/admin";
import { mayRun, type EngineOp } from "../auth/roles";
import { newIncarnation } from "../auth/claim-key";
import type { Caller, CallerRole } from "./caller";
import type { EngineStore } from "./engine-store";
import { fail, type Failure } from "./reply";

export type TokenGrant = { id: string; hash: string; role: Role };

export class Provisioning {
  private readonly tokens = new Map<string, Role>();

  constructor(private readonly store: EngineStore) {
    this.reload();
  }

  /** Reads the token hashes again: the storage was wiped (EngineObject.destroy), and none of the deleted engine's may let anyone in. */
  reload(): void {
    this.tokens.clear();
    for (const r of this.store.sql.exec<{ hash: string; role: Role }>("SELECT hash, role FROM tokens")) this.tokens.set(r.hash, r.role);
  }

  /**
   * Makes this object the engine `name` (once) and adds token hashes. Idempotent; runs in the
   * caller's transaction. `created`: the engine is being made, and its tokens are exactly these:
   * any other hash here came from a token issued to an engine of this name while it was being
   * deleted (that issue provisioned the fresh instance), and must not fit the new engine.
   */
  provision(name: string, grants: TokenGrant[], created: boolean): void {
    if (this.store.meta.name === null) this.store.saveMeta({ ...this.store.meta, name, incarnation: newIncarnation() });
    if (created) this.store.sql.exec("DELETE FROM tokens");
    for (const t of grants) this.store.sql.exec("INSERT OR REPLACE INTO tokens (hash, id, role) VALUES (?, ?, ?)", t.hash, t.id, t.role);
  }

  /** The grants are committed: callers holding them are let in (only they, for an engine being `created`). */
  granted(grants: TokenGrant[], created: boolean): void {
    if (created) this.tokens.clear();
    for (const t of grants) this.tokens.set(t.hash, t.role);
  }

  /**
   * Drops a token's hash, in the caller's transaction; returns its role, or null when the engine
   * did not know it (revoked already: a repeated revocation changes nothing). A token whose role
   * may read the gateway secret moves the secret on (Meta.gatewayGeneration).
   */
  revoke(hash: string): Role | null {
    const role = this.store.sql.exec<{ role: Role }>("DELETE FROM tokens WHERE hash = ? RETURNING role", hash).toArray()[0]?.role ?? null;
    if (role !== null && mayRun(role, "agent_gateway_secret")) this.store.saveMeta({ ...this.store.meta, gatewayGeneration: this.store.meta.gatewayGeneration + 1 });
    return role;
  }

  /** The revocation is committed: its token is let in no more. */
  revoked(hash: string): void {
    this.tokens.delete(hash);
  }

  /** The caller's role if it may do `op` here; else why not (401 unknown token, 403 role). */
  authorize(caller: Caller, op: EngineOp): CallerRole | Failure {
    if (caller.admin) return "admin";
    const role = this.tokens.get(caller.tokenHash);
    if (role === undefined) return fail(401, "invalid_token", `The token is not valid for engine '${this.store.meta.name}' (unknown or revoked).`);
    if (!mayRun(role, op)) return fail(403, "forbidden", `${/^[aeiou]/.test(role) ? "An" : "A"} ${role} token may not call ${op}.`);
    return role;
  }
}
