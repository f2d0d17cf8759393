/**
 * `npm start` (scripts/start.ts) as a newcomer meets it: started for real, in a copy of the
 * repository, and stopped as people stop it. Each test has ports of its own (8911-8920, outside
 * the range the system hands out for port 0) and its copy's own .dev.vars and .local/.
 */
import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { unstable_getVarsForDev } from "wrangler";
import { afterEach, describe, expect, it } from "vitest";
import { LOCAL_D1_ID, readWorkerSetup } from "../scripts/local/worker-config";
import { alive, copyRepo, descendants, nodeStart, npmStart, removeDir, type Started } from "./support/npm-start";

const READY = "Press Ctrl-C to stop.";

/** What each test started or made, ended and removed after it whatever happened. */
const starts: Started[] = [];
const dirs: string[] = [];
const servers: Server[] = [];
afterEach(async () => {
  for (const s of starts.splice(0)) s.kill();
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
  for (const d of dirs.splice(0)) removeDir(d);
});

/** A copy of the repository whose .dev.vars holds `devVars`. */
function repo(prefix: string, devVars: string): string {
  const dir = copyRepo(prefix);
  dirs.push(dir);
  writeFileSync(join(dir, ".dev.vars"), devVars);
  return dir;
}

function start(s: Started): Started {
  starts.push(s);
  return s;
}

/** Stops a start as Ctrl-C does and waits for its exit. */
async function stop(s: Started): Promise<void> {
  s.signal("SIGINT");
  await s.exited();
}

type Creds = { url: string; base_url: string; tokens: Record<string, string> };
const readCreds = (dir: string) => JSON.parse(readFileSync(join(dir, ".local", "credentials.json"), "utf8")) as Creds;
const mode = (path: string) => statSync(path).mode & 0o777;
const lockPath = (dir: string) => join(dir, ".local", "state.lock");

/** What wrangler itself reads from the .dev.vars beside `dir`'s wrangler.toml. */
function wranglerReads(dir: string): Record<string, string | undefined> {
  const vars = unstable_getVarsForDev(join(dir, "wrangler.toml"), undefined, {}, undefined, true);
  return Object.fromEntries(Object.entries(vars).map(([k, b]) => [k, b.type === "secret_text" ? b.value : undefined]));
}

describe(".dev.vars", () => {
  it("is read as wrangler reads it (`ADMIN_TOKEN=value # note`), and a secret written into it leaves it owner-only", async () => {
    const dir = repo("devvars", "# local secrets\nADMIN_TOKEN=local-admin-secret # the admin's token\n");
    chmodSync(join(dir, ".dev.vars"), 0o644);
    mkdirSync(join(dir, ".local"));
    writeFileSync(join(dir, ".local", "credentials.json"), "{}\n");
    chmodSync(join(dir, ".local", "credentials.json"), 0o644);
    expect(wranglerReads(dir)["ADMIN_TOKEN"]).toBe("local-admin-secret");

    const s = start(nodeStart(dir, { PORT: "8911" }));
    const up = await s.waitFor(READY);
    expect(s.failure()).toBe("");
    expect(up).toBe(true);
    const res = await fetch("http://127.0.0.1:8911/admin/engines", { headers: { authorization: "Bearer local-admin-secret" } });
    expect(res.status).toBe(200);
    // CLAIM_KEY_SECRET was missing: made and appended, and the file, then the credentials, made 0600.
    expect(wranglerReads(dir)).toEqual({ ADMIN_TOKEN: "local-admin-secret", CLAIM_KEY_SECRET: expect.stringMatching(/^[\w-]{43}$/) });
    expect({ devVars: mode(join(dir, ".dev.vars")), credentials: mode(join(dir, ".local", "credentials.json")) }).toEqual({ devVars: 0o600, credentials: 0o600 });
    await stop(s);
  }, 200_000);

  it("refuses a secret with whitespace in it, naming the variable and not the value", async () => {
    const dir = repo("devvars-space", "ADMIN_TOKEN=two words\nCLAIM_KEY_SECRET=local-claim-secret\n");
    const s = start(nodeStart(dir, { PORT: "8911" }));
    expect(await s.exited()).toBe(1);
    expect(s.failure()).toMatch(/ADMIN_TOKEN in .*\.dev\.vars has whitespace/);
    expect(s.output()).not.toContain("two words");
    expect(existsSync(lockPath(dir))).toBe(false);
  }, 60_000);
});

