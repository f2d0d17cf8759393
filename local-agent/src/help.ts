/** The text of `--help`, generated from the option table so it always matches what is parsed. */
import { OPTIONS, OPTION_KEYS } from "./options";
import { CONFIG_ENV } from "./config";
import { RUNS_CONFIG_ENV } from "./runs/run-commands";

export const AGENT_VERSION = "0.1.0";

function wrap(text: string, width: number, indent: string): string {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(/\s+/)) {
    if (line.length > 0 && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) lines.push(line);
  return lines.map((l) => indent + l).join("\n");
}

export function helpText(program = "rollout-agent"): string {
  const out: string[] = [
    `${program} ${AGENT_VERSION}: the Rollout Exchange agent for a GPU host.`,
    "",
    "It long-polls its engine on the exchange for commands (outbound connections only), starts and",
    "stops the trainer, delivers results and context resets to the trainer's ZeroMQ runners, and serves",
    "AgentJet's swarm-server endpoints locally so an unmodified trainer can use it as its swarm server.",
    "Its inference gateway serves the LLM calls of claimed episodes that the exchange relays (signed)",
    "to the trainer: over ZeroMQ for AgentJet, else to an OpenAI-compatible HTTP upstream.",
    "",
    `Usage: ${program} [--config FILE] [options]`,
    "",
    "  --config FILE     JSON file of settings, keys as named below (also " + CONFIG_ENV + ").",
    "                    Relative paths in it are relative to the file.",
    "  --print-config    Print the resolved settings (token masked) and exit.",
    "  --help, -h        Show this text.   --version   Print the version.",
    "",
    "Settings (flag > environment > config file > default):",
    "",
  ];
  for (const key of OPTION_KEYS) {
    const spec = OPTIONS[key];
    const dflt = "default" in spec ? ` [default: ${JSON.stringify(spec.default)}]` : "required" in spec && spec.required ? " [required]" : "";
    out.push(`  ${spec.flag} ${spec.arg}    "${key}", ${spec.env}${dflt}`);
    out.push(wrap(spec.describe, 86, "        "));
  }
  out.push(
    "",
    `Training runs: ${RUNS_CONFIG_ENV}=FILE names a JSON file of this host's environment directories`,
    "and the processes a run starts (with {config}, {env_file}, {run_id}, ... placeholders). Without",
    "it, the exchange's runs commands (scan, start, stop, inference tests) fail here saying so.",
    "",
    "Example:",
    "  ROLLOUT_TRAINER_TOKEN=... " + program + " --server https://rollout.example.com --engine default \\",
    "      --trainer-command 'ajet --conf {config}'",
    "",
    "The agent logs what it does to stderr. SIGINT/SIGTERM stop it: it stops the trainer it started",
    "and leaves unfinished commands to be handed out again. A SIGKILLed agent loses nothing: the",
    "engine redelivers unacked commands and the trainer keeps running and is adopted on restart.",
  );
  return out.join("\n");
}
