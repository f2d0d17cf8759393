/**
 * An upstream's 200 event stream on its way to the client, with the trainer's key and the
 * upstream's address hidden where its events are not completion chunks (an error event, text
 * that is no JSON object): the rule the gateway keeps for a whole answer (http-upstream.ts),
 * where an error's text is `shown()` and a completion goes on as the model wrote it.
 *
 * A key may arrive split across two chunks, so events are judged whole: the bytes up to the
 * last blank line go on, the incomplete event after it waits for the rest. Upstreams send
 * whole events per chunk, so nothing waits then; nor does a client lose anything by the wait
 * otherwise, as it acts on an event only at its blank line. The cut is made on bytes, at line
 * ends (ASCII, never inside a UTF-8 character), so a character split across chunks stays whole.
 * Events that carry none of the hidden text, nearly all, go on as the very bytes that came,
 * after a look for it (Buffer.includes for each of hiddenTextProbe's few strings, about 0.3 µs
 * for a token's chunk here; the probe costs about 10 µs once per stream).
 */
import { isErrorAnswer } from "./errors";
import { isRecord } from "../../../src/protocol/record";

const LF = 0x0a;
const CR = 0x0d;
const NOTHING = Buffer.alloc(0);
/** A blank line, kept by split: a CR is a line end of its own only when no LF follows it. */
const BLANK_LINES = /((?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n))/;

/**
 * Where the last blank line in `b` ends (0: `b` holds none). Lines end in LF, CRLF or CR (SSE
 * allows all three), so a blank line is LF LF, CR CR or LF CR (with the LF of a CRLF after it).
 */
export function eventsEnd(b: Buffer): number {
  const n = b.length;
  // The usual chunk: whole events, LF or CRLF.
  if (n >= 2 && b[n - 1] === LF && (b[n - 2] === LF || (n >= 4 && b[n - 2] === CR && b[n - 3] === LF && b[n - 4] === CR))) return n;
  const at = Math.max(b.lastIndexOf("\n\n"), b.lastIndexOf("\r\r"), b.lastIndexOf("\n\r"));
  if (at < 0) return 0;
  return at + 2 + (b[at + 1] === CR && b[at + 2] === LF ? 1 : 0);
}

export class SseRedaction {
  private readonly probe: Buffer[];
  private readonly probeText: readonly string[];
  /** An incomplete event's bytes so far, and its last bytes (a blank line may begin in them). */
  private held: Buffer[] = [];
  private heldEnd: Buffer = NOTHING;
  /** The bytes of `held`: an event that never ends must not be held without bound (http-upstream.ts). */
  heldBytes = 0;

  /**
   * `shown`: the text as a client may see it (the gateway's redaction); `probe`: the strings
   * without which `shown` changes nothing (hiddenTextProbe).
   */
  constructor(
    private readonly shown: (text: string) => string,
    probe: readonly string[],
  ) {
    this.probeText = probe;
    this.probe = probe.map((p) => Buffer.from(p));
  }

  /** One chunk from the upstream: what goes to the client now (the whole events it completes). */
  push(chunk: Buffer): Buffer {
    if (this.held.length === 0) {
      const end = eventsEnd(chunk);
      if (end === chunk.length) return this.told(chunk);
      if (end < chunk.length) this.hold(chunk.subarray(end));
      return end === 0 ? NOTHING : this.told(chunk.subarray(0, end));
    }
    // Looked for with the held event's last 3 bytes in front: a blank line may straddle the cut.
    const back = this.heldEnd.length;
    const end = eventsEnd(Buffer.concat([this.heldEnd, chunk])) - back;
    if (end <= 0) {
      this.hold(chunk);
      return NOTHING;
    }
    const whole = Buffer.concat([...this.held, chunk.subarray(0, end)]);
    this.held = [];
    this.heldEnd = NOTHING;
    this.heldBytes = 0;
    if (end < chunk.length) this.hold(chunk.subarray(end));
    return this.told(whole);
  }

  /** The stream ended: what is left (a last event without its blank line), told as the rest. */
  end(): Buffer {
    if (this.held.length === 0) return NOTHING;
    const rest = Buffer.concat(this.held);
    this.held = [];
    this.heldEnd = NOTHING;
    this.heldBytes = 0;
    return this.told(rest);
  }

  private hold(piece: Buffer): void {
    this.held.push(piece);
    this.heldBytes += piece.length;
    this.heldEnd = piece.length >= 3 ? piece.subarray(-3) : Buffer.concat([this.heldEnd, piece]).subarray(-3);
  }

  /** Whole events as the client gets them: the same bytes unless an event needs hiding. */
  private told(events: Buffer): Buffer {
    if (!this.probe.some((p) => events.includes(p))) return events;
    const text = events.toString("utf8");
    // [event, blank line, event, ..., rest]: the blank lines go on as they came.
    const parts = text.split(BLANK_LINES);
    let changed = false;
    for (let i = 0; i < parts.length; i += 2) {
      const told = this.event(parts[i]!);
      if (told !== parts[i]) {
        parts[i] = told;
        changed = true;
      }
    }
    return changed ? Buffer.from(parts.join("")) : events;
  }

  /**
   * One event as the client gets it: as it came when it is a completion chunk (or `[DONE]`),
   * else with its data's value and its other lines `shown`; a rewritten event's lines end in LF.
   */
  private event(event: string): string {
    if (!this.probeText.some((p) => event.includes(p))) return event;
    const lines = event.split(/\r\n|\r|\n/);
    const isData = (l: string): boolean => l.startsWith("data:");
    const value = lines
      .filter(isData)
      .map((l) => l.slice(l.startsWith("data: ") ? 6 : 5))
      .join("\n");
    const named = lines.some((l) => /^event: ?error$/.test(l));
    if (!named && (value === "[DONE]" || isCompletion(value))) return event;
    const first = lines.findIndex(isData);
    return lines
      .flatMap((l, i) => (i === first ? this.shown(value).split("\n").map((v) => `data: ${v}`) : isData(l) ? [] : [this.shown(l)]))
      .join("\n");
  }
}

/** A JSON object that is not an error: what the gateway passes on as the model wrote it. */
function isCompletion(value: string): boolean {
  try {
    const v: unknown = JSON.parse(value);
    return isRecord(v) && !isErrorAnswer(v);
  } catch {
    return false;
  }
}