describe("one npm start per .local/state", () => {
  const ADMIN = "two-starts-admin";
  const admin = { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" };
  async function issue(port: number): Promise<{ id: string; token: string }> {
    const res = await fetch(`http://127.0.0.1:${port}/admin/engines/default/tokens`, { method: "POST", headers: admin, body: JSON.stringify({ role: "viewer" }) });
    expect(res.status).toBe(201);
    return (await res.json()) as { id: string; token: string };
  }
  const status = async (port: number, token: string) => (await fetch(`http://127.0.0.1:${port}/e/default/get_engine_status`, { headers: { authorization: `Bearer ${token}` } })).status;

  it("refuses a second start naming the first's pid; a start after the first is SIGKILLed takes over its lock and agrees with it", async () => {
    const dir = repo("two-starts", `ADMIN_TOKEN=${ADMIN}\nCLAIM_KEY_SECRET=two-starts-claim\n`);
    const a = start(nodeStart(dir, { PORT: "8912" }));
    expect(await a.waitFor(READY)).toBe(true);
    expect(readFileSync(lockPath(dir), "utf8").trim()).toBe(String(a.child.pid));

    const b = start(nodeStart(dir, { PORT: "8913" }));
    expect(await b.exited()).toBe(1);
    expect(b.failure()).toContain(`in use by another npm start (pid ${a.child.pid})`);
    expect(readCreds(dir).url).toBe("http://127.0.0.1:8912");
    expect(readFileSync(lockPath(dir), "utf8").trim()).toBe(String(a.child.pid));

    const early = await issue(8912);
    expect((await fetch(`http://127.0.0.1:8912/admin/engines/default/tokens/${early.id}`, { method: "DELETE", headers: admin })).status).toBe(200);
    const late = await issue(8912);

    // No exit hook runs on SIGKILL: the lock stays behind, naming a process that is gone.
    a.kill();
    await a.exited();
    const c = start(nodeStart(dir, { PORT: "8914" }));
    expect(await c.waitFor(READY)).toBe(true);
    expect(c.output()).toContain(`took over ${lockPath(dir)}: its npm start (pid ${a.child.pid}) is gone`);
    expect({ revoked: await status(8914, early.token), issued: await status(8914, late.token) }).toEqual({ revoked: 401, issued: 200 });
    await stop(c);
    expect(existsSync(lockPath(dir))).toBe(false);
    expect(existsSync(`${lockPath(dir)}.owner`)).toBe(false);
  }, 300_000);

  // The laptop or dev container rebooted while `npm start` ran; the next day's start was refused
  // ("in use by another npm start (pid N)") although none ran: pid N was now an unrelated
  // process's (a container's pids come out the same every boot).
  it("takes over a lock whose pid is now another process's, whether the lock names its start time or is an older start's pid alone", async () => {
    const dir = repo("lock-reused-pid", `ADMIN_TOKEN=${ADMIN}\nCLAIM_KEY_SECRET=lock-reused-claim\n`);
    const unrelated = spawn("sleep", ["600"], { stdio: "ignore" });
    try {
      const boot = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
      mkdirSync(join(dir, ".local"), { recursive: true });
      // This start's lock names the process's start time beside it; an older start's, the pid alone.
      for (const lock of [`${unrelated.pid} ${boot} 1\n`, null]) {
        writeFileSync(lockPath(dir), `${unrelated.pid}\n`);
        if (lock === null) rmSync(`${lockPath(dir)}.owner`, { force: true });
        else writeFileSync(`${lockPath(dir)}.owner`, lock);
        const s = start(nodeStart(dir, { PORT: "8919" }));
        expect({ up: await s.waitFor(READY), failure: s.failure() }, String(lock)).toEqual({ up: true, failure: "" });
        expect(s.output()).toContain(`its npm start (pid ${unrelated.pid}) is gone`);
        // Still the pid alone in the lock, which is what an older checkout's start reads (a bisect over the same state).
        expect(readFileSync(lockPath(dir), "utf8")).toMatch(/^\d+\n$/);
        await stop(s);
      }
    } finally {
      unrelated.kill("SIGKILL");
    }
  }, 300_000);
});

describe("what a killed start leaves", () => {
  // Each start that ended by SIGKILL (the OOM killer, kill -9, a closed container) left a
  // rollout-exchange-build-* directory, a copy of the bundled Worker, in $TMPDIR for good.
  it("a start removes the build directory a SIGKILLed earlier start left in TMPDIR", async () => {
    const dir = repo("build-left", "ADMIN_TOKEN=build-left-admin\nCLAIM_KEY_SECRET=build-left-claim\n");
    const builds = () => readdirSync(join(dir, "tmp")).filter((f) => f.startsWith("rollout-exchange-build-"));
    const first = start(nodeStart(dir, { PORT: "8920" }));
    expect(await first.waitFor(READY)).toBe(true);
    first.kill();
    await first.exited();
    expect(builds()).toHaveLength(1);
    const second = start(nodeStart(dir, { PORT: "8920" }));
    expect(await second.waitFor(READY)).toBe(true);
    expect(builds()).toHaveLength(1);
    await stop(second);
    expect(builds()).toEqual([]);
  }, 300_000);
});

describe("a start SIGKILLed by its pid alone", () => {
  // `kill -9 <pid>` of the pid the lock and "in use by another npm start (pid N)" name, or the OOM
  // killer picking the node process: its workerd ran on, orphaned, serving the locked state, and
  // the next start took the lock over and (on another port) ran a second workerd over the same files.
  const orphans: number[] = [];
  afterEach(() => {
    for (const pid of orphans.splice(0)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Gone, as it should be.
      }
    }
  });

  it("takes its workerd with it: nothing serves the state it had locked", async () => {
    const dir = repo("sigkill-pid", "ADMIN_TOKEN=sigkill-pid-admin\nCLAIM_KEY_SECRET=sigkill-pid-claim\n");
    const a = start(nodeStart(dir, { PORT: "8931" }));
    expect(await a.waitFor(READY)).toBe(true);
    const workerd = descendants(a.child.pid!).filter((p) => p.comm === "workerd");
    expect(workerd).toHaveLength(1);
    orphans.push(workerd[0]!.pid);

    process.kill(a.child.pid!, "SIGKILL");
    await a.exited();
    const answers = () => fetch("http://127.0.0.1:8931/openapi.json").then((r) => r.status, () => "refused" as const);
    const t0 = Date.now();
    while (Date.now() - t0 < 5_000 && (alive(workerd[0]!.pid) || (await answers()) !== "refused")) await new Promise((r) => setTimeout(r, 100));
    expect({ workerdAlive: alive(workerd[0]!.pid), port: await answers() }).toEqual({ workerdAlive: false, port: "refused" });
  }, 200_000);
});

