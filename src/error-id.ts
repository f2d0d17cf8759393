/**
 * Logs `err` under a new id and returns the id, for an answer that names a failure of D1, R2 or
 * the network without its text: that may name tables, SQL or addresses (the gateway's tunnel),
 * which only the operator may read, in the Worker's log (`wrangler tail`), found by the id. Here,
 * apart from the HTTP layer, so that the engine's object answers such failures the same way.
 */
export function loggedErrorId(label: string, err: unknown): string {
  const id = crypto.randomUUID();
  console.error(`${label} ${id}:`, err);
  return id;
}
