/**
 * `npm run export` (scripts/export.ts) against stand-ins for two exchanges that record what they
 * are sent: the local one, named by a credentials file as `npm start` writes it, and another.
 * The export route itself is tested on the Worker (test/ledger.test.ts).
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeCredentials } from "../scripts/local/credentials";

const ROOT = join(import.meta.dirname, "..");
const LINES = ['{"episode_uuid":"ep-1"}', '{"episode_uuid":"ep-2"}'];
type Stand = { server: Server; url: string; seen: { path: string; authorization: string | undefined }[] };

async function standIn(): Promise<Stand> {
  const seen: Stand["seen"] = [];
  const server = createServer((req, res) => {
    seen.push({ path: req.url ?? "", authorization: req.headers["authorization"] });
    res.writeHead(200, { "content-type": "application/x-ndjson", "x-trajectories-total": String(LINES.length) }).end(LINES.map((l) => `${l}\n`).join(""));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

const dir = mkdtempSync(join(tmpdir(), "rx-export-"));
const credentials = join(dir, "credentials.json");
let local: Stand;
let other: Stand;

beforeAll(async () => {
  [local, other] = await Promise.all([standIn(), standIn()]);
  const tokens = { operator: "rx_operator_local", trainer: "rx_trainer_local", client: "rx_client_local", viewer: "rx_viewer_local" };
  writeFileSync(credentials, JSON.stringify(makeCredentials(local.url, "default", "admin-local", tokens)));
});
afterAll(async () => {
  for (const s of [local, other]) await new Promise((r) => s?.server.close(r));
  rmSync(dir, { recursive: true, force: true });
});

function runExport(args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", join(ROOT, "scripts", "export.ts"), "--credentials", credentials, ...args], { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    child.on("close", (code) => resolve({ code, stderr }));
  });
}

describe("npm run export", () => {
  it("exports the local engine with the viewer token npm start left, filters in the query", async () => {
    const out = join(dir, "local.jsonl");
    expect((await runExport(["--out", out, "--outcome", "ended"])).code).toBe(0);
    expect(readFileSync(out, "utf8")).toBe(LINES.map((l) => `${l}\n`).join(""));
    expect(local.seen.at(-1)).toEqual({ path: "/e/default/trajectories/export?format=jsonl&outcome=ended", authorization: "Bearer rx_viewer_local" });
  });

  it("never sends the local token to another exchange: without its own --token it refuses", async () => {
    const refused = await runExport(["--url", other.url, "--engine", "default", "--out", join(dir, "other.jsonl")]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`no --token for ${other.url}`);
    expect(other.seen).toEqual([]);
    expect((await runExport(["--url", other.url, "--engine", "e2", "--token", "rx_viewer_other", "--out", join(dir, "other.jsonl")])).code).toBe(0);
    expect(other.seen).toEqual([{ path: "/e/e2/trajectories/export?format=jsonl", authorization: "Bearer rx_viewer_other" }]);
  });

  it("refuses a bad filter before sending anything", async () => {
    const before = local.seen.length;
    const r = await runExport(["--out", join(dir, "bad.jsonl"), "--min-reward", "lots"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("--min-reward");
    const form = await runExport(["--out", join(dir, "bad.jsonl"), "--form", "diff"]);
    expect(form.code).toBe(1);
    expect(form.stderr).toContain("--form");
    expect(local.seen.length).toBe(before);
  });

  it("asks for the delta form with --form delta", async () => {
    expect((await runExport(["--out", join(dir, "delta.jsonl"), "--form", "delta"])).code).toBe(0);
    expect(local.seen.at(-1)?.path).toBe("/e/default/trajectories/export?format=jsonl&form=delta");
  });

  it("says in one line that it cannot write an --out it cannot create, naming it, and claims nothing exported", async () => {
    // A directory that does not exist ended the process on an unhandled 'error' event and a stack trace.
    const out = join(dir, "no-such-dir", "t.jsonl");
    const r = await runExport(["--out", out]);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 1, stderr: `export: cannot write ${out}: ENOENT: no such file or directory, open '${out}'\n` });
  });

  it("takes an engine's base URL as --url (npm start prints it) for its exchange and engine, its token too when in the path", async () => {
    // It sent to <origin>/e/default/e/default/trajectories/export.
    const before = other.seen.length;
    expect((await runExport(["--url", `${other.url}/e/e3/`, "--token", "rx_viewer_other", "--out", join(dir, "base.jsonl")])).code).toBe(0);
    expect((await runExport(["--url", `${other.url}/e/e3/t/rx_viewer_in_path`, "--out", join(dir, "base.jsonl")])).code).toBe(0);
    expect(other.seen.slice(before)).toEqual([
      { path: "/e/e3/trajectories/export?format=jsonl", authorization: "Bearer rx_viewer_other" },
      { path: "/e/e3/trajectories/export?format=jsonl", authorization: "Bearer rx_viewer_in_path" },
    ]);
    const mismatch = await runExport(["--url", `${other.url}/e/e3`, "--engine", "e4", "--token", "t", "--out", join(dir, "base.jsonl")]);
    expect(mismatch.code).toBe(1);
    expect(mismatch.stderr).toContain(`export: --url names engine 'e3' (${other.url}/e/e3), --engine 'e4'`);
    const garbled = await runExport(["--url", `${other.url}/e/%zz`, "--token", "t", "--out", join(dir, "base.jsonl")]);
    expect({ code: garbled.code, stderr: garbled.stderr }).toEqual({ code: 1, stderr: `export: --url ${other.url}/e/%zz: '%zz' is not percent-encoded text\n` });
    expect(other.seen.length).toBe(before + 2);
  });

  it("says which exchange it cannot reach, and why (a stopped npm start), not a bare 'fetch failed'", async () => {
    const gone = createServer();
    await new Promise<void>((r) => gone.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(gone.address() as AddressInfo).port}`;
    await new Promise((r) => gone.close(r));
    const stale = join(dir, "stale-credentials.json");
    writeFileSync(stale, JSON.stringify(makeCredentials(url, "default", "admin", { operator: "o", trainer: "t", client: "c", viewer: "v" })));
    const r = await runExport(["--credentials", stale, "--out", join(dir, "stale.jsonl")]);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 1, stderr: `export: cannot reach ${url}/e/default/trajectories/export: fetch failed (ECONNREFUSED) (is \`npm start\` running?)\n` });
  });

  it("names the --credentials file it was given when it cannot read it", async () => {
    const missing = join(dir, "no-such-credentials.json");
    const r = await runExport(["--credentials", missing, "--out", join(dir, "missing.jsonl")]);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 1, stderr: `export: cannot read the credentials in ${missing}: no such file, or not what \`npm start\` writes\n` });
  });
});