describe("stopping", () => {
  it("SIGTERM to `npm start` stops the exchange: no node or workerd left, the port closed", async () => {
    const dir = repo("npm-sigterm", "ADMIN_TOKEN=npm-sigterm-admin\nCLAIM_KEY_SECRET=npm-sigterm-claim\n");
    const npm = start(npmStart(dir, { PORT: "8915" }));
    expect(await npm.waitFor(READY)).toBe(true);
    const under = descendants(npm.child.pid!);
    expect(under.map((p) => p.comm)).toEqual(expect.arrayContaining(["node", "workerd"]));

    npm.signal("SIGTERM");
    const answers = () => fetch("http://127.0.0.1:8915/openapi.json").then((r) => r.status, () => "refused" as const);
    const state = async () => ({ npmExited: npm.child.exitCode !== null || npm.child.signalCode !== null, left: under.filter((p) => alive(p.pid)).map((p) => p.comm), port: await answers() });
    const stopped = { npmExited: true, left: [], port: "refused" };
    const t0 = Date.now();
    while (Date.now() - t0 < 20_000 && !(JSON.stringify(await state()) === JSON.stringify(stopped))) await new Promise((r) => setTimeout(r, 250));
    expect(await state()).toEqual(stopped);
    expect(npm.output()).toContain("[start] SIGTERM: stopped");
  }, 200_000);
});

