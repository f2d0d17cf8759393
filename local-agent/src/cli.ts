/**
 * rollout-agent: the command-line entry point. Resolves the config (see --help), starts the
 * agent, and stops it cleanly on SIGINT/SIGTERM. Exit codes: 0 after a clean stop or --help,
 * 2 for a bad config, 1 when the agent cannot start (e.g. the facade port is taken).
 */
import { readFileSync } from "node:fs";
import { startAgent } from "./agent";
import { redactedConfig, resolveConfig } from "./config";
import { AGENT_VERSION, helpText } from "./help";
import { describeError, lineLogger } from "./log";
import { realClock } from "./clock";

async function main(): Promise<number> {
  const resolved = resolveConfig({ argv: process.argv.slice(2), env: process.env, cwd: process.cwd(), readFile: (p) => readFileSync(p, "utf8") });
  if (!resolved.ok) {
    process.stderr.write(`rollout-agent: the configuration has ${resolved.errors.length === 1 ? "a problem" : `${resolved.errors.length} problems`}:\n`);
    for (const e of resolved.errors) process.stderr.write(`  - ${e}\n`);
    process.stderr.write("Run with --help to see every setting.\n");
    return 2;
  }
  const req = resolved.request;
  if (req.kind === "help") {
    process.stdout.write(helpText() + "\n");
    return 0;
  }
  if (req.kind === "version") {
    process.stdout.write(AGENT_VERSION + "\n");
    return 0;
  }
  if (req.kind === "print-config") {
    process.stdout.write(JSON.stringify(redactedConfig(req.config), null, 2) + "\n");
    return 0;
  }

  const logger = lineLogger((line) => process.stderr.write(line + "\n"), realClock);
  let agent;
  try {
    agent = await startAgent(req.config, logger);
  } catch (e) {
    logger.error(`cannot start: ${describeError(e)}`);
    return 1;
  }
  const running = agent;
  return new Promise<number>((resolve) => {
    let signals = 0;
    const onSignal = (sig: NodeJS.Signals): void => {
      if (++signals > 1) {
        logger.warn(`${sig} again: exiting now without waiting for the trainer`);
        resolve(130);
        return;
      }
      logger.info(`${sig}: stopping the trainer (if running) and the agent; send it again to exit at once`);
      void running.stop({ stopTrainer: true }).then(() => resolve(0));
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`rollout-agent: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  },
);
