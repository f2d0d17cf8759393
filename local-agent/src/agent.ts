/**
 * The agent assembled: the command loop, the dispatcher and its trainer supervisor, the
 * acker and its journal, the heartbeat, and the trainer facade. `startAgent` is what the CLI
 * runs; tests and the benchmark run it in-process with their own clock and logger.
 */
import { Acker } from "./acker";
import type { BackoffOptions } from "./backoff";
import { realClock, type Clock } from "./clock";
import { BACKLOG_PER_DELIVERY_SLOT, DEFAULT_DELIVERY_QUEUE_BYTES, commandLoop } from "./command-loop";
import type { AgentConfig } from "./config";
import { Dispatcher } from "./dispatcher";
import { EngineLink } from "./engine-link";
import { Facade } from "./facade";
import { Gateway } from "./gateway/server";
import { FetchedSecret } from "./gateway/secret";
import { privateDir } from "./host-files";
import { AGENT_VERSION } from "./help";
import type { Logger } from "./log";
import { OutcomeJournal } from "./outcome-journal";
import { Reachability } from "./reachability";
import { Reports } from "./reports";
import { TrainerLog, rotateLog } from "./trainer-log";
import { TrainerSupervisor } from "./trainer";
import { RunsClient } from "../../src/client";
import { RunCommands, loadRunsConfig, type RunCommandsDeps } from "./runs/run-commands";
import { atroposUrl } from "./runs/atropos-url";
import { RolloutCommands } from "./rollout/rollout-commands";
import { clearSessionsBase } from "./rollout/clear-sessions";
import { RolloutWorkers } from "./rollout/workers";
import { CallRecorder, DEFAULT_HISTORY_BYTES } from "./ledger/recorder";
import { CallShipper } from "./ledger/shipper";
import { LedgerSpool } from "./ledger/spool";

/** On a clean stop, how long recorded calls may take to reach the exchange. */
const LEDGER_FLUSH_MS = 5000;

export type RunningAgent = {
  /** The trainer facade's base URL. */
  facadeUrl: string;
  facade: Facade;
  /** The inference gateway's local base URL, and the one the heartbeat reports to the Worker. */
  gatewayLocalUrl: string;
  gatewayUrl: string;
  dispatcher: Dispatcher;
  trainer: TrainerSupervisor;
  /** Training runs: environment scans, run processes, inference tests. */
  runs: RunCommands;
  /** The rollout buffer's commands: the rollout workers and clear_sessions. */
  rollout: RolloutCommands;
  /**
   * Stops polling, closes the facade and waits for the loops. With `stopTrainer` (the CLI's
   * SIGINT/SIGTERM) a running trainer is stopped too; commands still executing are not acked
   * and will be handed out again.
   */
  stop(opts?: { stopTrainer?: boolean }): Promise<void>;
};

const LOG_ROTATE_CHECK_MS = 5000;

