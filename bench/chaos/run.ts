/**
 * npm run chaos [-- --quick] [-- --clients N] [-- --out FILE] [-- --svg FILE]
 *
 * Fault injection under load. Clients claim and end episodes, a trainer keeps the queue full,
 * and the local-agent delivers every result to ZeroMQ runners. Meanwhile the local exchange's
 * whole process group (Node, Miniflare and workerd) is SIGKILLed and restarted on the same
 * state, then the agent is SIGKILLed and restarted on its journal. Every end_episode answered
 * success carries a result id, and the runners record each id they receive, so the run can
 * tell:
 *  - lost: acknowledged to a client, never delivered. Must be none.
 *  - delivered twice. Allowed only for a result the runner received in the IN_FLIGHT_MS before
 *    the agent's SIGKILL (or while the signal was taking effect) and again after its restart: the agent had handed it over but not
 *    yet journaled the outcome, so it cannot know the runner has it (the at-least-once window).
 *  - how long deliveries took to resume after each restart.
 * Exits 1 when something acknowledged was lost or delivered twice outside that window.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir, cpus } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ExchangeError } from "../../src/client";
import { RepPeers } from "../agent/rep-peers";
import { closedLoop } from "../load/closed-loop";
import { agentEnv, serveAgent, type AgentTarget } from "../serve/agent";
import { createEngine } from "../serve/exchange";
import { freePort, startProcess, type ProcessTarget } from "../serve/process";
import { renderChaosChart } from "./chart";

/** The flags; an unknown one, or a value that is no count, ends the run before it starts anything. */
function flags(): { quick: boolean; clients: number; out: string | undefined; svg: string | undefined } {
  try {
    const { values: v } = parseArgs({ options: { quick: { type: "boolean", default: false }, clients: { type: "string" }, out: { type: "string" }, svg: { type: "string" } }, strict: true, allowPositionals: false });
    if (v.clients !== undefined && !/^[1-9]\d{0,3}$/.test(v.clients)) throw new Error(`--clients must be a count from 1 to 9999, got '${v.clients}'`);
    return { quick: v.quick, clients: v.clients === undefined ? (v.quick ? 8 : 16) : Number(v.clients), out: v.out, svg: v.svg };
  } catch (e) {
    process.stderr.write(`[chaos] ${e instanceof Error ? e.message : String(e)}\nusage: npm run chaos [-- --quick] [-- --clients N] [-- --out FILE] [-- --svg FILE]\n`);
    process.exit(2);
  }
}
const { quick, clients: CLIENTS, out: OUT, svg: SVG } = flags();
/** When each fault lands and when the load stops, in seconds from the start of the load. */
const PLAN = quick ? { exchangeKill: 8, agentKill: 20, loadEnd: 30 } : { exchangeKill: 20, agentKill: 50, loadEnd: 80 };
/**
 * At least this long between a restart and the next fault (or the end of the load), whatever the
 * plan says: on a busy machine the exchange can take half a minute to come back, and a fault
 * landing before deliveries resumed would make the resume times measure the next outage.
 */
const SETTLE_S = quick ? 6 : 15;
/** How long, after the load stops, every acknowledged result has to arrive. */
const DRAIN_S = 90;
/**
 * The engine's command lease. A command whose ack died with the exchange stays leased to the
 * agent's session, and is handed out again only when its lease ends: the run watches for
 * deliveries until a lease after the exchange's restart, to see any such second delivery.
 */
const COMMAND_LEASE_S = 20;
const RUNNERS = 16;
/** The trainer keeps about this many episodes registered and unclaimed. */
const QUEUE_TARGET = 256;
const REQUEST_TIMEOUT_MS = 10_000;
/**
 * A result counts as in flight at the agent's SIGKILL when its runner received it at most this
 * long before the kill. The agent journals an outcome as soon as the runner's ack arrives, a
 * round trip on loopback; a second delivery of a result received earlier than this means a
 * journaled outcome was executed again.
 */
const IN_FLIGHT_MS = 1000;

