/**
 * A request whose target is no URL (`GET //[ HTTP/1.1`, which Node's HTTP parser accepts) made
 * the facade's `new URL(...)` throw inside an async handler nobody caught: an unhandled rejection,
 * which ends a Node process, and with it the agent's trainer watch, deliveries, heartbeat and
 * gateway. Any process of the agent's user could do it (every process, with --facade-any-peer).
 * The facade now answers it 400 and catches whatever else a request throws. The facade runs here
 * in a process of its own, with Node's default for unhandled rejections, as the agent runs it.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

const REPO = resolve(__dirname, "..", "..");
const children: ChildProcess[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A facade in a process of its own (as the agent runs it), with the agent's default unhandled-rejection behaviour. */
async function facadeProcess(): Promise<{ child: ChildProcess; port: number; exited: Promise<number | null> }> {
  const dir = mkdtempSync(join(tmpdir(), "facade-bad-target-"));
  dirs.push(dir);
  const script = join(dir, "facade.mts");
  writeFileSync(
    script,
    `import { Facade } from ${JSON.stringify(join(REPO, "local-agent/src/facade.ts"))};
import { EngineLink } from ${JSON.stringify(join(REPO, "local-agent/src/engine-link.ts"))};
const quiet = { info() {}, warn() {}, error() {} };
const f = new Facade({ link: new EngineLink("http://127.0.0.1:9", "e", "t", 1000), host: "127.0.0.1", port: 0, coalesceMs: 10, logger: quiet, peerUid: null });
console.log("URL " + (await f.listen()));
`,
  );
  const child = spawn(process.execPath, ["--import", "tsx", script], { cwd: REPO, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const port = await new Promise<number>((res, rej) => {
    let out = "";
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /URL http:\/\/127\.0\.0\.1:(\d+)/.exec(out);
      if (m) res(Number(m[1]));
    });
    child.once("exit", () => rej(new Error("the facade process exited before listening")));
  });
  return { child, port, exited };
}

/** The status line of the answer to `raw` (a whole request), or null when none comes within `ms`. */
function statusLine(port: number, raw: string, ms = 3000): Promise<string | null> {
  return new Promise((res) => {
    const s = connect(port, "127.0.0.1", () => s.write(raw));
    let data = "";
    const done = (v: string | null): void => {
      clearTimeout(t);
      s.destroy();
      res(v);
    };
    const t = setTimeout(() => done(null), ms);
    s.on("data", (d: Buffer) => {
      data += d.toString("latin1");
      if (data.includes("\r\n")) done(data.split("\r\n")[0]!);
    });
    s.on("error", () => done(null));
    s.on("close", () => done(data === "" ? null : data.split("\r\n")[0]!));
  });
}

describe("the facade and a request target that is no URL", () => {
  it("answers GET //[ with a 400 and keeps serving, instead of ending the agent's process", async () => {
    const { child, port, exited } = await facadeProcess();
    const answer = await statusLine(port, "GET //[ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    // Give a crash the moment it needs.
    const code = await Promise.race([exited, new Promise<"alive">((r) => setTimeout(() => r("alive"), 1000))]);
    expect({ answer, process: code }).toEqual({ answer: expect.stringMatching(/^HTTP\/1\.1 400 /), process: "alive" });
    expect(child.exitCode).toBeNull();
    // And it still serves a well-formed request afterwards.
    expect(await statusLine(port, "GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")).toMatch(/^HTTP\/1\.1 404 /);
  });
});
