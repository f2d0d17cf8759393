/**
 * npm start over a state where a delete of `default` was cut off half-way (the engine's object
 * destroyed, its D1 row still there and marked deleting): it finishes the delete as it began
 * (keeping the history or not) and makes `default` anew. It took the engine for live, asked for
 * tokens, and failed with "404 unknown_engine", advising to delete all of .local.
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { afterEach, describe, expect, it } from "vitest";
import { copyRepo, nodeStart, removeDir, type Started } from "./support/npm-start";

const READY = "Press Ctrl-C to stop.";
const ADMIN = "deleting-default-admin";
const starts: Started[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const s of starts.splice(0)) s.kill();
  for (const d of dirs.splice(0)) removeDir(d);
});

function start(dir: string): Started {
  const s = nodeStart(dir, { PORT: "8933" });
  starts.push(s);
  return s;
}

/** The local D1's SQLite file under `dir`'s .local/state. */
function d1File(dir: string): string {
  const d = join(dir, ".local", "state", "d1", "miniflare-D1DatabaseObject");
  const f = readdirSync(d).find((n) => n.endsWith(".sqlite") && n !== "metadata.sqlite");
  if (!f) throw new Error(`no D1 file in ${d}`);
  return join(d, f);
}

describe("npm start over a state where the delete of `default` is unfinished", () => {
  it.each([
    ["keeping nothing", 0],
    ["keeping its history", 1],
  ])("finishes the delete (%s) and serves a new `default` with working tokens", async (_, keepsHistory) => {
    const dir = copyRepo("deleting-default");
    dirs.push(dir);
    writeFileSync(join(dir, ".dev.vars"), `ADMIN_TOKEN=${ADMIN}\nCLAIM_KEY_SECRET=deleting-default-claim\n`);

    // First start; the engine is deleted through the admin API (its object destroyed, its rows gone).
    const first = start(dir);
    expect(await first.waitFor(READY)).toBe(true);
    const del = await fetch("http://127.0.0.1:8933/admin/engines/default", { method: "DELETE", headers: { authorization: `Bearer ${ADMIN}` } });
    expect(del.status).toBe(200);
    first.signal("SIGINT");
    await first.exited();

    // As a delete cut off after its first step leaves it: the engine row, marked deleting.
    const db = new DatabaseSync(d1File(dir));
    const now = Date.now();
    db.prepare("INSERT INTO engines (name, created_at, deleting_since, deleting_keeps_history) VALUES ('default', ?, ?, ?)").run(now - 60_000, now - 30_000, keepsHistory);
    db.close();

    const second = start(dir);
    const up = await second.waitFor(READY);
    expect({ up, failure: second.failure() }).toEqual({ up: true, failure: "" });
    expect(second.output()).toMatch(/engine 'default' was being deleted \(since .*\); finishing the delete/);
    const creds = JSON.parse(readFileSync(join(dir, ".local", "credentials.json"), "utf8")) as { base_url: string; tokens: Record<string, string> };
    const status = await fetch(`${creds.base_url}/get_engine_status`, { headers: { authorization: `Bearer ${creds.tokens["viewer"]}` } });
    expect(status.status).toBe(200);
  }, 300_000);
});
