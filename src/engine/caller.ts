import type { Role } from "../protocol/admin";

/** Who is calling an engine: the deployment admin, or a bearer of an engine token (by its hash). */
export type Caller = { admin: true } | { admin: false; tokenHash: string };
export type CallerRole = Role | "admin";

/**
 * The token a caller's claims are recorded under (episodes.claimed_by) and that its actions on
 * a claim are checked against: its hash, or null for the admin, whose claims are tied to no token.
 */
export function callerToken(caller: Caller): string | null {
  return caller.admin ? null : caller.tokenHash;
}
