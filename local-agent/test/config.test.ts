import { describe, expect, it } from "vitest";
import { redactedConfig, resolveConfig, type ConfigSources } from "../src/config";
import { splitCommand, expandCommand, TemplateError } from "../src/command-template";
import { helpText } from "../src/help";
import { RUNS_CONFIG_ENV } from "../src/runs/run-commands";
import { OPTIONS, OPTION_KEYS } from "../src/options";

const required = ["--server", "https://rx.example.com/", "--engine", "default", "--token", "tok"];

function sources(over: Partial<ConfigSources> = {}): ConfigSources {
  return {
    argv: [],
    env: {},
    cwd: "/work/dir",
    readFile: (p) => {
      throw Object.assign(new Error(`ENOENT: no such file, open '${p}'`), { code: "ENOENT" });
    },
    ...over,
  };
}

function run(over: Partial<ConfigSources>) {
  const r = resolveConfig(sources(over));
  if (!r.ok) throw new Error(r.errors.join("\n"));
  if (r.request.kind !== "run" && r.request.kind !== "print-config") throw new Error(`unexpected ${r.request.kind}`);
  return r.request.config;
}

function errors(over: Partial<ConfigSources>): string[] {
  const r = resolveConfig(sources(over));
  if (r.ok) throw new Error("expected errors");
  return r.errors;
}

