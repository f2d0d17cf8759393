/**
 * Takes large media out of a call's messages before it is recorded (src/ledger/media-refs.ts
 * says which strings and the reference's form): the record then holds `rx-media:sha256:<hex>`,
 * is compared with the claim's earlier calls by it (so a later call is stored as what it adds,
 * and each screenshot once), and is held by the gateway's history at a reference's size. The
 * media travel beside the record to the shipper, which uploads each before the batch naming it.
 */
import { createHash } from "node:crypto";
import { isMediaCandidate, mapPartStrings, mediaRef, mediaRefsOf } from "../../../src/ledger/media-refs";

/** Media by the SHA-256 of their string's UTF-8: what a record's references name. */
export type MediaSet = ReadonlyMap<string, string>;
export const NO_MEDIA: MediaSet = new Map();

export type TakenMedia = { messages: unknown[]; media: Map<string, string>; bytes: number };

/** `messages` with their media replaced by references, the media, and their bytes (what the messages no longer hold). */
export function takeMedia(messages: readonly unknown[]): TakenMedia {
  const media = new Map<string, string>();
  let bytes = 0;
  const out = mapPartStrings(messages, (s, key) => {
    // Most strings are short: their length bounds their UTF-8 from below, so they are not measured.
    if (s.length < 1024 && !s.startsWith("rx-media:")) return s;
    const n = Buffer.byteLength(s);
    if (!isMediaCandidate(s, key, n)) return s;
    const sha = createHash("sha256").update(s, "utf8").digest("hex");
    if (!media.has(sha)) {
      media.set(sha, s);
      bytes += n;
    }
    return mediaRef(sha);
  });
  return { messages: out, media, bytes };
}

/** The media of `all` that `messages` refer to: those a record stored with these messages needs. */
export function mediaOf(messages: readonly unknown[], all: MediaSet): MediaSet {
  if (all.size === 0) return NO_MEDIA;
  const out = new Map<string, string>();
  for (const d of mediaRefsOf(messages)) {
    const s = all.get(d);
    if (s !== undefined) out.set(d, s);
  }
  return out;
}
