/**
 * Reads the metrics a run's processes append to its metrics file (ROLLOUT_RUN_METRICS, or the
 * {metrics_file} placeholder): one JSON object per line, e.g.
 * `{"step": 12, "train/reward_mean": 0.41, "train/percent_correct": 0.5}`. Each line becomes a
 * point keyed by its line index, so reading from the start again (after an agent restart)
 * sends points the exchange already has, which it stores once.
 *
 * A file that shrinks, is replaced, or no longer holds the bytes last read where they were (a
 * process that reopens it with mode "w" and writes past the old end before the next poll, a
 * logrotate copytruncate) is read again from its start; the line index goes on counting, since the exchange
 * keeps the first point it got for an index. An agent that restarts after such a truncation
 * counts from 0 again, and the exchange keeps its earlier points for those indexes.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { StringDecoder } from "node:string_decoder";
import { MAX_STORED_BYTES } from "../../../src/protocol/limits";
import type { JsonValue, MetricsPoint } from "../../../src/protocol/runs";
import { parsePythonJson } from "../../../src/http/python-json";
import type { Logger } from "../log";

/** The most bytes one read() takes from the file: a run that wrote gigabytes meanwhile is caught up with over several polls. */
export const MAX_READ_BYTES = 8 << 20;
/**
 * The longest line kept: a longer one (no newline in sight) is dropped rather than held in memory.
 * Twice what the exchange stores of a point, so it drops only lines the exchange would refuse.
 */
export const MAX_LINE_BYTES = 2 * MAX_STORED_BYTES;

/** How many of the last bytes read are compared with the file at the next read. */
const TAIL_BYTES = 64;

export type MetricsReaderLimits = { maxReadBytes: number; maxLineBytes: number };

export class MetricsReader {
  private offset = 0;
  /** The file's size at the last read, to tell whether it holds more than was read. */
  private size = 0;
  private index = 0;
  private partial = "";
  /** The file read so far, to notice it was replaced by another one. */
  private identity: { dev: number; ino: number } | null = null;
  /** The last bytes read, just before `offset`: a file truncated and written past `offset` again no longer has them there. */
  private tail = Buffer.alloc(0);
  /** Inside a line too long to keep: what follows, up to its newline, is dropped too. */
  private skipping = false;
  /** Holds back the bytes of a character the writer had not finished writing (a flush may cut one). */
  private decoder = new StringDecoder("utf8");

  constructor(
    readonly path: string,
    private readonly now: () => number,
    private readonly logger?: Logger,
    private readonly limits: MetricsReaderLimits = { maxReadBytes: MAX_READ_BYTES, maxLineBytes: MAX_LINE_BYTES },
  ) {}

  /** The complete lines written since the last call (from at most `maxReadBytes` of the file), as points. */
  read(): MetricsPoint[] {
    let fd: number;
    try {
      fd = openSync(this.path, "r");
    } catch {
      return [];
    }
    let text: string;
    try {
      const st = fstatSync(fd);
      const replaced = this.identity !== null && (this.identity.dev !== st.dev || this.identity.ino !== st.ino);
      if (replaced) this.restart("was replaced");
      else if (st.size < this.offset) this.restart("was truncated");
      else if (!this.tailStillThere(fd)) this.restart("was truncated and written again");
      this.identity = { dev: st.dev, ino: st.ino };
      this.size = st.size;
      if (st.size <= this.offset) return [];
      const buf = Buffer.alloc(Math.min(st.size - this.offset, this.limits.maxReadBytes));
      const got = readSync(fd, buf, 0, buf.length, this.offset);
      const read = buf.subarray(0, got);
      this.offset += got;
      this.tail = Buffer.from(Buffer.concat([this.tail, read]).subarray(-TAIL_BYTES));
      text = this.partial + this.decoder.write(read);
    } finally {
      closeSync(fd);
    }
    const lines = text.split("\n");
    this.partial = lines.pop() ?? "";
    const points: MetricsPoint[] = [];
    for (const line of lines) {
      const index = this.index++;
      if (this.skipping) {
        this.skipping = false; // the end of a line dropped (and logged) before
        continue;
      }
      if (Buffer.byteLength(line) > this.limits.maxLineBytes) {
        this.dropped(index);
        continue;
      }
      const point = parseLine(line, index, this.now() / 1000);
      if (point !== null) points.push(point);
    }
    if (this.skipping || Buffer.byteLength(this.partial) > this.limits.maxLineBytes) {
      if (!this.skipping) this.dropped(this.index);
      this.partial = "";
      this.skipping = true;
    }
    return points;
  }

  /** Whether the file held more than the last read took (it takes at most `maxReadBytes`). */
  get behind(): boolean {
    return this.offset < this.size;
  }

  private dropped(index: number): void {
    this.logger?.warn(`${this.path}: dropped line ${index + 1}, longer than ${this.limits.maxLineBytes} bytes`);
  }

  private tailStillThere(fd: number): boolean {
    if (this.tail.length === 0) return true;
    const now = Buffer.alloc(this.tail.length);
    const got = readSync(fd, now, 0, now.length, this.offset - this.tail.length);
    return got === now.length && now.equals(this.tail);
  }

  private restart(why: string): void {
    this.logger?.info(`${this.path} ${why} since it was last read: reading it from its start`);
    this.offset = 0;
    this.size = 0;
    this.partial = "";
    this.tail = Buffer.alloc(0);
    this.skipping = false;
    this.decoder = new StringDecoder("utf8");
  }
}

function parseLine(line: string, index: number, now: number): MetricsPoint | null {
  let obj: unknown;
  try {
    obj = JSON.parse(line);
  } catch {
    // Python's json.dumps writes a NaN loss as the bare token NaN: the line of the step a run
    // went wrong, the one most worth seeing. JSON cannot carry such a number, so its name goes.
    const python = parsePythonJson(line);
    if (python === null) return null; // a stray line is skipped, not fatal
    obj = nonFiniteNamed(python.value);
  }
  if (typeof obj !== "object" || obj === null || Array.isArray(obj)) return null;
  const { step, timestamp, ...values } = obj as Record<string, JsonValue>;
  // As the exchange takes them (protocol/runs.ts MetricsPoint): a step of time.time_ns() is no step, a timestamp of 1e999 no time.
  return {
    index,
    step: Number.isSafeInteger(step) ? (step as number) : null,
    at: typeof timestamp === "number" && Number.isFinite(timestamp) ? timestamp : now,
    values,
  };
}

/** `v` with NaN and ±Infinity, at any depth, as the strings "NaN", "Infinity" and "-Infinity". */
function nonFiniteNamed(v: unknown): unknown {
  if (typeof v === "number") return Number.isFinite(v) ? v : String(v);
  if (Array.isArray(v)) return v.map(nonFiniteNamed);
  if (typeof v === "object" && v !== null) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, nonFiniteNamed(x)]));
  return v;
}