describe("resolveConfig", () => {
  it("takes the ledger's token dialect and memory bounds, and refuses an unknown dialect", () => {
    expect(run({ argv: required })).toMatchObject({ tokenDialect: "vllm", ledgerHistoryBytes: 256 * 1024 * 1024, ledgerQueueBytes: 64 * 1024 * 1024 });
    expect(run({ argv: [...required, "--token-dialect", "sglang"], env: { ROLLOUT_LEDGER_QUEUE_BYTES: "1000" } })).toMatchObject({ tokenDialect: "sglang", ledgerQueueBytes: 1000 });
    const bad = errors({ argv: [...required, "--token-dialect=tgi", "--ledger-history-bytes", "0"] });
    expect(bad).toHaveLength(2);
    expect(bad[0]).toMatch(/^tokenDialect from --token-dialect: .*vllm.*sglang.* \(got "tgi"\)$/);
    expect(bad[1]).toMatch(/^ledgerHistoryBytes from --ledger-history-bytes: must be at least 1/);
    expect(helpText()).toContain("--token-dialect vllm|sglang");
  });

  it("takes the delivery backlog's byte budget (default 256 MiB), refuses one under a byte, and --help states both backlog bounds", () => {
    expect(run({ argv: required })).toMatchObject({ deliveryQueueBytes: 256 * 1024 * 1024, deliveryConcurrency: 512 });
    expect(run({ argv: [...required, "--delivery-queue-bytes", "1048576"] }).deliveryQueueBytes).toBe(1048576);
    expect(run({ argv: required, env: { ROLLOUT_DELIVERY_QUEUE_BYTES: "5000" } }).deliveryQueueBytes).toBe(5000);
    const bad = errors({ argv: [...required, "--delivery-queue-bytes", "0"], env: { ROLLOUT_DELIVERY_CONCURRENCY: "1.5" } });
    expect(bad).toEqual([
      expect.stringMatching(/^deliveryConcurrency from ROLLOUT_DELIVERY_CONCURRENCY: must be a whole number/),
      expect.stringMatching(/^deliveryQueueBytes from --delivery-queue-bytes: must be at least 1/),
    ]);
    const help = helpText().replace(/\s+/g, " ");
    expect(help).toContain(`--delivery-queue-bytes BYTES "deliveryQueueBytes", ROLLOUT_DELIVERY_QUEUE_BYTES [default: ${256 * 1024 * 1024}]`);
    expect(help).toContain("holds 4 times this many unfinished");
    expect(help).toContain("a payload larger than this is still delivered (nothing more is polled while it is held)");
  });

  it("applies defaults and strips a trailing slash from the server", () => {
    const c = run({ argv: required });
    expect(c.server).toBe("https://rx.example.com");
    expect(c.facadePort).toBe(10086);
    expect(c.facadeHost).toBe("127.0.0.1");
    expect(c.facadeAnyPeer).toBe(false);
    expect(run({ argv: [...required, "--facade-any-peer", "true"] }).facadeAnyPeer).toBe(true);
    expect(c.trainerCommand).toBeNull();
    expect(c.logDir).toBe("/work/dir/rollout-agent/logs");
    expect(c.agentId).toMatch(/\/default$/);
  });

  it("takes flags over environment over the config file, and resolves file paths against the file", () => {
    const file = JSON.stringify({ server: "http://file:1", engine: "from-file", token: "t", facadePort: 1111, logDir: "logs", trainerCommand: ["python", "-m", "x", "{config}"] });
    const c = run({
      argv: ["--config", "conf/agent.json", "--facade-port=3333"],
      env: { ROLLOUT_FACADE_PORT: "2222", ROLLOUT_ENGINE: "from-env" },
      readFile: (p) => {
        expect(p).toBe("/work/dir/conf/agent.json");
        return file;
      },
    });
    expect(c.facadePort).toBe(3333);
    expect(c.engine).toBe("from-env");
    expect(c.server).toBe("http://file:1");
    expect(c.logDir).toBe("/work/dir/conf/logs");
    expect(c.trainerCommand).toEqual(["python", "-m", "x", "{config}"]);
  });

  it("reads the config file named by ROLLOUT_AGENT_CONFIG", () => {
    const c = run({ env: { ROLLOUT_AGENT_CONFIG: "/etc/agent.json" }, readFile: () => JSON.stringify({ server: "http://x", engine: "e", token: "t" }) });
    expect(c.engine).toBe("e");
  });

  it("splits a trainer command template like a shell", () => {
    const c = run({ argv: [...required, "--trainer-command", `ajet --conf "{config}" --name 'my run'`] });
    expect(c.trainerCommand).toEqual(["ajet", "--conf", "{config}", "--name", "my run"]);
  });

  it("refuses an engine's base URL as the server (what npm start prints as one), naming the origin to give instead", () => {
    const refusal = "give the exchange's origin (e.g. http://127.0.0.1:8787), not an engine's base URL (/e/<engine>): the engine is named with --engine";
    // With a token in the path too, which the error must not echo.
    for (const server of ["http://127.0.0.1:8787/e/default", "http://127.0.0.1:8787/e/default/", "http://127.0.0.1:8787/e/default/t/rx_trainer_x"]) {
      expect(errors({ argv: ["--server", server, "--engine", "default", "--token", "tok"] })).toEqual([`server from --server: ${refusal}`]);
    }
    expect(errors({ argv: ["--engine", "default"], env: { ROLLOUT_SERVER: "http://127.0.0.1:8787/e/default", ROLLOUT_TRAINER_TOKEN: "tok" } })).toEqual([`server from ROLLOUT_SERVER: ${refusal}`]);
    // An exchange behind a path prefix is still an origin the agent can use.
    expect(run({ argv: ["--server", "https://rx.example.com/exchange/", "--engine", "default", "--token", "tok"] }).server).toBe("https://rx.example.com/exchange");
  });

  it("refuses a URL it adds paths to that carries a query or fragment: the paths would be part of it", () => {
    // https://rx.example.com/?x=1 made every poll, ack and heartbeat go to the exchange's root,
    // /e/<engine>/... stuck in the query: an outage logged for ever instead of a refusal at start.
    for (const [flag, url] of [
      ["--server", "https://rx.example.com/?x=1"],
      ["--server", "https://rx.example.com/#e"],
      ["--inference-upstream", "http://127.0.0.1:8000/v1?key=1"],
    ] as const) {
      const r = resolveConfig(sources({ argv: [...required, flag, url] }));
      expect(r, `${flag} ${url}`).toMatchObject({ ok: false, errors: [expect.stringMatching(/must carry no query \(\?\.\.\.\) or fragment/)] });
    }
  });

  it("refuses a model list or a command that names nothing, from a flag, the environment or the file alike", () => {
    // "," became [] (the file's [] was refused), and ["", "--x"] a command whose first start failed on the host.
    expect(resolveConfig(sources({ argv: [...required, "--gateway-models", ","] }))).toMatchObject({ ok: false, errors: [expect.stringMatching(/must name at least one model/)] });
    expect(resolveConfig(sources({ argv: required, env: { ROLLOUT_GATEWAY_MODELS: " , " } }))).toMatchObject({ ok: false });
    expect(resolveConfig(sources({ argv: [...required, "--gateway-models", "a, b"] }))).toMatchObject({ ok: true, request: { config: { gatewayModels: ["a", "b"] } } });
    for (const key of ["trainerCommand", "rolloutCommand"]) {
      for (const argv of [[""], ["  ", "--x"], []]) {
        const r = resolveConfig(sources({ argv: [...required, "--config", "/c/agent.json"], readFile: () => JSON.stringify({ [key]: argv }) }));
        expect(r, `${key} ${JSON.stringify(argv)}`).toMatchObject({ ok: false, errors: [expect.stringMatching(/must name a program first/)] });
      }
    }
  });

  it("reports every problem at once, each with where it came from", () => {
    const errs = errors({ argv: ["--server", "ftp://x", "--engine", "Bad Name", "--facade-port", "70000", "--bogus", "--delivery-attempts", "0"], env: { ROLLOUT_COALESCE_MS: "soon" } });
    expect(errs).toEqual(
      expect.arrayContaining([
        "unknown option --bogus (see --help)",
        expect.stringMatching(/^server from --server: must start with http/),
        expect.stringMatching(/^engine from --engine: engine names are/),
        expect.stringMatching(/^token is not set: pass --token, set ROLLOUT_TRAINER_TOKEN/),
        expect.stringMatching(/^facadePort from --facade-port: must be 0-65535 \(got "70000"\)/),
        expect.stringMatching(/^coalesceMs from ROLLOUT_COALESCE_MS: .*\(got "soon"\)/),
        expect.stringMatching(/^deliveryAttempts from --delivery-attempts: must be at least 1/),
      ]),
    );
    expect(errs).toHaveLength(7);
  });

  it("refuses numbers that are not numbers: an empty flag, null, true or a list", () => {
    // Number() would make these 0 (no grace before SIGKILL, a random facade port), 1 and 5.
    expect(errors({ argv: [...required, "--stop-grace=", "--facade-port= "] })).toEqual([
      expect.stringMatching(/^stopGraceSeconds from --stop-grace: .*expected number.*\(got ""\)/),
      expect.stringMatching(/^facadePort from --facade-port: .*expected number.*\(got " "\)/),
    ]);
    const file = JSON.stringify({ server: "https://rx.example.com", engine: "default", token: "tok", stopGraceSeconds: null, facadePort: null, deliveryAttempts: true, logFiles: [5] });
    const errs = errors({ argv: ["--config", "agent.json"], readFile: () => file });
    expect(errs).toHaveLength(4);
    for (const key of ["stopGraceSeconds", "facadePort", "deliveryAttempts", "logFiles"]) expect(errs).toContainEqual(expect.stringMatching(new RegExp(`^${key} from "${key}" in .*expected number`)));
    expect(run({ argv: [...required, "--stop-grace", " 2.5 "], env: { ROLLOUT_FACADE_PORT: "10087" } })).toMatchObject({ stopGraceSeconds: 2.5, facadePort: 10087 });
  });

  it("never echoes a secret in an error", () => {
    const errs = errors({ argv: ["--server", "http://x", "--engine", "e", "--token="] });
    expect(errs.join("\n")).toContain("token from --token: must not be empty");
    expect(errs.join("\n")).not.toContain('got ""');
  });

  it("explains a missing, unreadable or malformed config file", () => {
    expect(errors({ argv: ["--config", "nope.json"] })[0]).toBe("config file /work/dir/nope.json does not exist");
    expect(errors({ argv: ["--config", "a.json"], readFile: () => "{ not json" })[0]).toMatch(/^config file \/work\/dir\/a.json is not valid JSON/);
    expect(errors({ argv: ["--config", "a.json"], readFile: () => "[1]" })[0]).toMatch(/must hold one JSON object of settings/);
    expect(
      errors({
        argv: ["--config", "a.json"],
        readFile: () => {
          throw Object.assign(new Error("EACCES: permission denied"), { code: "EACCES" });
        },
      })[0],
    ).toMatch(/^cannot read config file \/work\/dir\/a.json: EACCES/);
  });

  it("names unknown config-file settings and suggests the right spelling", () => {
    const errs = errors({ argv: ["--config", "a.json"], readFile: () => JSON.stringify({ server: "http://x", engine: "e", token: "t", facade_port: 1, colour: "red" }) });
    expect(errs).toContain('/work/dir/a.json: unknown setting "facade_port" (did you mean "facadePort"?)');
    expect(errs.find((e) => e.includes('"colour"'))).toMatch(/known settings: server, engine/);
  });

  it("rejects flags without values, stray arguments and bad templates", () => {
    expect(errors({ argv: [...required, "--engine"] })).toContain("--engine needs a value");
    expect(errors({ argv: [...required, "start"] })[0]).toMatch(/^unexpected argument "start"/);
    expect(errors({ argv: [...required, "--trainer-command", "ajet 'unclosed"] })).toEqual(["trainerCommand: the command has an unclosed ' quote"]);
    expect(errors({ argv: [...required, "--trainer-command", "ajet {cfg}"] })[0]).toMatch(/^trainerCommand: unknown placeholder \{cfg\}/);
  });

  it("answers --help, --version and --print-config", () => {
    expect(resolveConfig(sources({ argv: ["--bogus", "--help"] }))).toEqual({ ok: true, request: { kind: "help" } });
    expect(resolveConfig(sources({ argv: ["--version"] }))).toEqual({ ok: true, request: { kind: "version" } });
    const r = resolveConfig(sources({ argv: [...required, "--print-config"] }));
    expect(r.ok && r.request.kind).toBe("print-config");
    if (r.ok && r.request.kind === "print-config") expect(redactedConfig(r.request.config).token).toBe("***");
  });

  it("prints a URL's password as ***, as it prints the token (its output is pasted into issues and CI logs)", () => {
    const password = "p4ss%2Fw0rd";
    const r = resolveConfig(sources({ argv: [...required, "--inference-upstream", `http://trainer:${password}@10.0.0.5:8000/v1`, "--inference-admin-url", `http://trainer:${password}@10.0.0.5:8000`, "--print-config"] }));
    if (!r.ok || r.request.kind !== "print-config") throw new Error("expected print-config");
    const printed = redactedConfig(r.request.config);
    expect(printed).toMatchObject({ token: "***", inferenceUpstream: "http://trainer:***@10.0.0.5:8000/v1", inferenceAdminUrl: "http://trainer:***@10.0.0.5:8000/" });
    expect(JSON.stringify(printed)).not.toContain(password);
    // The config the agent runs with keeps it.
    expect(r.request.config.inferenceUpstream).toBe(`http://trainer:${password}@10.0.0.5:8000/v1`);
  });
});

