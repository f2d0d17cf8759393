/**
 * Environment discovery: the Python helper (local-agent/python/scan_environments.py) parses
 * the configured directories with Python's own ast module, then each environment's module is
 * imported in a process of its own, with a deadline, to read its complete config fields. An
 * import that fails or hangs leaves the fields read from the source, with the reason.
 */
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { ConfigField, EnvironmentInfo, ScanProblem, type CatalogReport } from "../../../src/protocol/runs";
import type { Clock } from "../clock";
import { runWithDeadline } from "./run-with-deadline";
import type { RunsConfig } from "./runs-config";

/** Set only in the rollout-agent package's bundle (local-agent/build.ts), whose python/ sits elsewhere relative to the code. */
declare const BUNDLED_PYTHON_DIR: string | undefined;
const PYTHON_DIR = typeof BUNDLED_PYTHON_DIR === "string" ? BUNDLED_PYTHON_DIR : "../../python/";
export const SCANNER_SCRIPT = fileURLToPath(new URL(`${PYTHON_DIR}scan_environments.py`, import.meta.url));

const ScanOutput = z.object({ environments: z.array(EnvironmentInfo), problems: z.array(ScanProblem) });
const FieldsOutput = z.union([z.object({ config_class: z.string(), fields: z.array(ConfigField) }), z.object({ error: z.string() })]);

export class ScanError extends Error {}

function lastLine(text: string): string {
  return text.trim().split("\n").at(-1) ?? "";
}

/** Scans, then reads each environment's fields by importing it; throws ScanError if the scan itself fails. */
export async function scanEnvironments(config: RunsConfig, agentId: string, clock: Clock, stop?: AbortSignal): Promise<CatalogReport> {
  const scan = await runWithDeadline([config.python, SCANNER_SCRIPT, "scan", ...config.environmentDirs], {
    deadlineMs: config.scanTimeoutSeconds * 1000,
    clock,
    ...(stop ? { stop } : {}),
  });
  if (scan.spawnError !== null) throw new ScanError(`cannot run ${config.python}: ${scan.spawnError}`);
  if (scan.timedOut) throw new ScanError(`the environment scan took longer than ${config.scanTimeoutSeconds} s`);
  let parsed: z.infer<typeof ScanOutput>;
  try {
    parsed = ScanOutput.parse(JSON.parse(scan.stdout));
  } catch {
    throw new ScanError(`the environment scan failed (exit ${scan.code ?? scan.signal}): ${lastLine(scan.stderr) || scan.stdout.slice(0, 300)}`);
  }
  const environments: EnvironmentInfo[] = [];
  for (const env of parsed.environments) environments.push(await withImportedFields(env, config, clock, stop));
  return { agent_id: agentId, directories: config.environmentDirs, environments, problems: parsed.problems };
}

async function withImportedFields(env: EnvironmentInfo, config: RunsConfig, clock: Clock, stop?: AbortSignal): Promise<EnvironmentInfo> {
  const run = await runWithDeadline([config.python, SCANNER_SCRIPT, "fields", env.file_path, env.class_name], {
    cwd: config.workDir,
    deadlineMs: config.importTimeoutSeconds * 1000,
    clock,
    ...(stop ? { stop } : {}),
  });
  let why: string;
  if (run.timedOut) why = `importing the module took longer than ${config.importTimeoutSeconds} s`;
  else {
    const out = FieldsOutput.safeParse(safeJson(run.stdout));
    if (out.success && "fields" in out.data) return { ...env, config_class: out.data.config_class, fields: out.data.fields, fields_source: "import", fields_error: null };
    why = out.success && "error" in out.data ? out.data.error : `the import helper failed: ${lastLine(run.stderr) || "no output"}`;
  }
  // The source still tells the fields declared in the file; say what is missing and why.
  const fromSource = env.fields !== null ? "; fields read from the source (inherited ones are missing)" : "";
  return { ...env, fields_error: `could not import the module: ${why}${fromSource}` };
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}
