/**
 * The agent as the package a GPU host installs (README and docs/agent.md, "On the GPU host").
 * `npm run agent:pack` builds and packs it; the tarball is installed globally into a temporary
 * prefix outside the repository by the README's command, with this machine's npm and with
 * npm 12 (which runs a dependency's install script only when allowed); the installed
 * `rollout-agent`, run by the machine's own Node rather than the project's pinned Node 22,
 * answers --help, accepts the config file docs/agent.md shows (--print-config) and serves a
 * session against a local exchange: heartbeats, an environment scan (its Python helper found
 * from the bundle) and one result delivered to a pyzmq runner.
 */
import { mkdirSync, readdirSync, readFileSync, realpathSync, statSync, writeFileSync } from "node:fs";
import { builtinModules } from "node:module";
import { basename, dirname, join, relative } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunsClient } from "../../src/client";
import { REPO_ROOT } from "../../scripts/local/exchange";
import { ENVS } from "./runs/support";
import { AgentProcess, suiteAgentEnv } from "./support/agent-process";
import { described, hostEnv, hostTool, run } from "./support/host-tools";
import { PYTHON, PyRunner } from "./support/py-runner";
import { exchangeSuite } from "./support/suite";
import { tempDir } from "./support/temp";
import { waitUntil } from "./support/wait";

/** The npm 12 that .ci/run also installs with. */
const NPM12_VERSION = "12.2.2";
/** The README's install command ("On the GPU host"), less its tarball. */
const README_INSTALL = ["install", "-g", "--allow-scripts=zeromq"];

/** The config file docs/agent.md shows a GPU host: the JSON block of its "On the GPU host" section. */
function documentedConfig(): Record<string, unknown> {
  const doc = readFileSync(join(REPO_ROOT, "docs", "agent.md"), "utf8");
  const section = doc.split(/^## /m).find((s) => s.startsWith("On the GPU host\n"));
  expect(section, "docs/agent.md has a section 'On the GPU host'").toBeDefined();
  const blocks = [...section!.matchAll(/^```json\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
  expect(blocks).toHaveLength(1);
  return JSON.parse(blocks[0]!) as Record<string, unknown>;
}

type PackageJson = { name: string; version: string; bin: Record<string, string>; engines: { node: string }; dependencies: Record<string, string> };
const readJson = (file: string): PackageJson => JSON.parse(readFileSync(file, "utf8")) as PackageJson;
const agentPkg = readJson(join(REPO_ROOT, "local-agent", "package.json"));
const rootPkg = readJson(join(REPO_ROOT, "package.json"));

const t = exchangeSuite();
// Outside the repository, so nothing installed there can resolve a module from the repository's node_modules.
const work = tempDir("rollout-agent-package-");
let tarball = "";
let hostNode = "";

beforeAll(async () => {
  expect(relative(REPO_ROOT, work.path).startsWith("..")).toBe(true);
  const dest = join(work.path, "pack");
  mkdirSync(dest);
  const pack = [hostTool("npm"), "run", "agent:pack", "--", "--pack-destination", dest];
  const ran = await run(pack, { cwd: REPO_ROOT });
  expect(ran.code, described(pack, ran)).toBe(0);
  expect(readdirSync(dest)).toEqual([`${agentPkg.name}-${agentPkg.version}.tgz`]);
  tarball = join(dest, `${agentPkg.name}-${agentPkg.version}.tgz`);

  hostNode = hostTool("node");
  const version = (await run([hostNode, "--version"], { cwd: work.path })).stdout.trim();
  // Usually Node 20 here; on a machine whose own Node is 22 or newer the test still runs, on that.
  process.stderr.write(`package.test: the installed agent runs on this machine's Node, ${hostNode} ${version} (the tests run on ${process.version})\n`);
}, 180_000);

afterAll(() => work.remove());

function filesUnder(dir: string, base = dir): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path, base) : [relative(base, path)];
  });
}

/**
 * The installed agent against the suite's engine: it starts and heartbeats, scans the fixture
 * environments with the package's python/scan_environments.py, carries one result from
 * end_episode to a pyzmq runner that registered through its facade, and stops on SIGTERM.
 */
