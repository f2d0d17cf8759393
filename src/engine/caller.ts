import type { Role } from "../protocol/admin";

/** Who is calling an engine: the deployment admin, or a bearer of an engine token (by its hash). */
export type Caller = { admin: true } | { admin: false; tokenHash: string };
export type CallerRole = Role | "admin";
