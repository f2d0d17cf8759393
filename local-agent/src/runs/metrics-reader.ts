/**
 * Reads the metrics a run's processes append to its metrics file (ROLLOUT_RUN_METRICS, or the
 * {metrics_file} placeholder): one JSON object per line, e.g.
 * `{"step": 12, "train/reward_mean": 0.41, "train/percent_correct": 0.5}`. Each line becomes a
 * point keyed by its line index, so reading from the start again (after an agent restart)
 * sends points the exchange already has, which it stores once.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { StringDecoder } from "node:string_decoder";
import type { JsonValue, MetricsPoint } from "../../../src/protocol/runs";

export class MetricsReader {
  private offset = 0;
  private index = 0;
  private partial = "";
  /** Holds back the bytes of a character the writer had not finished writing (a flush may cut one). */
  private readonly decoder = new StringDecoder("utf8");

  constructor(
    readonly path: string,
    private readonly now: () => number,
  ) {}

  /** The complete lines written since the last call, as points. */
  read(): MetricsPoint[] {
    let fd: number;
    try {
      fd = openSync(this.path, "r");
    } catch {
      return [];
    }
    let text: string;
    try {
      const size = fstatSync(fd).size;
      if (size <= this.offset) return [];
      const buf = Buffer.alloc(size - this.offset);
      readSync(fd, buf, 0, buf.length, this.offset);
      this.offset = size;
      text = this.partial + this.decoder.write(buf);
    } finally {
      closeSync(fd);
    }
    const lines = text.split("\n");
    this.partial = lines.pop() ?? "";
    const points: MetricsPoint[] = [];
    for (const line of lines) {
      const index = this.index++;
      const point = parseLine(line, index, this.now() / 1000);
      if (point !== null) points.push(point);
    }
    return points;
  }
}

function parseLine(line: string, index: number, now: number): MetricsPoint | null {
  let obj: unknown;
  try {
    obj = JSON.parse(line);
  } catch {
    return null; // a stray line is skipped, not fatal
  }
  if (typeof obj !== "object" || obj === null || Array.isArray(obj)) return null;
  const { step, timestamp, ...values } = obj as Record<string, JsonValue>;
  return {
    index,
    step: typeof step === "number" && Number.isInteger(step) ? step : null,
    at: typeof timestamp === "number" ? timestamp : now,
    values,
  };
}
