import { appendFileSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Backoff } from "../src/backoff";
import { OutcomeJournal } from "../src/outcome-journal";
import { Reachability } from "../src/reachability";
import { runWithFileLimit, unwritable } from "./support/full-disk";
import { MemoryLogger } from "./support/logger";
import { ManualClock } from "./support/manual-clock";
import { tempDir } from "./support/temp";

let dir: ReturnType<typeof tempDir>;
beforeEach(() => (dir = tempDir()));
afterEach(() => dir.remove());

const ENGINE_A = "http://exchange.test/e/a";
const ENGINE_B = "http://exchange.test/e/b";
/** Incarnations of one engine name: the first, and the engine made again after deleting it. */
const FIRST = "AAAAAAAA";
const AGAIN = "BBBBBBBB";

describe("OutcomeJournal", () => {
  it("keeps finished-but-unacked outcomes across a restart, and forgets acked ones", () => {
    const j = new OutcomeJournal(dir.path, ENGINE_A);
    j.record(1, FIRST, { ok: true, detail: "delivered" });
    j.record(2, FIRST, { ok: false, detail: "runner gone" });
    j.record(3, FIRST, { ok: true, detail: "reset" });
    j.acked(1, FIRST);
    // The process dies here (no close, no flush): a new journal reads what reached the file.
    const after = new OutcomeJournal(dir.path, ENGINE_A);
    expect(after.unacked()).toEqual([
      { seq: 2, incarnation: FIRST, outcome: { ok: false, detail: "runner gone" } },
      { seq: 3, incarnation: FIRST, outcome: { ok: true, detail: "reset" } },
    ]);
    expect(after.get(1, FIRST)).toBeUndefined();
    // Opening compacts the file to what is still needed.
    expect(readFileSync(join(dir.path, "outcomes.jsonl"), "utf8").trim().split("\n")).toHaveLength(2);
  });

  it("survives a torn last line from a crash mid-write", () => {
    const j = new OutcomeJournal(dir.path, ENGINE_A);
    j.record(5, FIRST, { ok: true, detail: "x" });
    appendFileSync(join(dir.path, "outcomes.jsonl"), '{"seq":6,"ok":tr');
    expect(new OutcomeJournal(dir.path, ENGINE_A).unacked()).toEqual([{ seq: 5, incarnation: FIRST, outcome: { ok: true, detail: "x" } }]);
  });

  it("skips a line of valid JSON that is no object (null, a number), as it skips a torn one", () => {
    const j = new OutcomeJournal(dir.path, ENGINE_A);
    j.record(5, FIRST, { ok: true, detail: "x" });
    appendFileSync(join(dir.path, "outcomes.jsonl"), "null\n7\n");
    j.record(6, FIRST, { ok: false, detail: "y" });
    expect(new OutcomeJournal(dir.path, ENGINE_A).unacked()).toEqual([
      { seq: 5, incarnation: FIRST, outcome: { ok: true, detail: "x" } },
      { seq: 6, incarnation: FIRST, outcome: { ok: false, detail: "y" } },
    ]);
  });

  it("answers only for its own engine, keeps another engine's outcomes for when the host serves it again", () => {
    const a = new OutcomeJournal(dir.path, ENGINE_A);
    a.record(1, FIRST, { ok: true, detail: "A's result delivered" });
    a.record(2, FIRST, { ok: true, detail: "A's reset" });
    a.acked(2, FIRST);
    // The host moves to engine B, same state directory: B numbers its commands from 1 too.
    const b = new OutcomeJournal(dir.path, ENGINE_B);
    expect(b.get(1, FIRST)).toBeUndefined();
    expect(b.unacked()).toEqual([]);
    b.record(1, FIRST, { ok: false, detail: "B's runner gone" });
    b.acked(1, FIRST);
    // And back to A: its unacked outcome is still owed, B's acked one is not A's.
    const again = new OutcomeJournal(dir.path, ENGINE_A);
    expect(again.unacked()).toEqual([{ seq: 1, incarnation: FIRST, outcome: { ok: true, detail: "A's result delivered" } }]);
    expect(again.get(2, FIRST)).toBeUndefined();
  });

  it("answers a command only with an outcome of its incarnation, and keeps the same seq of two incarnations apart", () => {
    const j = new OutcomeJournal(dir.path, ENGINE_A);
    j.record(1, FIRST, { ok: true, detail: "the first engine's result delivered" });
    // The engine is deleted and made again under its name: its seq 1 is another command.
    const after = new OutcomeJournal(dir.path, ENGINE_A);
    expect(after.get(1, AGAIN)).toBeUndefined();
    expect(after.get(1, FIRST)).toEqual({ ok: true, detail: "the first engine's result delivered" });
    after.record(1, AGAIN, { ok: false, detail: "the new engine's runner gone" });
    // The first engine's owed ack is refused and dropped: the new one's outcome stays owed.
    after.acked(1, FIRST);
    expect(after.get(1, AGAIN)).toEqual({ ok: false, detail: "the new engine's runner gone" });
    expect(new OutcomeJournal(dir.path, ENGINE_A).unacked()).toEqual([{ seq: 1, incarnation: AGAIN, outcome: { ok: false, detail: "the new engine's runner gone" } }]);
  });

  it("re-sends outcomes journaled before incarnations with none, and answers no command of a known incarnation from them", () => {
    appendFileSync(join(dir.path, "outcomes.jsonl"), `{"seq":1,"ok":true,"detail":"before","engine":"${ENGINE_A}"}\n{"seq":2,"ok":true,"detail":"acked","engine":"${ENGINE_A}"}\n{"acked":2,"engine":"${ENGINE_A}"}\n`);
    const j = new OutcomeJournal(dir.path, ENGINE_A);
    expect(j.ignoredUnkeyed).toBe(0);
    expect(j.unacked()).toEqual([{ seq: 1, incarnation: null, outcome: { ok: true, detail: "before" } }]);
    expect(j.get(1, FIRST)).toBeUndefined();
    expect(j.get(1, "")).toBeUndefined();
    j.acked(1, null);
    expect(new OutcomeJournal(dir.path, ENGINE_A).unacked()).toEqual([]);
  });

  it("ignores, and drops, outcomes an older agent wrote without an engine's name", () => {
    appendFileSync(join(dir.path, "outcomes.jsonl"), '{"seq":1,"ok":true,"detail":"whose?"}\n{"seq":2,"ok":true,"detail":"acked"}\n{"acked":2}\n');
    const j = new OutcomeJournal(dir.path, ENGINE_A);
    expect(j.ignoredUnkeyed).toBe(1);
    expect(j.get(1, null)).toBeUndefined();
    expect(j.unacked()).toEqual([]);
    expect(readFileSync(join(dir.path, "outcomes.jsonl"), "utf8")).toBe("");
  });
});