const ADMIN_TOKEN = "chaos-admin-token";
const log = (m: string): void => void process.stderr.write(`[chaos] ${m}\n`);
const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The exchange in its own process group (./exchange-process.ts), so that one SIGKILL ends Node, Miniflare and workerd alike. */
function startExchange(env: Record<string, string>): Promise<ProcessTarget> {
  return startProcess({ script: join(import.meta.dirname, "exchange-process.ts"), env, ready: /^ready (\S+)/, what: "the exchange", timeoutMs: 120_000, detached: true });
}

/** SIGKILL to the exchange's whole group, and waits until its leader is gone. */
async function killExchange(exchange: ProcessTarget): Promise<void> {
  exchange.kill("SIGKILL");
  await exchange.exited();
}

type Receipt = { at: number };

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "rollout-chaos-"));
  const port = await freePort();
  const exchangeEnv = {
    CHAOS_PORT: String(port),
    CHAOS_STATE_DIR: join(dir, "exchange-state"),
    CHAOS_ADMIN_TOKEN: ADMIN_TOKEN,
    CHAOS_CLAIM_KEY_SECRET: "chaos-claim-secret",
    CHAOS_COMMAND_LEASE_SECONDS: String(COMMAND_LEASE_S),
    // Miniflare's and the build's temporary files, removed with the run's: a SIGKILLed exchange removes nothing.
    TMPDIR: join(dir, "tmp"),
  };
  mkdirSync(exchangeEnv.TMPDIR);
  let exchange: ProcessTarget | null = null;
  const receipts = new Map<string, Receipt[]>();
  const runners = new RepPeers(false, (text, at) => {
    let id: unknown;
    try {
      id = (JSON.parse(text) as { metadata?: { result_id?: unknown } }).metadata?.result_id;
    } catch {
      return; // a runner control message (RUNNER.SPECIAL.RESET_CONTEXT_TRACKER for a reaped claim)
    }
    if (typeof id !== "string") return;
    const list = receipts.get(id) ?? [];
    list.push({ at });
    receipts.set(id, list);
  });
  let agent: AgentTarget | null = null;
  const cleanUp = async (): Promise<void> => {
    agent?.kill("SIGKILL");
    if (exchange) await killExchange(exchange).catch(() => {});
    runners.close();
    rmSync(dir, { recursive: true, force: true });
  };
  // Ctrl-C: the exchange runs in a group of its own, which the terminal's signal does not reach.
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.once(signal, () => {
      log(`${signal}: stopping`);
      void cleanUp().finally(() => process.exit(130));
    });
  }
  try {
    await runners.start(RUNNERS);
    log(`starting the exchange on port ${port}`);
    exchange = await startExchange(exchangeEnv);
    const origin = exchange.ready[1]!;
    const engine = await createEngine(origin, ADMIN_TOKEN, "chaos");
    const timed = (input: string, init?: RequestInit) => fetch(input, { ...init, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    const trainer = engine.as("trainer", timed);
    const client = engine.as("client", timed);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });

    const startAgent = () => serveAgent(agentEnv({ server: origin, engine: engine.name, trainerToken: engine.trainerToken, dir: join(dir, "agent") }));
    agent = await startAgent();

    // ---------------------------------------------------------------- the load
    const acknowledged = new Map<string, number>();
    let registered = 0;
    let claims = 0;
    let clientErrors = 0;
    let trainerErrors = 0;
    const trainerLoop = async (): Promise<void> => {
      const want = QUEUE_TARGET - (registered - claims);
      if (want < 32) {
        await sleep(20);
        return;
      }
      const batch = Array.from({ length: Math.min(want, 128) }, (_, i) => ({
        episode_uuid: `ep-${registered + i}`,
        zmq_listen_result_addr: runners.addrs[(registered + i) % RUNNERS] as string,
      }));
      try {
        await trainer.batchRegisterEpisodes({ episodes: batch });
        registered += batch.length;
      } catch {
        trainerErrors++;
        await sleep(200);
      }
    };
    const clientLoop = (c: number) => {
      const clientUuid = `client-${c}`;
      return async (): Promise<void> => {
        try {
          const claim = await client.claimEpisode({ client_uuid: clientUuid, episode_type: "train", discard_episode_timeout: 20 });
          if (!claim.success) {
            await sleep(20);
            return;
          }
          claims++;
          const resultId = `${claim.episode_uuid}#${claim.fence ?? 0}`;
          const ended = await client.endEpisode({
            client_uuid: clientUuid,
            episode_uuid: claim.episode_uuid,
            task_id: claim.episode_uuid,
            workflow_output: { reward: 1, metadata: { task_id: claim.episode_uuid, result_id: resultId } },
          });
          if (ended.success) acknowledged.set(resultId, now());
        } catch (e) {
          // The exchange is down or the claim was lost with it: not acknowledged, so not counted.
          if (!(e instanceof ExchangeError)) clientErrors++;
          await sleep(100);
        }
      };
    };

    const t0 = now();
    const at = (s: number) => sleep(Math.max(0, t0 + s * 1000 - now()));
    // Worker 0 is the trainer, the others the clients; the load runs until the plan ends it.
    const load = closedLoop({ workers: CLIENTS + 1, warmupSec: 0, durationSec: Infinity, label: "chaos", unit: "iterations" }, (i) => (i === 0 ? trainerLoop : clientLoop(i - 1)));
    log(`load: ${CLIENTS} clients, ${RUNNERS} runners; exchange SIGKILL at ${PLAN.exchangeKill} s, agent SIGKILL at ${PLAN.agentKill} s, load ends at ${PLAN.loadEnd} s (each at least ${SETTLE_S} s after the restart before it)`);

    await at(PLAN.exchangeKill);
    const exchangeKillAt = now();
    await killExchange(exchange);
    log(`exchange SIGKILLed at ${((exchangeKillAt - t0) / 1000).toFixed(1)} s (${acknowledged.size} results acknowledged so far)`);
    exchange = await startExchange(exchangeEnv);
    const exchangeUpAt = now();
    log(`exchange serving again after ${((exchangeUpAt - exchangeKillAt) / 1000).toFixed(1)} s`);

    const since = (t: number) => (t - t0) / 1000;
    await at(Math.max(PLAN.agentKill, since(exchangeUpAt) + SETTLE_S));
    const agentKillAt = now();
    agent.kill("SIGKILL");
    await agent.exited();
    // The signal takes effect a little after kill() returns: what the agent sent until it was
    // seen dead is in flight, and the runners may read it a millisecond after agentKillAt.
    const agentDeadAt = now();
    const agentLog = [...agent.lines];
    log(`agent SIGKILLed at ${((agentKillAt - t0) / 1000).toFixed(1)} s`);
    agent = await startAgent();
    const agentUpAt = now();
    log(`agent started again after ${((agentUpAt - agentKillAt) / 1000).toFixed(1)} s`);

    await at(Math.max(PLAN.loadEnd, since(agentUpAt) + SETTLE_S));
    load.stop();
    await load.done;
    const loadEndAt = now();
    log(`load stopped: ${acknowledged.size} results acknowledged; waiting up to ${DRAIN_S} s for their delivery`);
    const drainDeadline = now() + DRAIN_S * 1000;
    const undelivered = () => [...acknowledged.keys()].filter((id) => !receipts.has(id));
    while (undelivered().length > 0 && now() < drainDeadline) await sleep(250);
    // Late duplicates would arrive after the last first delivery: give them a moment, and a command
    // lease after the exchange's restart, when one leased at its SIGKILL is handed out again.
    await sleep(Math.max(2000, exchangeUpAt + (COMMAND_LEASE_S + 2) * 1000 - now()));

    // ---------------------------------------------------------------- the verdict
    const all = [...receipts.values()].flat().map((r) => r.at);
    const firstAfter = (t: number) => all.filter((x) => x >= t).reduce((m, x) => Math.min(m, x), Infinity);
    const twice = [...receipts.entries()].filter(([, r]) => r.length > 1);
    const inWindow = twice.filter(([, r]) => r.length === 2 && r[0]!.at <= agentDeadAt && r[0]!.at >= agentKillAt - IN_FLIGHT_MS && r[1]!.at >= agentKillAt);
    const firstBeforeKillMs = twice.map(([, r]) => Math.round(agentKillAt - r[0]!.at)).sort((a, b) => a - b);
    const lost = undelivered();
    const seconds = (t: number) => (Number.isFinite(t) ? Math.round(t) / 1000 : null);
    const report = {
      machine: { cores: cpus().length, node: process.version },
      settings: { quick, clients: CLIENTS, runners: RUNNERS, plan_s: PLAN, settle_s: SETTLE_S, drain_s: DRAIN_S, command_lease_s: COMMAND_LEASE_S },
      /** When each fault and restart happened, in seconds from the start of the load. */
      timeline_s: {
        exchange_kill: seconds(exchangeKillAt - t0),
        exchange_up: seconds(exchangeUpAt - t0),
        agent_kill: seconds(agentKillAt - t0),
        agent_up: seconds(agentUpAt - t0),
        load_end: seconds(loadEndAt - t0),
      },
      acknowledged: acknowledged.size,
      delivered: receipts.size,
      lost: lost.length,
      delivered_twice: twice.length,
      delivered_twice_in_agent_kill_window: inWindow.length,
      delivered_twice_outside_window: twice.length - inWindow.length,
      in_flight_window_ms: IN_FLIGHT_MS,
      /** For each result delivered twice: how long before the agent's SIGKILL its first delivery was. */
      delivered_twice_first_ms_before_agent_kill: { min: firstBeforeKillMs[0] ?? null, max: firstBeforeKillMs.at(-1) ?? null },
      delivered_but_not_acknowledged: [...receipts.keys()].filter((id) => !acknowledged.has(id)).length,
      resume_after_exchange_restart_s: seconds(firstAfter(exchangeUpAt) - exchangeUpAt),
      exchange_down_s: seconds(exchangeUpAt - exchangeKillAt),
      resume_after_agent_restart_s: seconds(firstAfter(agentUpAt) - agentUpAt),
      agent_down_s: seconds(agentUpAt - agentKillAt),
      results_per_s: Math.round(acknowledged.size / ((loadEndAt - t0) / 1000)),
      client_network_errors: clientErrors,
      trainer_errors: trainerErrors,
      agent_repeat_lines: [...agentLog, ...agent.lines].filter((l) => /handed out [2-9] times|had already been acked/.test(l)).length,
      examples: { lost: lost.slice(0, 5), twice_outside_window: twice.filter((t) => !inWindow.includes(t)).slice(0, 5).map(([id]) => id) },
    };
    console.log(JSON.stringify(report, null, 2));
    if (OUT) writeFileSync(OUT, JSON.stringify(report, null, 2) + "\n");
    if (SVG) {
      writeFileSync(
        SVG,
        renderChaosChart({
          t0,
          receipts: all,
          acknowledged: [...acknowledged.values()],
          marks: [
            { at: exchangeKillAt, label: "exchange SIGKILL" },
            { at: exchangeUpAt, label: "exchange up" },
            { at: agentKillAt, label: "agent SIGKILL" },
            { at: agentUpAt, label: "agent up" },
            { at: loadEndAt, label: "load ends" },
          ],
          summary: `${report.acknowledged} acknowledged, ${report.lost} lost, ${report.delivered_twice} delivered twice (${report.delivered_twice_in_agent_kill_window} in the agent-kill window); ${CLIENTS} clients, ${report.machine.cores} cores`,
        }),
      );
    }
    const ok = report.lost === 0 && report.delivered_twice_outside_window === 0 && report.acknowledged > 0;
    log(ok ? "nothing acknowledged was lost; no result was delivered twice outside the agent-kill window" : "FAILED: see lost / delivered_twice_outside_window");
    process.exitCode = ok ? 0 : 1;
  } finally {
    await cleanUp();
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
