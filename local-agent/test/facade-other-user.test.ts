/**
 * The trainer facade's peer check against a real process of another user (uid 65534, nobody),
 * started by the test as root (CI runs as root; elsewhere facade.test.ts's injected lookup covers
 * the refusal), over IPv4, IPv6 and a dual-stack listener.
 */
import { execFile } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import { EngineLink } from "../src/engine-link";
import { Facade } from "../src/facade";
import { procNetAvailable } from "../src/peer-uid";
import { MemoryLogger } from "./support/logger";

const facades: Facade[] = [];
afterEach(async () => {
  for (const f of facades.splice(0)) await f.close();
});

/** GET url's status from a process running as `uid` (0 when it could not connect). */
function statusAs(uid: number, url: string): Promise<number> {
  const script = `fetch(${JSON.stringify(url)}).then(r=>{console.log(r.status)},()=>console.log(0))`;
  return new Promise((resolve) => execFile(process.execPath, ["-e", script], { uid, gid: uid, encoding: "utf8", timeout: 10_000 }, (_e, out) => resolve(Number(String(out).trim()))));
}

describe.runIf(procNetAvailable() && process.getuid?.() === 0)("the trainer facade and a real process of another user", () => {
  it.each([
    ["127.0.0.1", "127.0.0.1"],
    ["::1", "[::1]"],
    ["::", "127.0.0.1"],
  ])("listening on %s, reached at %s: refuses uid 65534, serves its own", async (host, reach) => {
    const logger = new MemoryLogger();
    const f = new Facade({ link: new EngineLink("http://127.0.0.1:9", "eng", "tok", 1000), host, port: 0, coalesceMs: 10, logger });
    let url: string;
    try {
      url = await f.listen();
    } catch (e) {
      // A host without IPv6 cannot listen on ::1 or ::: those cases are not this host's to show.
      if (host.includes(":") && (e as NodeJS.ErrnoException).code === "EADDRNOTAVAIL") return;
      throw e;
    }
    facades.push(f);
    const port = new URL(url).port;
    const target = `http://${reach}:${port}/_agent/status`;
    expect(await statusAs(65534, target)).toBe(403);
    expect(await statusAs(0, target)).toBe(200);
  }, 30_000);
});
