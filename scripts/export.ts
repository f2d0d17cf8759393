/**
 * `npm run export`: an engine's trajectories (the ledger's, docs/ledger.md) to a JSON-lines file,
 * streamed: the file grows as the exchange sends, memory stays flat, and a progress bar on
 * stderr counts trajectories against the total the exchange announces.
 *
 *   npm run export -- --out trajectories.jsonl [--engine E] [--url URL] [--token T]
 *                     [--run N] [--global-step N] [--task-id T] [--outcome ended|aborted|reaped]
 *                     [--min-reward X] [--max-reward X] [--since MS] [--until MS]
 *                     [--form whole|delta] [--credentials FILE]
 *
 * For the local exchange (no --url, or `npm start`'s own) the engine and the viewer's token
 * default to what `npm start` left in .local/credentials.json (or --credentials FILE); another
 * exchange needs its own --token, and is never sent the local one. Exits 1 on a refusal (with
 * the exchange's reason) or a broken stream.
 */
import { open, truncate } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { TrajectoryExportQuery } from "../src/protocol/ledger";
import { readCredentials, engineBaseUrl } from "./local/credentials";
import { REPO_ROOT } from "./local/exchange";

/** The export's query, as flags: its filters, and the trajectories' form (docs/ledger.md, "Delta form"). */
const QUERY_FLAGS = ["run", "global-step", "task-id", "outcome", "min-reward", "max-reward", "since", "until", "form"] as const;
const TOTAL_HEADER = "x-trajectories-total";
const WIDTH = 30;

function bar(done: number, total: number): string {
  const f = total > 0 ? Math.min(1, done / total) : 1;
  const n = Math.round(f * WIDTH);
  return `[${"#".repeat(n)}${"-".repeat(WIDTH - n)}] ${(f * 100).toFixed(0).padStart(3)}%`;
}

function fail(why: string): never {
  process.stderr.write(`export: ${why}\n`);
  process.exit(1);
}

const USAGE = `npm run export -- --out trajectories.jsonl [--engine E] [--url URL] [--token T]
                  [--run N] [--global-step N] [--task-id T] [--outcome ended|aborted|reaped]
                  [--min-reward X] [--max-reward X] [--since MS] [--until MS]
                  [--form whole|delta] [--credentials FILE]

An engine's trajectories to a JSON-lines file (docs/ledger.md). --form delta writes each call as
what it added to the call it names: a file that grows with long agents' turns, not their square. Against the local exchange the
engine and the viewer's token default to npm start's .local/credentials.json.
`;

/** A URL without its trailing slashes. */
const trimmed = (u: string): string => u.replace(/\/+$/, "");

/** What a failed fetch says, with its cause (undici's "fetch failed" alone names nothing). */
function reason(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  const cause = e.cause as { code?: unknown; message?: unknown } | undefined;
  const why = typeof cause?.code === "string" ? cause.code : typeof cause?.message === "string" ? cause.message : null;
  return why === null ? e.message : `${e.message} (${why})`;
}

/**
 * --url as the exchange's origin, and the engine it names: an engine's base URL
 * (`<origin>/e/<engine>`, as npm start prints it) is taken for its origin and engine, not
 * sent to `<origin>/e/<engine>/e/<engine>/...`, and the token of one with the token in its path
 * (`.../t/<token>`) unless --token gives one. One that names another engine than --engine is refused.
 */