async function session(bin: string, env: Record<string, string>): Promise<void> {
  const runsConfig = join(t.dir, "runs.json");
  // slow_import_env.py hangs at import: cut it off quickly.
  writeFileSync(runsConfig, JSON.stringify({ environmentDirs: [ENVS], python: PYTHON, importTimeoutSeconds: 2 }));
  const agent = new AgentProcess({ ...env, ...suiteAgentEnv(t), ROLLOUT_RUNS_CONFIG: runsConfig }, [], [bin]);
  t.defer(async () => {
    agent.kill("SIGTERM");
    await agent.waitForExit().catch(() => agent.kill("SIGKILL"));
  });
  const facade = (await agent.waitForLine(/trainer facade on (http:\/\/[^\s;]+)/, "the agent to start"))[1] as string;
  const pid = agent.child.pid as number;
  if (process.platform === "linux") expect(realpathSync(`/proc/${pid}/exe`)).toBe(realpathSync(hostNode));

  await waitUntil(async () => (await t.engine.viewer.overview()).agent.pid === pid, "the agent's heartbeat");
  expect((await t.engine.viewer.overview()).agent).toMatchObject({ connected: true, version: agentPkg.version });

  const viewer = new RunsClient({ baseUrl: t.engine.baseUrl, token: t.engine.tokens.viewer });
  const catalog = await waitUntil(async () => {
    const failed = agent.lines.find((l) => / error environment scan: /.test(l));
    if (failed !== undefined) throw new Error(failed);
    const c = await viewer.listEnvironments();
    return c.count > 0 ? c : null;
  }, "the agent's catalog of environments", 60_000);
  expect(catalog.environments.map((e) => e.name)).toContain("gsm8k");
  expect(catalog.problems.map((p) => p.file_path)).toEqual([join(ENVS, "broken_env.py")]);

  const rolling = await fetch(`${facade}/update_engine_status`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ engine_status: "ENGINE.ROLLING" }) });
  expect(await rolling.json()).toEqual({ success: true, failure_reason: "" });
  const runner = new PyRunner({ facade, ipcDir: t.dir, episodes: ["ep-pkg"] });
  t.defer(() => runner.kill());
  expect((await runner.waitFor("registered", "ep-pkg")).response).toEqual({ success: true, failure_reason: "" });
  await runner.waitFor("listening", "ep-pkg");
  expect(await t.engine.client.claimEpisode({ client_uuid: "c-pkg", episode_type: "train", discard_episode_timeout: 60 })).toMatchObject({ success: true, episode_uuid: "ep-pkg" });
  const output = { reward: 0.5, is_success: true, metadata: { task_id: "task-pkg" }, log_metrics: {} };
  expect(await t.engine.client.endEpisode({ client_uuid: "c-pkg", episode_uuid: "ep-pkg", workflow_output: output, task_id: "task-pkg" })).toEqual({ success: true });
  expect((await runner.waitFor("result", "ep-pkg")).payload).toMatchObject(output);
  await runner.waitFor("acked", "ep-pkg");
  await waitUntil(async () => (await t.engine.viewer.overview()).deliveries.delivered === 1, "the engine to record the delivery");

  agent.kill("SIGTERM");
  expect(await agent.waitForExit()).toEqual({ code: 0, signal: null });
}

/** Where `npm` is run from: this machine's (on its own Node), or npm 12 from the registry (it needs Node 22: the project's). */
const NPMS: Array<{ name: string; dir: string; argv: () => Promise<string[]> }> = [
  { name: "this machine's npm", dir: "npm-host", argv: async () => [hostTool("npm")] },
  {
    name: `npm ${NPM12_VERSION}`,
    dir: "npm12",
    argv: async () => {
      const fetchNpm = [hostTool("npm"), "install", "--prefix", join(work.path, "npm12-cli"), "--no-save", "--no-audit", "--no-fund", `npm@${NPM12_VERSION}`];
      const ran = await run(fetchNpm, { cwd: work.path, env: hostEnv() });
      expect(ran.code, described(fetchNpm, ran)).toBe(0);
      return [process.execPath, join(work.path, "npm12-cli", "node_modules", "npm", "bin", "npm-cli.js")];
    },
  },
];