describe("OutcomeJournal on a disk that fills up", () => {
  it("keeps an outcome journaled after a failed (torn) append across a restart", () => {
    const src = join(import.meta.dirname, "..", "src", "outcome-journal.ts");
    const out = runWithFileLimit(
      dir.path,
      150,
      `
      import { execFileSync } from "node:child_process";
      import { OutcomeJournal } from ${JSON.stringify(src)};
      const j = new OutcomeJournal(${JSON.stringify(dir.path)}, ${JSON.stringify(ENGINE_A)});
      j.record(1, "I", { ok: true, detail: "delivered" });
      // The disk fills up in the middle of this line: what fits is written, then the write fails.
      try { j.record(2, "I", { ok: true, detail: "x".repeat(200) }); } catch (e) { console.log("2 failed " + (e as NodeJS.ErrnoException).code); }
      // Space comes back; the next outcome is journaled, and the agent dies before its ack lands.
      execFileSync("prlimit", ["--pid", String(process.pid), "--fsize=unlimited:unlimited"]);
      j.record(3, "I", { ok: true, detail: "delivered after space came back" });
      `,
    );
    expect(out).toContain("2 failed EFBIG");
    // Seen: the restarted agent had forgotten 3, glued to the torn line, and delivered it again.
    expect(new OutcomeJournal(dir.path, ENGINE_A).unacked().map((o) => o.seq)).toEqual([1, 3]);
  });

  it("opens a file it cannot rewrite (a full disk), says so naming it, and appends to it as it is", () => {
    const path = join(dir.path, "outcomes.jsonl");
    new OutcomeJournal(dir.path, ENGINE_A).record(1, FIRST, { ok: true, detail: "delivered" });
    unwritable(path);
    const logger = new MemoryLogger();
    // Seen: "cannot start: ENOSPC", exit 1, and systemd restarting the agent in a loop.
    const j = new OutcomeJournal(dir.path, ENGINE_A, logger);
    expect(logger.lines).toEqual([expect.stringMatching(new RegExp(`^warn could not rewrite ${path} on open \\(.+\\); appending to it as it is$`))]);
    j.record(2, FIRST, { ok: true, detail: "delivered" });
    rmSync(`${path}.tmp-${process.pid}`, { recursive: true });
    expect(new OutcomeJournal(dir.path, ENGINE_A).unacked().map((o) => o.seq)).toEqual([1, 2]);
  });
});

