/**
 * Whether an upstream's event stream ended as an OpenAI stream ends: with `data: [DONE]`, after
 * a finish_reason on choice 0 (some servers leave [DONE] out), or with an error event of its own.
 * A stream that just stops (a model server killed, a proxy's read timeout, either closing the
 * response cleanly) ends none of these ways, and its answer is cut short however it reads.
 *
 * Per chunk it costs a few Buffer.includes (for data, and for a finish_reason that is a string
 * until choice 0 has one); only the chunks that hold such a finish_reason are parsed, and the
 * last chunk with data when the stream ends before one.
 */
import { isRecord } from "../../../src/protocol/record";
import { firstChoice } from "../ledger/token-fields";
import { isErrorAnswer } from "./errors";

/** A finish_reason that is not null, as JSON writers space it (JSON.stringify, pydantic, Python's json.dumps). */
const FINISH_REASON = [Buffer.from('"finish_reason":"'), Buffer.from('"finish_reason": "')];
const DATA = Buffer.from("data:");
const NOTHING = Buffer.alloc(0);
const BLANK_LINE = /(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)/;

/** An `event: error`, whatever its data: an upstream's own way to end a stream with an error. */
const ERROR_EVENT = Symbol("error event");

export class StreamEnd {
  private finished = false;
  private last: Buffer = NOTHING;

  /** Whole events of the stream, as the client gets them. */
  saw(events: Buffer): void {
    // A chunk of comments alone (an upstream's own keep-alives) does not move the end.
    if (!events.includes(DATA)) return;
    this.last = events;
    if (!this.finished && FINISH_REASON.some((p) => events.includes(p))) this.finished = eventValues(events).some(finishesChoice0);
  }

  /** The stream is over: whether it ended as an OpenAI stream ends. */
  ended(): boolean {
    if (this.finished) return true;
    const last = eventValues(this.last).at(-1);
    return last === "[DONE]" || last === ERROR_EVENT || (isRecord(last) && isErrorAnswer(last));
  }
}

const finishesChoice0 = (v: unknown): boolean => isRecord(v) && typeof firstChoice(v)?.["finish_reason"] === "string";

/** What each event in `events` carries: ERROR_EVENT, "[DONE]", its data's JSON value, or undefined for data that is none. */
function eventValues(events: Buffer): unknown[] {
  return events
    .toString("utf8")
    .split(BLANK_LINE)
    .flatMap((block) => {
      const lines = block.split(/\r\n|\r|\n/);
      if (lines.some((l) => /^event: ?error$/.test(l))) return [ERROR_EVENT];
      const data = lines
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(l.startsWith("data: ") ? 6 : 5))
        .join("\n");
      if (data === "") return [];
      return [data.trim() === "[DONE]" ? "[DONE]" : parseJson(data)];
    });
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
