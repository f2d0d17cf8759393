/**
 * A run process's report carries its log's last lines, under the exchange's bound in bytes of
 * UTF-8 (ProcessReport.log_tail): a log of bytes that are no UTF-8 reads back as U+FFFD, three
 * bytes each, and its tail must still be taken.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { MAX_LOG_TAIL_BYTES, utf8Bytes } from "../../../src/protocol/limits";
import { ProcessReport } from "../../../src/protocol/runs";
import { RunProcess } from "../../src/runs/run-process";
import { ManualClock } from "../support/manual-clock";
import { tempDir } from "../support/temp";

const dir = tempDir();
afterEach(() => dir.remove());

describe("a run process's reported log tail", () => {
  it("stays within the exchange's bound in bytes when the log is Latin-1", () => {
    const log = join(dir.path, "env.log");
    writeFileSync(log, Buffer.concat(Array.from({ length: 60 }, () => Buffer.concat([Buffer.alloc(199, 0xe9), Buffer.from("\n")]))));
    const report = new RunProcess("env", 0, ["python", "env.py"], log, new ManualClock()).report(true);
    expect(report.log_tail).toMatch(/\uFFFD{199}$/);
    expect(utf8Bytes(report.log_tail)).toBeLessThanOrEqual(MAX_LOG_TAIL_BYTES);
    expect(ProcessReport.safeParse(report).success).toBe(true);
  });
});
