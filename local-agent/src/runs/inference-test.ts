/**
 * Inference tests: runs an environment's Atropos `process` mode for a few steps against each
 * model (an OpenAI-compatible endpoint), with a deadline per model, and reads the accuracy
 * from the JSONL it writes (one line per step with that step's `scores`; a score above 0
 * counts as correct). API keys come from environment variables on this host, named by the
 * request (never the agent's own ROLLOUT_* ones), and are never reported. The key goes to the
 * `process` mode as --openai.api_key, in its command line, where other users of the host can
 * see it while the test runs (ps): Atropos's APIServerConfig takes it there or from a YAML
 * config, and defaults it to "" rather than reading OPENAI_API_KEY.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { z } from "zod";
import type { TestInferenceCommand } from "../../../src/protocol/commands";
import { AGENT_ENV_PREFIX, type ModelResult } from "../../../src/protocol/runs";
import type { Clock } from "../clock";
import { privateDir } from "../host-files";
import { runWithDeadline } from "./run-with-deadline";
import type { RunsConfig } from "./runs-config";

type Cmd = z.infer<typeof TestInferenceCommand>;
type Model = Cmd["models"][number];

const MAX_STEPS_SHOWN = 100;
const round3 = (x: number): number => Math.round(x * 1000) / 1000;

/** Reads the `process` mode's JSONL: per step, its scores. Lines that are not JSON are skipped. */
export function readScores(path: string): number[][] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return [];
  }
  return text.split("\n").flatMap((line) => {
    try {
      const item = JSON.parse(line) as { scores?: unknown };
      return Array.isArray(item.scores) ? [item.scores.filter((s): s is number => typeof s === "number")] : [];
    } catch {
      return [];
    }
  });
}

export function summarize(model: Model, steps: number[][], error: string | null, logTail: string, seconds: number): ModelResult {
  const total = steps.reduce((n, s) => n + s.length, 0);
  const correct = steps.reduce((n, s) => n + s.filter((x) => x > 0).length, 0);
  const withCorrect = steps.filter((s) => s.some((x) => x > 0)).length;
  return {
    model: model.model,
    base_url: model.base_url,
    steps_tested: steps.length,
    total_completions: total,
    correct_completions: correct,
    accuracy: total ? round3(correct / total) : 0,
    steps_with_correct: withCorrect,
    step_success_rate: steps.length ? round3(withCorrect / steps.length) : 0,
    steps: steps.slice(0, MAX_STEPS_SHOWN).map((scores, i) => ({ step: i + 1, completions: scores.length, correct: scores.filter((x) => x > 0).length, scores })),
    error,
    log_tail: logTail,
    seconds,
  };
}

export async function testModel(cmd: Cmd, model: Model, config: RunsConfig, clock: Clock, stop: AbortSignal): Promise<ModelResult> {
  const started = clock.now();
  const seconds = (): number => round3((clock.now() - started) / 1000);
  let key = "x";
  if (model.api_key_env !== null) {
    // The exchange refuses these names too; an older exchange does not.
    if (model.api_key_env.startsWith(AGENT_ENV_PREFIX)) return summarize(model, [], `api_key_env ${model.api_key_env} is refused: ${AGENT_ENV_PREFIX}* variables are the agent's own settings (its trainer token among them), not inference keys`, "", 0);
    const value = process.env[model.api_key_env];
    if (value === undefined || value === "") return summarize(model, [], `the environment variable ${model.api_key_env} is not set on the GPU host`, "", 0);
    key = value;
  }
  const dir = join(config.runsDir, "inference-tests", cmd.test_id);
  privateDir(dir);
  const out = join(dir, `${model.model.replace(/[^A-Za-z0-9_.-]+/g, "_")}.jsonl`);
  const argv = [
    config.python,
    cmd.environment.file_path,
    "process",
    "--env.total_steps",
    String(cmd.num_steps),
    "--env.group_size",
    String(cmd.group_size),
    "--env.use_wandb",
    "false",
    "--env.data_path_to_save_groups",
    out,
    "--openai.base_url",
    model.base_url,
    "--openai.api_key",
    key,
    "--openai.model_name",
    model.model,
  ];
  const r = await runWithDeadline(argv, { cwd: config.workDir, deadlineMs: cmd.timeout_seconds * 1000, clock, stop });
  const tail = (r.stderr || r.stdout).trim().split("\n").slice(-20).join("\n").replaceAll(key === "x" ? "\u0000" : key, "***");
  if (r.spawnError !== null) return summarize(model, [], `cannot run ${config.python}: ${r.spawnError}`, "", seconds());
  const steps = readScores(out);
  if (r.timedOut) return summarize(model, steps, `timed out after ${cmd.timeout_seconds} s`, tail, seconds());
  if (r.code !== 0) return summarize(model, steps, `the process mode exited with ${r.code !== null ? `code ${r.code}` : r.signal}`, tail, seconds());
  if (steps.length === 0) return summarize(model, steps, `no scored steps in ${out}`, tail, seconds());
  return summarize(model, steps, null, tail, seconds());
}
