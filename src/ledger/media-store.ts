/**
 * The ledger's media in R2 (docs/ledger.md, "Media"): each stored once a UTC day by its SHA-256,
 * under the day's prefix beside the bodies, at `ledger/<engine>/<incarnation>/<day>/media/<sha256>`.
 * Under the day rather than apart so that retention, which deletes whole days, never takes a
 * medium a kept body refers to: a batch is only stored when every medium it refers to is in its
 * own day (missingMedia), so a medium lives as long as the bodies that name it. Engine deletion
 * takes them with the rest of the incarnation's prefix; keep_history keeps them.
 */
import { hex } from "../auth/tokens";
import { bodyPrefix } from "./keys";
import { MAX_MEDIA_BYTES } from "./media-refs";

export type MediaEngine = { name: string; incarnation: string };

const mediaKey = (engine: MediaEngine, day: string, sha256: string): string => `${bodyPrefix(engine.name, engine.incarnation)}${day}/media/${sha256}`;

const enc = new TextEncoder();

export type MediaRefusal = { ok: false; status: 413 | 422; error: string; detail: string };

/** Stores `data` as the medium `sha256` names for `day`; idempotent (the same bytes again). Refused when it is not that medium or too large. */
export async function putMedia(bucket: R2Bucket, engine: MediaEngine, sha256: string, data: string, day: string): Promise<{ ok: true; bytes: number } | MediaRefusal> {
  const bytes = enc.encode(data);
  if (bytes.length > MAX_MEDIA_BYTES) return { ok: false, status: 413, error: "media_too_large", detail: `A medium is at most ${MAX_MEDIA_BYTES} bytes of UTF-8; this one is ${bytes.length}.` };
  const digest = hex(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)));
  if (digest !== sha256) return { ok: false, status: 422, error: "media_hash_mismatch", detail: `The data's SHA-256 is ${digest}, not the ${sha256} the path names; nothing is stored.` };
  await bucket.put(mediaKey(engine, day, sha256), bytes, { httpMetadata: { contentType: "text/plain; charset=utf-8" } });
  return { ok: true, bytes: bytes.length };
}

/** The digests of `refs` that have no medium stored for `day`: a batch naming them is not stored. */
export async function missingMedia(bucket: R2Bucket, engine: MediaEngine, refs: ReadonlySet<string>, day: string): Promise<string[]> {
  const found = await Promise.all([...refs].map(async (d) => [d, (await bucket.head(mediaKey(engine, day, d))) !== null] as const));
  return found.filter(([, ok]) => !ok).map(([d]) => d);
}

/** Days one read looks in at most (each an R2 read), newest first: retention keeps a few dozen. */
const MAX_DAYS_PROBED = 400;

/** The medium `sha256` names, from the newest day that holds it; null when none does (never stored, or gone with its days). */
export async function readMedia(bucket: R2Bucket, engine: MediaEngine, sha256: string): Promise<string | null> {
  const prefix = bodyPrefix(engine.name, engine.incarnation);
  const days: string[] = [];
  let cursor: string | undefined;
  do {
    const listed = await bucket.list({ prefix, delimiter: "/", ...(cursor === undefined ? {} : { cursor }) });
    days.push(...listed.delimitedPrefixes);
    cursor = listed.truncated ? listed.cursor : undefined;
  } while (cursor !== undefined && days.length < 4 * MAX_DAYS_PROBED);
  for (const dayPrefix of days.sort().reverse().slice(0, MAX_DAYS_PROBED)) {
    const obj = await bucket.get(`${dayPrefix}media/${sha256}`);
    if (obj !== null) return await obj.text();
  }
  return null;
}
