/**
 * `.dev.vars`: the local secrets, next to wrangler.toml, read by wrangler's own reader so that a
 * line means to `npm start` what it means to `wrangler dev` (dotenv: `KEY=value # comment`,
 * quotes, `export KEY=...`, the last of two lines for a key wins).
 * Missing secrets are generated once and appended, so a restart keeps them.
 */
import { randomBytes } from "node:crypto";
import { open, readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { unstable_getVarsForDev } from "wrangler";

export const LOCAL_SECRETS = ["ADMIN_TOKEN", "CLAIM_KEY_SECRET"] as const;
export type LocalSecrets = Record<(typeof LOCAL_SECRETS)[number], string>;

/** The `.dev.vars` wrangler reads for the Worker configured at `configPath`. */
export const devVarsPath = (configPath: string) => join(dirname(configPath), ".dev.vars");

/** The file's text, or null when there is none. */
async function readText(path: string): Promise<string | null> {
  try {
    return await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw err;
  }
}

/**
 * What wrangler reads from the `.dev.vars` of `configPath`. Called only when the file exists:
 * without one wrangler would read `.env` files (and maybe the environment) instead, and the
 * secrets `npm start` makes live in `.dev.vars`.
 */
function wranglerDevVars(configPath: string): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const [key, binding] of Object.entries(unstable_getVarsForDev(configPath, undefined, {}, undefined, true))) {
    if (binding.type === "secret_text") vars[key] = binding.value;
  }
  return vars;
}

/**
 * A secret with whitespace in it is almost surely a line wrangler reads otherwise than meant
 * (a note after the value with no `#` before it), and an admin token with a space cannot ride in an
 * `Authorization: Bearer` header: refused, naming the variable (not the value, a secret).
 */
function assertNoWhitespace(path: string, vars: Record<string, string>): void {
  for (const key of LOCAL_SECRETS) {
    if (vars[key] !== undefined && /\s/.test(vars[key])) {
      throw new Error(
        `${key} in ${path} has whitespace in its value (as wrangler reads the file), which a secret here cannot have: ` +
          `put a note after " #" (${key}=value # note), or delete the line to have a new ${key} made`,
      );
    }
  }
}

/** Appends `lines` to `path`, the file made (or first turned) owner-only: it holds secrets. */
async function appendSecrets(path: string, lines: string): Promise<void> {
  const file = await open(path, "a", 0o600);
  try {
    await file.chmod(0o600);
    await file.appendFile(lines);
  } finally {
    await file.close();
  }
}

/**
 * Reads the secrets from the `.dev.vars` of `configPath`, generating and appending the ones it
 * lacks (or has empty); `created` names those.
 */
export async function ensureDevVars(configPath: string): Promise<{ path: string; secrets: LocalSecrets; created: string[] }> {
  const path = devVarsPath(configPath);
  const text = await readText(path);
  const vars = text === null ? {} : wranglerDevVars(configPath);
  assertNoWhitespace(path, vars);
  const created = LOCAL_SECRETS.filter((k) => !vars[k]);
  if (created.length > 0) {
    for (const k of created) vars[k] = randomBytes(32).toString("base64url");
    const lead = text === null || text === "" || text.endsWith("\n") ? "" : "\n";
    await appendSecrets(path, lead + created.map((k) => `${k}=${vars[k]}\n`).join(""));
  }
  return { path, secrets: { ADMIN_TOKEN: vars["ADMIN_TOKEN"]!, CLAIM_KEY_SECRET: vars["CLAIM_KEY_SECRET"]! }, created };
}