describe("the rollout-agent package", () => {
  it("holds the bundle, the Python helpers and a package.json that needs Node 20 and only zeromq and undici", async () => {
    const dir = join(work.path, "unpacked");
    mkdirSync(dir);
    const untar = ["tar", "-xzf", tarball, "-C", dir];
    const ran = await run(untar, { cwd: work.path });
    expect(ran.code, described(untar, ran)).toBe(0);
    const helpers = readdirSync(join(REPO_ROOT, "local-agent", "python"))
      .filter((f) => f.endsWith(".py"))
      .map((f) => join("python", f));
    expect(filesUnder(join(dir, "package")).sort()).toEqual([join("dist", "cli.js"), "package.json", ...helpers].sort());

    const packed = readJson(join(dir, "package", "package.json"));
    expect(packed.bin).toEqual({ "rollout-agent": "dist/cli.js" });
    expect(packed.engines.node).toMatch(/^>=20\b/);
    // One pin per dependency: the package's are the repository's.
    expect(packed.dependencies).toEqual({ undici: rootPkg.dependencies["undici"], zeromq: rootPkg.dependencies["zeromq"] });

    // Everything else the agent imports (src/protocol, src/client, zod) is inside the bundle.
    const bundle = readFileSync(join(dir, "package", "dist", "cli.js"), "utf8");
    expect(bundle.startsWith("#!/usr/bin/env node\n")).toBe(true);
    const specifiers = [...bundle.matchAll(/^(?:import|export)\s[^"\n]*from\s*"([^"]+)";$|^import\s*"([^"]+)";$|\bimport\("([^"]+)"\)/gm)].map((m) => m[1] ?? m[2] ?? m[3]);
    const builtins = new Set(builtinModules.flatMap((m) => [m, `node:${m}`]));
    expect([...new Set(specifiers.filter((s) => s !== undefined && !builtins.has(s)))].sort()).toEqual(Object.keys(packed.dependencies).sort());
  });

  it("is what the README's install command names", () => {
    const readme = readFileSync(join(REPO_ROOT, "README.md"), "utf8");
    expect(readme).toContain(`\nnpm ${README_INSTALL.join(" ")} ./${basename(tarball)}\n`);
  });

  for (const npm of NPMS) {
    it(`installs globally with ${npm.name} by the README's command and runs on this machine's Node: --help, the documented config file, then a session`, { timeout: 300_000 }, async () => {
      const prefix = join(work.path, npm.dir);
      const install = [...(await npm.argv()), ...README_INSTALL, "--prefix", prefix, tarball];
      const ran = await run(install, { cwd: work.path, env: hostEnv() });
      expect(ran.code, described(install, ran)).toBe(0);
      // npm 11 warns of, and npm 12 skips, every install script not allowed: zeromq's must be.
      expect(`${ran.stdout}\n${ran.stderr}`.split("\n").filter((l) => /install-scripts|allow-scripts/.test(l))).toEqual([]);

      // A shell on the host: the package's bin first, the machine's Node for its `#!/usr/bin/env node`.
      const env = hostEnv([join(prefix, "bin"), dirname(hostNode)]);
      const bin = join(prefix, "bin", "rollout-agent");
      const help = await run([bin, "--help"], { cwd: work.path, env });
      expect(help.code, described([bin, "--help"], help)).toBe(0);
      expect(help.stdout).toMatch(new RegExp(`^rollout-agent ${agentPkg.version.replace(/\./g, "\\.")}: the Rollout Exchange agent for a GPU host\\.`));
      expect((await run([bin, "--version"], { cwd: work.path, env })).stdout).toBe(`${agentPkg.version}\n`);

      // The documented config file, as the documented unit passes it: accepted as written.
      const file = join(work.path, `${npm.dir}-agent.json`);
      const documented = documentedConfig();
      writeFileSync(file, JSON.stringify(documented));
      const fileOnly = Object.fromEntries(Object.entries(env).filter(([k]) => !k.startsWith("ROLLOUT_")));
      const printed = await run([bin, "--config", file, "--print-config"], { cwd: work.path, env: fileOnly });
      expect(printed.code, described([bin, "--config", file, "--print-config"], printed)).toBe(0);
      // The trainer command comes back split like a shell splits it; the documented one has no quotes.
      const { trainerCommand, ...rest } = documented;
      expect(JSON.parse(printed.stdout)).toMatchObject({ ...rest, token: "***", trainerCommand: String(trainerCommand).split(" ") });

      await session(bin, env);
    });
  }
});