export async function startAgent(
  config: AgentConfig,
  logger: Logger,
  clock: Clock = realClock,
  /** The runs config; by default read from the file ROLLOUT_RUNS_CONFIG names. */
  extras: { runsConfig?: RunCommandsDeps["config"] } = {},
): Promise<RunningAgent> {
  // Before anything is written there: an older agent's directories may be open to every user of the host.
  privateDir(config.stateDir, logger);
  privateDir(config.logDir, logger);
  const stopper = new AbortController();
  const stop = stopper.signal;
  /** Aborted first in a stop: no more commands are polled for, while those under way finish. */
  const polling = new AbortController();
  const backoff: BackoffOptions = { initialMs: Math.max(10, (config.retryMaxSeconds * 1000) / 60), maxMs: config.retryMaxSeconds * 1000 };
  const link = new EngineLink(config.server, config.engine, config.token, config.requestTimeoutSeconds * 1000);
  const reach = new Reachability(logger, clock, link.baseUrl);
  link.onAnswered = () => reach.succeeded();
  // As URL spells it (host lowercased, default port dropped): another spelling would lose the journal.
  const journal = new OutcomeJournal(config.stateDir, new URL(link.baseUrl).href, logger);
  if (journal.ignoredUnkeyed > 0) logger.warn(`ignored ${journal.ignoredUnkeyed} unacked outcome${journal.ignoredUnkeyed === 1 ? "" : "s"} in ${config.stateDir}/outcomes.jsonl written without an engine's name (by an older agent): they may be another engine's, so their commands will run again if handed out`);
  const acker = new Acker({ link, journal, reach, logger, backoff, stop });
  const trainerLog = new TrainerLog(config.logDir);

  // The facade's port is known only after listen (it may be 0), and the trainer needs it.
  const facade = new Facade({
    link,
    host: config.facadeHost,
    port: config.facadePort,
    ...(config.facadeAnyPeer === true ? { peerUid: null, anyPeer: true } : {}),
    coalesceMs: config.coalesceMs,
    logger,
    status: (): Record<string, unknown> => ({ agent_id: config.agentId, trainer: trainer.status(), backlog: dispatcher.backlog, pending_acks: acker.pending, exchange_reachable: !reach.down }),
  });
  const facadeUrl = await facade.listen();
  const facadePort = new URL(facadeUrl).port;

  // The trajectory ledger: the gateway records the calls the Worker asks it to, the shipper sends them.
  const shipper = new CallShipper({ post: (batch) => link.client.postCalls(batch), putMedia: (sha256, data) => link.client.putMedia(sha256, data), clock, logger, backoff, maxQueueBytes: config.ledgerQueueBytes });
  const recorder = new CallRecorder({ historyBytes: config.ledgerHistoryBytes ?? DEFAULT_HISTORY_BYTES, sink: (record, bytes, media) => shipper.enqueue(record, bytes, media), logger });

  // The Worker relays claimed episodes' LLM calls here (signed); see gateway/server.ts.
  const secret = new FetchedSecret(async () => (await link.client.gatewaySecret()).secret, logger);
  const gateway = new Gateway({
    host: config.gatewayHost,
    port: config.gatewayPort,
    secret,
    upstream: config.inferenceUpstream,
    sessionPath: config.upstreamSessionPath,
    models: config.gatewayModels,
    zmqReceiveTimeoutMs: config.zmqReceiveTimeoutSeconds * 1000,
    logger,
    ledger: { recorder, tokenDialect: config.tokenDialect ?? "vllm" },
  });
  let gatewayLocalUrl: string;
  try {
    gatewayLocalUrl = await gateway.listen();
  } catch (e) {
    await facade.close();
    throw e;
  }
  const gatewayUrl = config.gatewayUrl ?? gatewayLocalUrl;
  secret.prefetch();

  let reports: Reports | null = null;
  const trainer = new TrainerSupervisor({
    command: config.trainerCommand,
    cwd: config.trainerCwd,
    stateDir: config.stateDir,
    log: trainerLog,
    graceMs: config.stopGraceSeconds * 1000,
    placeholders: { facade_url: facadeUrl, facade_port: facadePort, engine: config.engine },
    // AgentJet's runners find their swarm server through these.
    env: { ROLLOUT_FACADE_URL: facadeUrl, AJET_DAT_INTERCHANGE_PORT: facadePort, ROLLOUT_ENGINE: config.engine },
    logger,
    clock,
    onUnexpectedExit: (exit) => void reports?.trainerExited(exit),
    onChange: () => reports?.poke(),
  });
  const rolloutWorkers = new RolloutWorkers({
    command: config.rolloutCommand ?? null,
    cwd: config.rolloutCwd ?? null,
    logDir: config.logDir,
    stateDir: config.stateDir,
    graceMs: config.stopGraceSeconds * 1000,
    placeholders: { engine: config.engine, engine_url: link.baseUrl, facade_url: facadeUrl },
    env: { ROLLOUT_ENGINE_URL: link.baseUrl, ROLLOUT_ENGINE: config.engine, ROLLOUT_FACADE_URL: facadeUrl },
    logger,
    clock,
  });
  reports = new Reports({
    link,
    trainer,
    reach,
    logger,
    clock,
    backoff,
    stop,
    agentId: config.agentId,
    version: AGENT_VERSION,
    gatewayUrl,
    rolloutWorkers: () => rolloutWorkers.report(),
    runsOffReason: () => runs.offReason,
    ledger: () => ({ ...shipper.report(), unrecorded_calls: recorder.unrecorded }),
    stateDir: config.stateDir,
  });
  const runs = new RunCommands({
    config: extras.runsConfig ?? loadRunsConfig(process.env, process.cwd(), config.stateDir),
    client: new RunsClient({ baseUrl: link.baseUrl, token: config.token, fetch: link.fetch }),
    clock,
    reach,
    logger,
    agentId: config.agentId,
    stop,
    maxBackoffMs: config.retryMaxSeconds * 1000,
    atropos: { engine: config.engine, url: atroposUrl(link.baseUrl, config.token) },
  });
  const rollout = new RolloutCommands({
    workers: rolloutWorkers,
    inferenceAdminUrl: clearSessionsBase(config.inferenceAdminUrl, config.inferenceUpstream),
    logger,
    stop,
  });
  const dispatcher = new Dispatcher({
    trainer,
    acker,
    journal,
    logger,
    delivery: { timeoutMs: config.deliveryTimeoutSeconds * 1000, attempts: config.deliveryAttempts, concurrency: config.deliveryConcurrency },
    stop,
    version: AGENT_VERSION,
    runs,
    rollout,
  });

  // What the last stop could not send (the exchange down), sent first; taken once nothing of the
  // start can fail, since the file is emptied as it is read.
  const spool = new LedgerSpool(config.stateDir, new URL(link.baseUrl).href, logger);
  const spooled = spool.take();
  if (spooled.length > 0) logger.info(`ledger: sending ${spooled.length} recorded call${spooled.length === 1 ? "" : "s"} the last stop kept in ${spool.path}`);
  for (const c of spooled) shipper.enqueue(c.record, c.bytes, c.media);

  logger.info(`rollout-agent ${AGENT_VERSION} for engine ${config.engine} at ${link.baseUrl}; trainer facade on ${facadeUrl}; inference gateway on ${gatewayLocalUrl}${gatewayUrl === gatewayLocalUrl ? "" : `, reached at ${gatewayUrl}`}`);
  // Before adopt(), which may report an exit of its own (a trainer that died while no agent ran): that one is the later.
  const keptExit = reports.resendKeptExit();
  trainer.adopt();
  rollout.workers.adopt();
  const replay = acker.resendJournal();
  if (replay.count > 0) logger.info(`re-sending ${replay.count} ack${replay.count === 1 ? "" : "s"} of commands finished before the restart`);
  // A poll sent alongside those acks would be handed their commands again (the engine releases
  // a dead session's leases at once), so it waits for their answers; not forever, though: an ack
  // the exchange keeps failing must not stop the agent working (the journal answers its command).
  const replayed = untilOr(replay.settled, clock, (config.requestTimeoutSeconds + config.retryMaxSeconds) * 1000, stop);

  const loops = [
    replayed.then(() =>
      commandLoop({
        link,
        dispatcher,
        reach,
        logger,
        backoff,
        stop: AbortSignal.any([stop, polling.signal]),
        waitSeconds: config.pollWaitSeconds,
        maxBacklog: config.deliveryConcurrency * BACKLOG_PER_DELIVERY_SLOT,
        maxBacklogBytes: config.deliveryQueueBytes ?? DEFAULT_DELIVERY_QUEUE_BYTES,
      }),
    ),
    reports.heartbeatLoop(config.heartbeatSeconds * 1000),
    keptExit,
    // Every log a child writes straight to (a file, not a pipe, so it outlives the agent): one left unrotated fills the host's disk.
    rotateLoop(() => [trainerLog.path, rolloutWorkers.logPath, ...(runs.supervisor?.logPaths ?? [])], config, logger, clock, stop),
    // Scan the environments and find the runs a previous agent left; a run's processes outlive the agent.
    runs.startup().catch((e: unknown) => logger.error(`training runs: startup failed: ${(e as Error).message}`)),
  ];

  let stopping: Promise<void> | null = null;
  return {
    facadeUrl,
    facade,
    gatewayLocalUrl,
    gatewayUrl,
    dispatcher,
    trainer,
    runs,
    rollout,
    stop: (opts = {}) =>
      (stopping ??= (async () => {
        logger.info("agent stopping");
        await facade.close();
        await gateway.close();
        // The command loop dispatches until stopper.abort(), after the grace period: a start it
        // hands over meanwhile must start nothing, and one already spawning is stopped with the rest.
        const out = opts.stopTrainer ? await trainer.shutdown("the agent is shutting down") : null;
        if (out !== null) {
          // The engine must not keep believing a trainer runs; a few seconds at most, the agent is exiting.
          const told = reports?.trainerExited({ exit_code: out.exit_code, signal: out.signal, log_tail: trainerLog.tail(), detail: `the agent was shut down: ${out.detail}`, start_seq: out.start_seq, ...(out.start_incarnation === undefined ? {} : { start_incarnation: out.start_incarnation }) });
          await Promise.race([told, clock.sleep(5000)]);
        }
        // Like the trainer: a deliberate shutdown takes its workers along, a SIGKILLed agent leaves them to be adopted.
        if (opts.stopTrainer) await rollout.workers.shutdown("the agent is shutting down");
        polling.abort();
        await finishDeliveries(dispatcher, config, logger, clock);
        stopper.abort();
        trainer.close();
        await Promise.allSettled(loops);
        // The gateway is closed: what it recorded (handed over a turn after each answer) is all queued.
        await new Promise((r) => setImmediate(r));
        await shipper.close(LEDGER_FLUSH_MS, (calls) => spool.keep(calls));
        await acker.drain();
        logger.info("agent stopped");
      })()),
  };
}