describe("--help", () => {
  it("documents every setting with its flag, variable and default", () => {
    const text = helpText();
    for (const key of OPTION_KEYS) {
      const spec = OPTIONS[key];
      expect(text).toContain(spec.flag);
      expect(text).toContain(spec.env);
      expect(text).toContain(`"${key}"`);
    }
    expect(text).toContain("[default: 10086]");
    expect(text).toContain(`${RUNS_CONFIG_ENV}=FILE`);
  });
});

describe("command templates", () => {
  it("handles quotes, escapes and empty words", () => {
    expect(splitCommand(`a "b c" 'd e' f\\ g "h\\"i" ''`)).toEqual(["a", "b c", "d e", "f g", 'h"i', ""]);
    expect(() => splitCommand("   ")).toThrow(TemplateError);
    expect(() => splitCommand("a \\")).toThrow("lone backslash");
  });

  it("takes a backslash-newline as a shell does: a command written over several lines, no stray newline argument", () => {
    expect(splitCommand("ajet \\\n  --conf {config}")).toEqual(["ajet", "--conf", "{config}"]);
    expect(splitCommand('ajet "--name=a\\\nb"')).toEqual(["ajet", "--name=ab"]);
    expect(splitCommand("ajet --name=a\\\nb")).toEqual(["ajet", "--name=ab"]);
    const r = resolveConfig(sources({ argv: required, env: { ROLLOUT_TRAINER_COMMAND: "ajet \\\n  --conf {config}" } }));
    expect(r.ok && r.request.kind === "run" ? r.request.config.trainerCommand : null).toEqual(["ajet", "--conf", "{config}"]);
  });

  it("fills placeholders within words", () => {
    expect(expandCommand(["ajet", "--conf={config}", "{engine}"], { config: "/s/c.yaml", engine: "e1" })).toEqual(["ajet", "--conf=/s/c.yaml", "e1"]);
  });
});
