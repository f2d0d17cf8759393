/** Environment discovery with real Python parsing of the fixture environments (ast, then imports). */
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { realClock } from "../../src/clock";
import { ScanError, scanEnvironments } from "../../src/runs/scanner";
import { tempDir } from "../support/temp";
import { ENVS, runsConfig } from "./support";

const dirs: Array<{ remove(): void }> = [];
afterEach(() => {
  for (const d of dirs.splice(0)) d.remove();
});

function config(raw: Record<string, unknown> = {}) {
  const state = tempDir();
  dirs.push(state);
  return runsConfig({ environmentDirs: [ENVS], importTimeoutSeconds: 6, ...raw }, state.path);
}

describe("environment scan", () => {
  it("finds BaseEnv subclasses with Python's ast, reads fields by importing, and reports what it could not read", async () => {
    const report = await scanEnvironments(config(), "host-1", realClock);
    expect(report.agent_id).toBe("host-1");
    expect(report.directories).toEqual([ENVS]);
    expect(report.environments.map((e) => e.name)).toEqual(["countdown", "countdown_hard", "gsm8k", "slow"]);

    const gsm = report.environments.find((e) => e.name === "gsm8k")!;
    expect(gsm).toMatchObject({
      class_name: "GSM8kEnv",
      file_path: `${ENVS}/gsm8k_env.py`,
      description: "Grade-school math: the answer must be the right number.",
      config_class: "GSM8kConfig",
      fields_source: "import",
      fields_error: null,
    });
    // Imported: the inherited fields too, with the values config_init() sets.
    expect(gsm.fields).toEqual([
      { name: "group_size", type: "int", default: 8, description: "Completions per item" },
      { name: "max_token_length", type: "int", default: 2048, description: "Longest sequence" },
      { name: "total_steps", type: "int", default: 1000, description: "Training steps" },
      { name: "use_wandb", type: "bool", default: true, description: "" },
      { name: "data_path_to_save_groups", type: "Optional[str]", default: null, description: "" },
      { name: "temperature", type: "float", default: 0.7, description: "Sampling temperature" },
      { name: "stop_words", type: "Optional[List[str]]", default: null, description: "" },
      { name: "split", type: "Literal['train', 'test']", default: "train", description: "Dataset split" },
    ]);

    // Its dependency is missing: the fields declared in the file, from the source, and why.
    const countdown = report.environments.find((e) => e.name === "countdown")!;
    expect(countdown).toMatchObject({ class_name: "CountdownEnv", config_class: "CountdownConfig", fields_source: "ast", description: "Reach the target number with + - * /." });
    expect(countdown.fields).toEqual([
      { name: "max_numbers", type: "int", default: 4, description: "" },
      { name: "target_range", type: "tuple", default: [10, 100], description: "" },
      { name: "tool_name", type: "str", default: "calculator", description: "" },
    ]);
    expect(countdown.fields_error).toMatch(/ModuleNotFoundError: No module named 'reasoning_gym'.*from the source/);
    // A subclass of a subclass of BaseEnv, named by its `name` attribute.
    expect(report.environments.find((e) => e.name === "countdown_hard")).toMatchObject({ class_name: "HardCountdownEnv" });

    // An import that hangs is cut off at the deadline.
    const slow = report.environments.find((e) => e.name === "slow")!;
    expect(slow).toMatchObject({ fields: null, fields_source: null, fields_error: expect.stringMatching(/took longer than 6 s/) });

    // The file with a syntax error is a problem, not a failure; helpers.py and _private_env.py are not environments.
    expect(report.problems).toEqual([{ file_path: `${ENVS}/broken_env.py`, error: expect.stringMatching(/^SyntaxError: .* \(line 3\)$/) }]);
  });

  it("keeps its import deadlines when a module starts a helper in a session of its own that holds the output", async () => {
    const state = tempDir();
    const envs = join(state.path, "envs");
    mkdirSync(envs);
    const daemon = (name: string, then: string) =>
      [
        "import subprocess",
        "from pydantic import BaseModel",
        "class BaseEnv: pass",
        "class Config(BaseModel):",
        "    group_size: int = 4",
        // Out of the import's process group, with its stdout and stderr.
        "p = subprocess.Popen(['sleep', '60'], start_new_session=True)",
        `open(${JSON.stringify(join(state.path, `${name}.pid`))}, 'w').write(str(p.pid))`,
        then,
        `class ${name[0]!.toUpperCase()}${name.slice(1)}Env(BaseEnv):`,
        `    name = '${name}'`,
        "    env_config_cls = Config",
        "",
      ].join("\n");
    writeFileSync(join(envs, "served_env.py"), daemon("served", ""));
    writeFileSync(join(envs, "hung_env.py"), daemon("hung", "import time; time.sleep(60)"));
    dirs.push({
      remove: () => {
        for (const f of readdirSync(state.path).filter((f) => f.endsWith(".pid"))) {
          try {
            process.kill(Number(readFileSync(join(state.path, f), "utf8")), "SIGKILL");
          } catch {
            // already gone
          }
        }
        state.remove();
      },
    });
    const report = await scanEnvironments(runsConfig({ environmentDirs: [envs], importTimeoutSeconds: 1 }, state.path), "h", realClock);
    const byName = new Map(report.environments.map((e) => [e.name, e]));
    expect(byName.get("served")).toMatchObject({ fields_source: "import", fields_error: null, fields: [expect.objectContaining({ name: "group_size", default: 4 })] });
    expect(byName.get("hung")).toMatchObject({ fields_error: expect.stringMatching(/took longer than 1 s/) });
  }, 15_000);

  it("reports a directory that does not exist, and fails plainly without Python", async () => {
    const report = await scanEnvironments(config({ environmentDirs: ["/no/such/dir"] }), "h", realClock);
    expect(report).toMatchObject({ environments: [], problems: [{ file_path: "/no/such/dir", error: "not a directory" }] });
    await expect(scanEnvironments(config({ python: "/no/python3" }), "h", realClock)).rejects.toThrow(ScanError);
    await expect(scanEnvironments(config({ python: "/no/python3" }), "h", realClock)).rejects.toThrow(/cannot run \/no\/python3/);
  });
});
