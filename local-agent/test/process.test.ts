/**
 * The agent as a real process (the CLI), killed and restarted: SIGKILL in the middle of
 * deliveries, SIGKILL between journaling an outcome and its ack, SIGKILL with a trainer running,
 * SIGTERM, start-up failures, and what it leaves open to other users of a shared host.
 */
import { chmodSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { AgentProcess, suiteAgentEnv } from "./support/agent-process";
import { journaledOutcomes } from "./support/journal";
import { FaultyProxy } from "./support/proxy";
import { PyRunner } from "./support/py-runner";
import { repPeer, type RepPeer } from "./support/rep-peer";
import { exchangeSuite } from "./support/suite";
import { processAlive, waitUntil } from "./support/wait";

const LEASE_SECONDS = 2;
const FIXTURES = join(import.meta.dirname, "fixtures");

const t = exchangeSuite({ commandLeaseSeconds: LEASE_SECONDS });

function env(over: Record<string, string> = {}): Record<string, string> {
  return {
    ...suiteAgentEnv(t),
    ROLLOUT_RETRY_MAX_SECONDS: "0.5",
    ROLLOUT_STOP_GRACE_SECONDS: "3",
    ...over,
  };
}

function agent(e: Record<string, string>, args: string[] = []): AgentProcess {
  const a = new AgentProcess(e, args);
  t.defer(async () => {
    a.kill("SIGTERM");
    await a.waitForExit().catch(() => a.kill("SIGKILL"));
  });
  return a;
}

const started = (a: AgentProcess) => a.waitForLine(/trainer facade on (http:\/\/\S+)/, "the agent to start");

describe("the agent process", () => {
  it("is SIGKILLed in the middle of deliveries and restarted: every result end_episode accepted reaches its runner", async () => {
    await t.engine.trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
    const ids = Array.from({ length: 8 }, (_, i) => `kill-${i}`);
    // Runners take a second to ack: the agent dies with deliveries in flight.
    const runner = new PyRunner({ ipcDir: t.dir, episodes: ids, register: false, ackDelay: 1 });
    t.defer(() => runner.kill());
    for (const id of ids) {
      await runner.waitFor("listening", id);
      await t.engine.trainer.registerEpisode({ episode_uuid: id, zmq_listen_result_addr: runner.addr(id) });
    }
    const settings = env({ ROLLOUT_DELIVERY_CONCURRENCY: "2", ROLLOUT_DELIVERY_TIMEOUT_SECONDS: "3", ROLLOUT_DELIVERY_ATTEMPTS: "1" });
    const first = agent(settings);
    await started(first);

    for (const id of ids) {
      await t.engine.client.claimEpisode({ client_uuid: `c-${id}`, episode_type: "train", discard_episode_timeout: 600 });
      expect(await t.engine.client.endEpisode({ client_uuid: `c-${id}`, episode_uuid: id, workflow_output: { reward: 0.5, metadata: { task_id: id } }, task_id: id })).toEqual({
        success: true,
      });
    }
    await runner.waitFor("result");
    first.kill("SIGKILL");
    expect((await first.waitForExit()).signal).toBe("SIGKILL");
    const inFlight = runner.of("result").length;
    expect(inFlight).toBeGreaterThan(0);
    expect(runner.of("acked").length).toBeLessThan(ids.length);

    const second = agent(settings);
    await started(second);
    await waitUntil(async () => (await t.engine.viewer.overview()).pending_commands === 0, "every delivery command to be acked", 60_000);

    for (const id of ids) expect(runner.of("result", id)).toHaveLength(1); // each result reached its runner, once
    const d = (await t.engine.viewer.overview()).deliveries;
    expect(d.pending).toBe(0);
    expect(d.delivered + d.undeliverable).toBe(ids.length);
    // Only results the dead agent had already handed over can be reported undeliverable:
    // their runners took them and stopped listening, so the redelivery finds nobody.
    expect(d.undeliverable).toBeLessThanOrEqual(inFlight);
    expect(d.delivered).toBeGreaterThanOrEqual(ids.length - inFlight);
  });

  it("is SIGKILLed after journaling a delivery whose ack never arrived: restarted, it acks before polling and the runner gets the result once", async () => {
    await t.engine.trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
    const proxy = new FaultyProxy(t.ex.url);
    await proxy.listen();
    t.defer(() => proxy.close());
    const settings = env({ ROLLOUT_SERVER: proxy.url });
    // Runners that keep listening: a second delivery of a result would be received, and counted.
    const peers: Record<string, RepPeer> = {};
    const endOne = async (id: string) => {
      const peer = (peers[id] = await repPeer());
      t.defer(() => peer.close());
      await t.engine.trainer.registerEpisode({ episode_uuid: id, zmq_listen_result_addr: peer.addr });
      await t.engine.client.claimEpisode({ client_uuid: `c-${id}`, episode_type: "train", discard_episode_timeout: 600 });
      await t.engine.client.endEpisode({ client_uuid: `c-${id}`, episode_uuid: id, workflow_output: { reward: 1, metadata: { task_id: id } }, task_id: id });
    };

    proxy.fault = (p) => (p.endsWith("/agent/ack") ? "refuse" : "pass");
    const first = agent(settings);
    await started(first);
    await endOne("journaled");
    await waitUntil(() => peers["journaled"]!.received.length === 1, "the result to reach its runner");
    await waitUntil(() => journaledOutcomes(join(t.dir, "state")) === 1, "the outcome in the journal");
    first.kill("SIGKILL");
    await first.waitForExit();

    // The race a restarted agent can lose: its replayed ack is slow to get through, and a poll
    // answer reaches it only after that ack's answer. A poll sent alongside the ack is handed
    // the command again (the dead agent's lease is released to the new session at once).
    proxy.fault = () => "pass";
    proxy.hold = async (path, phase) => {
      if (path.endsWith("/agent/ack") && phase === "request") await new Promise((r) => setTimeout(r, 500));
      if (path.endsWith("/agent/commands") && phase === "answer") await waitUntil(() => proxy.answered("/agent/ack") >= 1, "the replayed ack's answer");
    };
    const second = agent(settings);
    await started(second);
    await second.waitForLine(/re-sending 1 ack of commands finished before the restart/, "the replayed ack");
    await waitUntil(async () => (await t.engine.viewer.overview()).deliveries.delivered === 1, "the replayed ack to land");
    // A result ended now is handed out by a later poll than any that could carry the first again.
    await endOne("after-restart");
    await waitUntil(() => peers["after-restart"]!.received.length === 1, "the next result to reach its runner");
    await waitUntil(async () => (await t.engine.viewer.overview()).deliveries.delivered === 2, "the next result's ack");

    expect(peers["journaled"]!.received).toHaveLength(1);
    expect(second.lines.filter((l) => /handed out again|handed out \d+ times|had already been acked/.test(l))).toEqual([]);
  });

  it("leaves a running trainer behind when SIGKILLed; the next agent adopts it and can stop it", async () => {
    const settings = env({ ROLLOUT_TRAINER_COMMAND: `sh ${join(FIXTURES, "trainer-graceful.sh")} {config}` });
    const first = agent(settings);
    await started(first);
    await t.engine.operator.syncTrainConfig("x: 1\n");
    await t.engine.operator.startEngine();
    await first.waitForLine(/trainer started \(pid (\d+)\)/, "the trainer to start");
    const pid = Number((await first.waitForLine(/trainer started \(pid (\d+)\)/, "the trainer pid"))[1]);
    first.kill("SIGKILL");
    await first.waitForExit();
    expect(processAlive(pid)).toBe(true); // the trainer is in its own group and writes to a file, not a pipe

    const second = agent(settings);
    await second.waitForLine(new RegExp(`adopting trainer pid ${pid}`), "the adoption");
    await waitUntil(async () => {
      const a = (await t.engine.viewer.overview()).agent;
      return a.pid === second.child.pid && a.trainer_state === "running" && a.trainer_pid === pid;
    }, "the heartbeat to show the adopted trainer");

    await t.engine.operator.stopEngine();
    await second.waitForLine(new RegExp(`trainer pid ${pid} stopped`), "the adopted trainer to stop");
    expect(processAlive(pid)).toBe(false);
    expect(readFileSync(join(t.dir, "logs", "trainer.log"), "utf8")).toContain("got SIGTERM, exiting");
  });

  it("stops its trainer on SIGTERM and tells the engine, then exits 0", async () => {
    // A graceful trainer, given room: on a loaded machine its process group took over 3 s to go,
    // and the SIGKILL after the suite's usual grace made this a test of the machine's speed.
    const a = agent(env({ ROLLOUT_TRAINER_COMMAND: `sh ${join(FIXTURES, "trainer-graceful.sh")} {config}`, ROLLOUT_STOP_GRACE_SECONDS: "15" }));
    await started(a);
    await t.engine.operator.syncTrainConfig("x: 1\n");
    await t.engine.operator.startEngine();
    const pid = Number((await a.waitForLine(/trainer started \(pid (\d+)\)/, "the trainer to start"))[1]);
    // The trainer is up (its trap set) once it has printed its first line.
    await waitUntil(async () => readFileSync(join(t.dir, "logs", "trainer.log"), "utf8").includes("trainer up:"), "the trainer to print that it is up");
    a.kill("SIGTERM");
    expect(await a.waitForExit()).toEqual({ code: 0, signal: null });
    expect(processAlive(pid)).toBe(false);
    const s = await t.engine.viewer.getEngineStatus();
    expect(s.engine_status).toBe("ENGINE.OFFLINE");
    expect(s.engine_status_detail).toMatch(/\[rollout-agent\] the agent was shut down: trainer pid \d+ stopped: exited with code 0 after SIGTERM$/);
  });

  it("on a shared host: makes its existing state and log dirs owner-only, saying so once, and does not pass its token to the trainer", async () => {
    const dirs = [join(t.dir, "state"), join(t.dir, "logs")];
    for (const d of dirs) {
      mkdirSync(d, { recursive: true });
      chmodSync(d, 0o755);
    }
    // The documented way to run it: ROLLOUT_TRAINER_TOKEN=<trainer token> rollout-agent ...; the quotes keep the marker out of the logged command.
    const a = agent(env({ ROLLOUT_TRAINER_COMMAND: `sh -c 'env; echo trainer-env-"done"; exec sleep 30' x {config}` }));
    await started(a);
    await t.engine.operator.syncTrainConfig("x: 1\n");
    await t.engine.operator.startEngine();
    await a.waitForLine(/trainer started \(pid \d+\)/, "the trainer to start");
    const log = join(t.dir, "logs", "trainer.log");
    await waitUntil(() => readFileSync(log, "utf8").includes("trainer-env-done"), "the trainer to print its environment");
    expect(readFileSync(log, "utf8")).toContain("ROLLOUT_FACADE_URL=");
    expect(readFileSync(log, "utf8")).not.toContain(t.engine.tokens.trainer);
    const mode = (p: string): string => (statSync(p).mode & 0o777).toString(8);
    expect([...dirs, log, join(t.dir, "state", "train-config.yaml")].map(mode)).toEqual(["700", "700", "600", "600"]);
    for (const d of dirs) expect(a.lines.filter((l) => l.includes(`made ${d} owner-only (mode 0755 -> 0700)`))).toHaveLength(1);
  });

  it("exits 2 with every problem listed for a bad config (a non-URL server too), and 1 when its facade port is taken", async () => {
    const bad = agent({ ROLLOUT_SERVER: "", ROLLOUT_ENGINE: "", ROLLOUT_TRAINER_TOKEN: "" }, ["--engine", "Nope!", "--facade-port", "x"]);
    expect((await bad.waitForExit()).code).toBe(2);
    expect(bad.lines).toEqual(
      expect.arrayContaining([
        "rollout-agent: the configuration has 4 problems:",
        expect.stringMatching(/^ {2}- server is not set/),
        expect.stringMatching(/^ {2}- engine from --engine: /),
        "Run with --help to see every setting.",
      ]),
    );

    // A config file whose URL is no URL: a message and exit 2 (systemd's "don't restart"), not a crash.
    const file = join(t.dir, "not-a-url.json");
    writeFileSync(file, JSON.stringify({ server: "x", engine: "demo", token: "rx_trainer_x" }));
    const notUrl = agent({ ROLLOUT_SERVER: "", ROLLOUT_ENGINE: "", ROLLOUT_TRAINER_TOKEN: "" }, ["--config", file]);
    expect((await notUrl.waitForExit()).code).toBe(2);
    expect(notUrl.lines).toEqual([
      "rollout-agent: the configuration has a problem:",
      `  - server from "server" in ${file}: must be a URL such as https://exchange.example.com (got "x")`,
      "Run with --help to see every setting.",
    ]);

    const taken = createServer();
    await new Promise<void>((r) => taken.listen(0, "127.0.0.1", r));
    t.defer(() => new Promise<void>((r) => taken.close(() => r())));
    const port = (taken.address() as { port: number }).port;
    const busy = agent(env({ ROLLOUT_FACADE_PORT: String(port) }));
    expect((await busy.waitForExit()).code).toBe(1);
    expect(busy.lines.join("\n")).toContain(`cannot start: the facade cannot listen on 127.0.0.1:${port}: the port is in use (another swarm server or agent?); choose another with --facade-port`);
  });
});
