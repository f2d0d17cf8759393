/**
 * Where an engine's call bodies live in R2: `ledger/<engine>/<incarnation>/<UTC day>/<batch>-<digest>.jsonl`.
 * The incarnation keeps an engine made again under a deleted one's name (whose history may be
 * kept under an archive name, its rows still pointing here) apart; the day lets retention delete
 * whole days by prefix.
 */
export function bodyPrefix(engine: string, incarnation: string): string {
  return `${namePrefix(engine)}${incarnation === "" ? "-" : encodeURIComponent(incarnation)}/`;
}

/** The bodies of every incarnation of engines named `engine`: what deleting one lists to find its own. */
export function namePrefix(engine: string): string {
  return `ledger/${encodeURIComponent(engine)}/`;
}
