/**
 * `.dev.vars`: the local secrets, in the dotenv format wrangler reads (KEY=value lines).
 * Missing secrets are generated once and appended, so a restart keeps them.
 */
import { randomBytes } from "node:crypto";
import { appendFile, readFile } from "node:fs/promises";

export const LOCAL_SECRETS = ["ADMIN_TOKEN", "CLAIM_KEY_SECRET"] as const;
export type LocalSecrets = Record<(typeof LOCAL_SECRETS)[number], string>;

/** Parses dotenv lines: `KEY=value`, optionally quoted; blank lines and `#` comments skipped. */
export function parseDevVars(text: string): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const raw of text.split(/\r?\n/)) {
    const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$/.exec(raw);
    if (!m?.[1] || raw.trimStart().startsWith("#")) continue;
    const value = m[2] ?? "";
    vars[m[1]] = /^(["']).*\1$/.test(value) ? value.slice(1, -1) : value;
  }
  return vars;
}

/** Reads the secrets from `path`, generating and appending the ones it lacks; `created` names those. */
export async function ensureDevVars(path: string): Promise<{ secrets: LocalSecrets; created: string[] }> {
  let text = "";
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  const vars = parseDevVars(text);
  const created = LOCAL_SECRETS.filter((k) => !vars[k]);
  if (created.length > 0) {
    for (const k of created) vars[k] = randomBytes(32).toString("base64url");
    const lead = text === "" || text.endsWith("\n") ? "" : "\n";
    await appendFile(path, lead + created.map((k) => `${k}=${vars[k]}\n`).join(""), { mode: 0o600 });
  }
  return { secrets: { ADMIN_TOKEN: vars["ADMIN_TOKEN"]!, CLAIM_KEY_SECRET: vars["CLAIM_KEY_SECRET"]! }, created };
}
