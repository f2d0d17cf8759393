/**
 * `.local/credentials.json`: where `npm start` leaves the local engine's URLs and tokens for
 * people and scripts. D1 keeps only token hashes, so this file is the one copy of the secrets.
 */
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import { z } from "zod";
import { ROLES, Role } from "../../src/protocol/admin";

export const LocalCredentials = z.object({
  /** The exchange's origin, e.g. http://127.0.0.1:8787. */
  url: z.string(),
  engine: z.string(),
  /** The engine's base URL: `<url>/e/<engine>`. */
  base_url: z.string(),
  admin_token: z.string(),
  tokens: z.record(Role, z.string()),
  /** The token-in-path base URLs (`<base_url>/t/<token>`) for clients that cannot send headers. */
  token_urls: z.record(Role, z.string()),
});
export type LocalCredentials = z.infer<typeof LocalCredentials>;

/** An engine's base URL on the exchange at `url`. */
export const engineBaseUrl = (url: string, engine: string) => `${url}/e/${engine}`;

export function makeCredentials(url: string, engine: string, adminToken: string, tokens: Record<Role, string>): LocalCredentials {
  const base_url = engineBaseUrl(url, engine);
  const token_urls = Object.fromEntries(ROLES.map((r) => [r, `${base_url}/t/${tokens[r]}`])) as Record<Role, string>;
  return { url, engine, base_url, admin_token: adminToken, tokens, token_urls };
}

/** The credentials at `path`, or null when the file is missing or not in this shape. */
export async function readCredentials(path: string): Promise<LocalCredentials | null> {
  try {
    const parsed = LocalCredentials.safeParse(JSON.parse(await readFile(path, "utf8")));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

/**
 * Written to a new owner-only file renamed over the old one: writeFile's mode applies only to a
 * file it creates, so rewriting a file made wider by hand would put the tokens in it readable;
 * and a reader (a script polling for the file) never sees it half written.
 */
export async function writeCredentials(path: string, creds: LocalCredentials): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  await rm(tmp, { force: true });
  try {
    await writeFile(tmp, JSON.stringify(creds, null, 2) + "\n", { mode: 0o600, flag: "wx" });
    await rename(tmp, path);
  } finally {
    await rm(tmp, { force: true });
  }
}