describe("Backoff", () => {
  it("grows exponentially with jitter between half and all of the ceiling, up to the maximum", () => {
    const lo = new Backoff({ initialMs: 100, maxMs: 1000, random: () => 0 });
    expect([lo.next(), lo.next(), lo.next(), lo.next(), lo.next()]).toEqual([50, 100, 200, 400, 500]);
    const hi = new Backoff({ initialMs: 100, maxMs: 1000, random: () => 1 });
    expect([hi.next(), hi.next(), hi.next(), hi.next(), hi.next()]).toEqual([100, 200, 400, 800, 1000]);
    hi.reset();
    expect(hi.next()).toBe(100);
  });
});

describe("Reachability", () => {
  it("logs an outage once, then progress every 30 s, then the recovery", async () => {
    const clock = new ManualClock();
    const log = new MemoryLogger();
    const r = new Reachability(log, clock, "http://x/e/e1");
    r.succeeded();
    expect(log.lines).toEqual([]);
    r.failed("polling for commands", new Error("ECONNREFUSED"));
    for (let i = 0; i < 100; i++) r.failed("acking command 3", new Error("ECONNREFUSED"));
    expect(log.lines).toEqual(["warn cannot reach the exchange at http://x/e/e1 (polling for commands: ECONNREFUSED); retrying with backoff"]);
    await clock.advance(31_000);
    r.failed("heartbeat", new Error("503"));
    expect(log.lines[1]).toBe("warn the exchange has been unreachable for 31 s (102 failed requests; last: heartbeat: 503); still retrying");
    await clock.advance(4_000);
    r.succeeded();
    expect(log.lines[2]).toBe("info the exchange is reachable again after 35.0 s; resuming where the agent left off");
    expect(r.down).toBe(false);
  });

  it("cuts every backoff wait short when the exchange answers again, and only then", async () => {
    const clock = new ManualClock();
    const r = new Reachability(new MemoryLogger(), clock, "http://x/e/e1");
    const stop = new AbortController();
    r.failed("polling for commands", new Error("ECONNREFUSED"));
    const woke: string[] = [];
    const poll = r.pause(30_000, stop.signal).then(() => woke.push("poll"));
    const ack = r.pause(20_000, stop.signal).then(() => woke.push("ack"));
    await clock.advance(1000);
    r.failed("heartbeat", new Error("ECONNREFUSED"));
    await clock.advance(0);
    expect(woke).toEqual([]);
    r.succeeded();
    await Promise.all([poll, ack]);
    expect(woke.sort()).toEqual(["ack", "poll"]);
    expect(clock.now() - Date.UTC(2026, 10, 30)).toBe(1000);
    // A wait begun while the exchange answers runs its course unless a later outage ends.
    let later = false;
    void r.pause(5000, stop.signal).then(() => (later = true));
    r.succeeded();
    await clock.advance(0);
    expect(later).toBe(false);
    await clock.advance(5000);
    expect(later).toBe(true);
  });
});
