/**
 * An export whose body ends inside a line: the stream was cut, however cleanly it ended (a
 * server may end a chunked answer whose body failed as if it were whole: cloudflare/workerd#6818).
 * Every line of an export ends in a newline (docs/ledger.md), so our readers tell it apart:
 * LedgerClient.export() throws export_interrupted, and `npm run export` exits 1 and leaves the
 * whole lines alone in its file. A Node server stands in for the exchange, sending such a body.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EXPORT_INTERRUPTED, ExchangeError, LedgerClient } from "../src/client";

const ROOT = join(import.meta.dirname, "..");

/** A whole Trajectory line the typed client reads (no calls). */
function line(i: number): string {
  return JSON.stringify({
    episode_uuid: `ep-${i}`,
    fence: 1,
    client_uuid: "c",
    task_id: "t",
    episode_type: "default",
    run: 0,
    global_step: null,
    outcome: "ended",
    reward: 1,
    is_success: true,
    ended_at: 1_700_000_000_000 - i,
    calls: [],
    prompt_tokens: 0,
    completion_tokens: 0,
    workflow_output: null,
    training: null,
  });
}

const TOTAL = 5;
/** 200, the total, two whole lines and the start of the third, then a clean end of the chunked body. */
const BODIES: Record<string, string> = {
  "/e/mid/trajectories/export": `${line(0)}\n${line(1)}\n${line(2).slice(0, 40)}`,
};

let server: Server;
let url: string;
const dir = mkdtempSync(join(tmpdir(), "rx-export-cut-"));

beforeAll(async () => {
  server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0] ?? "";
    const body = BODIES[path];
    if (body === undefined) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": "application/x-ndjson; charset=utf-8", "x-trajectories-total": String(TOTAL) });
    // Chunked (no content-length), written in pieces, then ended cleanly: what a reader sees from workerd#6818.
    res.write(body.slice(0, 10));
    res.write(body.slice(10));
    res.end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((r) => server?.close(r));
  rmSync(dir, { recursive: true, force: true });
});

async function drain(engine: string): Promise<{ got: string[]; error: unknown }> {
  const client = new LedgerClient({ baseUrl: `${url}/e/${engine}`, token: "rx_viewer" });
  const got: string[] = [];
  try {
    for await (const t of client.export()) got.push(t.episode_uuid);
    return { got, error: null };
  } catch (e) {
    return { got, error: e };
  }
}

function runExport(args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", join(ROOT, "scripts", "export.ts"), ...args], {
      cwd: ROOT,
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    child.on("close", (code) => resolve({ code, stderr }));
  });
}

describe("an export cut inside a line, its stream ended cleanly", () => {
  it("LedgerClient.export() yields the whole lines, then throws export_interrupted (not bad_response)", async () => {
    const { got, error } = await drain("mid");
    expect(got).toEqual(["ep-0", "ep-1"]);
    expect(error).toBeInstanceOf(ExchangeError);
    expect((error as ExchangeError).code).toBe(EXPORT_INTERRUPTED);
  });

  it("npm run export exits 1 saying so, its file holding the whole lines before the cut", async () => {
    const out = join(dir, "mid.jsonl");
    const r = await runExport(["--url", url, "--engine", "mid", "--token", "rx_viewer", "--out", out]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/the export broke off after 2 of 5 trajectories, inside the next one's line/);
    expect(readFileSync(out, "utf8")).toBe(`${line(0)}\n${line(1)}\n`);
  });
});
