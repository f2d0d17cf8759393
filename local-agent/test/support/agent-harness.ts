/** Runs the agent in-process against a test engine, with test-sized deadlines. */
import { join } from "node:path";
import { startAgent, type RunningAgent } from "../../src/agent";
import type { AgentConfig } from "../../src/config";
import { lineLogger } from "../../src/log";
import { realClock, type Clock } from "../../src/clock";
import type { TestEngine } from "./exchange";

export function testConfig(server: string, engine: TestEngine, dir: string, over: Partial<AgentConfig> = {}): AgentConfig {
  return {
    server,
    engine: engine.name,
    token: engine.tokens.trainer,
    trainerCommand: null,
    trainerCwd: null,
    stopGraceSeconds: 2,
    facadeHost: "127.0.0.1",
    facadePort: 0,
    coalesceMs: 20,
    logDir: join(dir, "logs"),
    logMaxBytes: 1 << 20,
    logFiles: 2,
    stateDir: join(dir, "state"),
    deliveryTimeoutSeconds: 2,
    deliveryAttempts: 2,
    deliveryConcurrency: 64,
    pollWaitSeconds: 2,
    heartbeatSeconds: 1,
    requestTimeoutSeconds: 5,
    retryMaxSeconds: 0.5,
    agentId: "test-agent",
    gatewayHost: "127.0.0.1",
    gatewayPort: 0,
    gatewayUrl: null,
    inferenceUpstream: null,
    upstreamSessionPath: false,
    gatewayModels: ["agentjet"],
    zmqReceiveTimeoutSeconds: 60,
    ...over,
  };
}

/** Starts the agent (its waits on `clock`); its log lines are kept (and printed when AGENT_TEST_LOG is set). */
export async function runAgent(config: AgentConfig, clock: Clock = realClock): Promise<RunningAgent & { lines: string[] }> {
  const lines: string[] = [];
  const logger = lineLogger((l) => {
    lines.push(l);
    if (process.env.AGENT_TEST_LOG) process.stderr.write(`[agent] ${l}\n`);
  }, realClock);
  const agent = await startAgent(config, logger, clock);
  return Object.assign(agent, { lines });
}
