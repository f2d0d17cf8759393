/**
 * The ledger's spool (calls a stop could not send) and a start that fails: the agent takes the
 * spool once nothing of its start can fail, so a start refused (its gateway's port in use)
 * leaves the calls there for the next. It took them first, and lost them with the failed start.
 */
import { mkdirSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { startAgent } from "../../src/agent";
import { LedgerSpool } from "../../src/ledger/spool";
import { ManualClock } from "../support/manual-clock";
import { MemoryLogger } from "../support/logger";
import { testConfig } from "../support/agent-harness";
import { tempDir } from "../support/temp";
import type { TestEngine } from "../support/exchange";
import { callRecord } from "./call-record";

let dir: ReturnType<typeof tempDir>;
let blocker: Server;
beforeEach(() => (dir = tempDir()));
afterEach(async () => {
  await new Promise<void>((r) => (blocker ? blocker.close(() => r()) : r()));
  dir.remove();
});

describe("the ledger spool and a start that fails", () => {
  it("leaves the kept calls in the spool when the agent cannot start (its gateway port is taken)", async () => {
    blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", () => r()));
    const port = (blocker.address() as { port: number }).port;
    // Nothing listens on port 9 of localhost: the exchange is down, as when the last stop kept these calls.
    const engine = { name: "eng", tokens: { trainer: "t" } } as unknown as TestEngine;
    const config = testConfig("http://127.0.0.1:9", engine, dir.path, { gatewayPort: port });
    const logger = new MemoryLogger();
    const spool = new LedgerSpool(config.stateDir, new URL("http://127.0.0.1:9/e/eng").href, logger);
    mkdirSync(config.stateDir, { recursive: true, mode: 0o700 });
    const kept = callRecord("kept");
    expect(spool.keep([{ record: kept, bytes: Buffer.byteLength(JSON.stringify(kept)), media: new Map() }])).toBe(true);

    await expect(startAgent(config, logger, new ManualClock())).rejects.toMatchObject({ code: "EADDRINUSE" });

    // The start that failed sent nothing (its exchange is down) and kept nothing: the next start must still find them.
    const left = new LedgerSpool(config.stateDir, new URL("http://127.0.0.1:9/e/eng").href, new MemoryLogger()).take();
    expect(left.map((c) => c.record.call_id)).toEqual([kept.call_id]);
  });
});