/**
 * Lets the deliveries on their way finish before the agent goes (Dispatcher.finishDeliveries):
 * at most as long as one takes with all its attempts, and a little more for its ack's journal line.
 */
async function finishDeliveries(dispatcher: Dispatcher, config: AgentConfig, logger: Logger, clock: Clock): Promise<void> {
  const n = dispatcher.deliveriesUnderWay;
  const boundMs = config.deliveryTimeoutSeconds * 1000 * config.deliveryAttempts + 1000;
  if (n > 0) logger.info(`waiting for ${n} result deliver${n === 1 ? "y" : "ies"} under way to be acked by ${n === 1 ? "its runner" : "their runners"} (at most ${boundMs / 1000} s)`);
  const cut = new AbortController();
  const finished = await dispatcher.finishDeliveries(clock.sleep(boundMs, cut.signal));
  cut.abort();
  if (!finished) logger.warn(`stopping with ${dispatcher.deliveriesUnderWay} deliveries still unanswered: the next agent sends them again`);
}

async function rotateLoop(logs: () => string[], limits: Pick<AgentConfig, "logMaxBytes" | "logFiles">, logger: Logger, clock: Clock, stop: AbortSignal): Promise<void> {
  /** By log, why its rotation last failed: a full disk fails every check, and is said once per kind of failure. */
  const failing = new Map<string, string>();
  while (!stop.aborted) {
    for (const path of logs()) {
      try {
        if (await rotateLog(path, limits.logMaxBytes, limits.logFiles)) logger.info(`rotated ${path}`);
        failing.delete(path);
      } catch (e) {
        const kind = (e as NodeJS.ErrnoException).code ?? (e as Error).message;
        if (failing.get(path) !== kind) logger.warn(`could not rotate ${path}: ${(e as Error).message}; retrying every ${LOG_ROTATE_CHECK_MS / 1000} s`);
        failing.set(path, kind);
      }
    }
    await clock.sleep(LOG_ROTATE_CHECK_MS, stop);
  }
}

/** Resolves when `p` settles, or after `ms`, or when the agent stops, whichever comes first. */
async function untilOr(p: Promise<void>, clock: Clock, ms: number, stop: AbortSignal): Promise<void> {
  const done = new AbortController();
  await Promise.race([p, clock.sleep(ms, AbortSignal.any([stop, done.signal]))]);
  done.abort();
}