describe("ports", () => {
  it("a taken PORT is reported with the way npm start takes another, and that way works", async () => {
    const dir = repo("port-taken", "ADMIN_TOKEN=port-taken-admin\nCLAIM_KEY_SECRET=port-taken-claim\n");
    const blocker = createServer();
    servers.push(blocker);
    await new Promise<void>((r) => blocker.listen(8916, "127.0.0.1", r));

    const first = start(nodeStart(dir, { PORT: "8916" }));
    expect(await first.exited()).toBe(1);
    expect(first.failure()).toContain("port 8916 on 127.0.0.1 is taken (Address already in use): set PORT to another, e.g. PORT=8917 npm start");
    expect(first.failure()).not.toContain("--port");

    // Do what the message says.
    const advised = /PORT=(\d+) npm start/.exec(first.failure())![1]!;
    const second = start(nodeStart(dir, { PORT: advised }));
    expect(await second.waitFor(READY)).toBe(true);
    expect(readCreds(dir).url).toBe("http://127.0.0.1:8917");
    await stop(second);
  }, 300_000);

  it("refuses a PORT that is empty, not a number or out of range, and arguments such as --port, instead of serving elsewhere", async () => {
    const dir = repo("port-bad", "ADMIN_TOKEN=port-bad-admin\nCLAIM_KEY_SECRET=port-bad-claim\n");
    const runs = [
      { env: { PORT: "" }, args: [], says: "PORT must be a port number from 1 to 65535, got ''" },
      { env: { PORT: "abc" }, args: [], says: "got 'abc'" },
      { env: { PORT: "0" }, args: [], says: "got '0'" },
      { env: { PORT: "65536" }, args: [], says: "got '65536'" },
      { env: { PORT: "8918" }, args: ["--port", "8919"], says: "npm start takes no arguments (got '--port 8919'); the port is set with PORT" },
    ];
    // All at once: each is refused before it takes the state's lock.
    const ended = await Promise.all(runs.map(async (run) => {
      const s = start(nodeStart(dir, run.env, run.args));
      return { code: await s.exited(), failure: s.failure() };
    }));
    expect(ended).toEqual(runs.map((run) => ({ code: 1, failure: expect.stringContaining(run.says) })));
    expect(existsSync(join(dir, ".local", "state"))).toBe(false);
  }, 120_000);
});

describe("the local D1", () => {
  it("is kept under preview_database_id or the fixed id .local/state was always made under, never database_id", () => {
    const dir = copyRepo("d1-id");
    dirs.push(dir);
    const toml = join(dir, "wrangler.toml");
    const original = readFileSync(toml, "utf8");
    const d1 = () => readWorkerSetup(toml).config.env?.["DB"];
    expect(LOCAL_D1_ID).toBe("00000000-0000-0000-0000-000000000000");
    expect(d1()).toEqual({ type: "d1", id: LOCAL_D1_ID });
    writeFileSync(toml, original.replace(/^database_id = ".*"$/m, 'database_id = "5f0c3b9e-1d2a-4c6b-9e8f-0a1b2c3d4e5f"'));
    expect(d1()).toEqual({ type: "d1", id: LOCAL_D1_ID });
    writeFileSync(toml, original.replace(/^database_id = .*$/m, '$&\npreview_database_id = "preview-db"'));
    expect(d1()).toEqual({ type: "d1", id: "preview-db" });
  });

  it("keeps the engine and its tokens after wrangler.toml gets the real database_id (docs/deploy.md)", async () => {
    const dir = repo("database-id", "ADMIN_TOKEN=database-id-admin\nCLAIM_KEY_SECRET=database-id-claim\n");
    const first = start(nodeStart(dir, { PORT: "8918" }));
    expect(await first.waitFor(READY)).toBe(true);
    const before = readCreds(dir);
    const viewerStatus = async () => (await fetch(`${before.base_url}/get_engine_status`, { headers: { authorization: `Bearer ${before.tokens["viewer"]}` } })).status;
    expect(await viewerStatus()).toBe(200);
    await stop(first);
    expect(existsSync(lockPath(dir))).toBe(false);

    // deploy.md: "put the database_id it prints into wrangler.toml"
    const toml = join(dir, "wrangler.toml");
    writeFileSync(toml, readFileSync(toml, "utf8").replace(/^database_id = ".*"$/m, 'database_id = "5f0c3b9e-1d2a-4c6b-9e8f-0a1b2c3d4e5f"'));
    expect(readFileSync(toml, "utf8")).toContain('database_id = "5f0c3b9e-1d2a-4c6b-9e8f-0a1b2c3d4e5f"');

    const second = start(nodeStart(dir, { PORT: "8918" }));
    expect(await second.waitFor(READY)).toBe(true);
    const log = second.output();
    expect({
      migrationsReapplied: log.includes("applied 0000_init.sql"),
      engineCreatedAgain: log.includes("creating engine 'default'"),
      savedViewerToken: await viewerStatus(),
    }).toEqual({ migrationsReapplied: false, engineCreatedAgain: false, savedViewerToken: 200 });
    await stop(second);
  }, 300_000);
});