function exchangeUrl(raw: string, engine: string | undefined): { origin: string; engine: string | undefined; token: string | undefined } {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    fail(`--url ${raw} is not a URL: the exchange's, e.g. http://127.0.0.1:8787`);
  }
  const m = /^(.*)\/e\/([^/]+)(?:\/t\/([^/]+))?\/*$/.exec(u.pathname);
  if (m === null) return { origin: trimmed(raw), engine: undefined, token: undefined };
  const decoded = (part: string): string => {
    try {
      return decodeURIComponent(part);
    } catch {
      fail(`--url ${raw}: '${part}' is not percent-encoded text`);
    }
  };
  const named = decoded(m[2] as string);
  if (engine !== undefined && engine !== named) fail(`--url names engine '${named}' (${u.origin}${u.pathname}), --engine '${engine}': give the exchange's URL (${u.origin}${m[1]}) with --engine, or the engine's URL alone`);
  return { origin: `${u.origin}${m[1]}`, engine: named, token: m[3] === undefined ? undefined : decoded(m[3]) };
}

async function main(): Promise<void> {
  const { values: a } = parseArgs({
    options: {
      help: { type: "boolean", short: "h" },
      out: { type: "string" },
      engine: { type: "string" },
      url: { type: "string" },
      token: { type: "string" },
      credentials: { type: "string" },
      ...Object.fromEntries(QUERY_FLAGS.map((f) => [f, { type: "string" as const }])),
    },
  });
  if (a.help === true) {
    process.stdout.write(USAGE);
    return;
  }
  const opts = a as Record<string, string | undefined>;
  if (opts["out"] === undefined) fail(`--out FILE is required\n\n${USAGE}`);
  const credentialsPath = opts["credentials"] ?? join(REPO_ROOT, ".local", "credentials.json");
  const found = await readCredentials(credentialsPath);
  if (found === null && opts["credentials"] !== undefined) fail(`cannot read the credentials in ${credentialsPath}: no such file, or not what \`npm start\` writes`);
  const given = opts["url"] === undefined ? undefined : exchangeUrl(opts["url"], opts["engine"]);
  // The local exchange's token goes to the local exchange only.
  const local = found !== null && (given === undefined || trimmed(given.origin) === trimmed(found.url)) ? found : null;
  const url = given?.origin ?? local?.url ?? fail(`no --url, and no ${credentialsPath} from \`npm start\``);
  const engine = opts["engine"] ?? given?.engine ?? local?.engine ?? fail("no --engine");
  const token = opts["token"] ?? given?.token ?? local?.tokens.viewer ?? fail(`no --token for ${url}`);

  const raw = Object.fromEntries(QUERY_FLAGS.filter((f) => opts[f] !== undefined).map((f) => [f.replace(/-/g, "_"), opts[f] as string]));
  const query = TrajectoryExportQuery.safeParse(raw);
  if (!query.success) fail(query.error.issues.map((i) => `--${String(i.path[0]).replace(/_/g, "-")}: ${i.message}`).join("; "));
  const qs = new URLSearchParams({ format: "jsonl", ...raw }).toString();

  const exportUrl = `${engineBaseUrl(trimmed(url), engine)}/trajectories/export`;
  const res = await fetch(`${exportUrl}?${qs}`, { headers: { authorization: `Bearer ${token}` } }).catch((e: unknown) =>
    fail(`cannot reach ${exportUrl}: ${reason(e)}${local !== null && opts["url"] === undefined ? " (is `npm start` running?)" : ""}`),
  );
  if (!res.ok || res.body === null) {
    const text = await res.text();
    let why = text.slice(0, 300);
    try {
      const j = JSON.parse(text) as { error?: string; detail?: string };
      why = `${j.error ?? res.status}: ${j.detail ?? ""}`;
    } catch {
      // not JSON: the text says it
    }
    fail(`the exchange answered ${res.status}: ${why}`);
  }
  const total = Number(res.headers.get(TOTAL_HEADER) ?? "0");
  // Opened (and awaited) before the first chunk: a path it cannot create is one line, not an
  // unhandled stream error; a write that fails later (a full disk) ends the export the same way.
  const out = opts["out"];
  const handle = await open(out, "w").catch((e: unknown) => fail(`cannot write ${out}: ${e instanceof Error ? e.message : String(e)}`));
  const file = handle.createWriteStream();
  let lines = 0;
  file.on("error", (e) => fail(`writing ${out} failed after ${lines.toLocaleString("en")} trajectories: ${e.message}; what it holds is not the whole export`));
  const started = Date.now();
  let bytes = 0;
  let drawn = 0;
  const tty = process.stderr.isTTY;
  const draw = (final: boolean): void => {
    const now = Date.now();
    if (!final && now - drawn < 200) return;
    drawn = now;
    const secs = Math.max(0.001, (now - started) / 1000);
    const line = `${bar(lines, total)} ${lines.toLocaleString("en")}/${total.toLocaleString("en")} trajectories, ${(bytes / 1e6).toFixed(1)} MB, ${(lines / secs).toFixed(0)}/s`;
    if (tty) process.stderr.write(`\r${line}${final ? "\n" : ""}`);
    else if (final) process.stderr.write(`${line}\n`);
  };
  // Bytes after the last newline: a line not ended yet.
  let unended = 0;
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      for (const b of chunk) if (b === 10) lines++;
      bytes += chunk.length;
      const nl = chunk.lastIndexOf(10);
      unended = nl < 0 ? unended + chunk.length : chunk.length - nl - 1;
      if (!file.write(chunk)) await new Promise<void>((r) => file.once("drain", () => r()));
      draw(false);
    }
  } catch (e) {
    // The exchange cut the answer off (the token revoked or the engine deleted meanwhile, or a failure on the way): the file is not the export.
    await new Promise<void>((resolve) => file.end(() => resolve()));
    draw(true);
    fail(`the export broke off after ${lines.toLocaleString("en")} of ${total.toLocaleString("en")} trajectories (${e instanceof Error ? e.message : String(e)}); ${opts["out"]} holds what came before the break, its last line perhaps cut. The token may have been revoked or the engine deleted meanwhile: see docs/ledger.md.`);
  }
  await new Promise<void>((resolve, reject) => file.end((e?: Error | null) => (e ? reject(e) : resolve())));
  draw(true);
  // Every line ends in a newline: a body that ended inside one broke off, though its stream ended cleanly.
  if (unended > 0) {
    await truncate(out, bytes - unended);
    fail(`the export broke off after ${lines.toLocaleString("en")} of ${total.toLocaleString("en")} trajectories, inside the next one's line; ${out} holds the whole lines before it. See docs/ledger.md.`);
  }
  // Fewer than announced: some were deleted meanwhile (retention), which is not an error.
  if (lines < total) process.stderr.write(`export: ${total - lines} of the ${total} trajectories announced were gone by the time the export reached them\n`);
}

main().catch((e: unknown) => fail(e instanceof Error ? e.message : String(e)));
