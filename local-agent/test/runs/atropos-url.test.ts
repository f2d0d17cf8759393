/**
 * A run's rollout server is the engine's own Atropos API: the exchange locks the config's URL
 * without a token, and the agent writes it with its token into the config file on the host and
 * gives it to the run's processes (ROLLOUT_ATROPOS_URL), so no run-api is needed. The token
 * stays out of their command lines, which every user of the host can read.
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { realClock } from "../../src/clock";
import { RunSupervisor } from "../../src/runs/run-supervisor";
import { atroposUrl, hideToken, withAtroposUrl } from "../../src/runs/atropos-url";
import { MemoryLogger } from "../support/logger";
import { tempDir } from "../support/temp";
import { waitUntil } from "../support/wait";
import { parseRunsConfig } from "../../src/runs/runs-config";
import { RecordingReporter, proc, runsConfig, startCommand } from "./support";

const URL_WITH_TOKEN = atroposUrl("http://10.0.0.5:8787/e/eng-1", "tok/en");

describe("the engine's Atropos URL in a run", () => {
  it("puts the agent's token into the engine's own tokenless Atropos URLs, whatever origin they name, and leaves others", () => {
    expect(URL_WITH_TOKEN).toBe("http://10.0.0.5:8787/e/eng-1/t/tok%2Fen/atropos");
    const yaml = [
      "env:",
      '  rollout_server_url: "https://exchange.example/e/eng-1/atropos"',
      '  other_url: "https://exchange.example/e/eng-10/atropos"',
      '  mine_with_token: "https://exchange.example/e/eng-1/t/x/atropos"',
      "trainer:",
      "  atropos_url: http://127.0.0.1:8787/e/eng-1/atropos",
      '  api: "http://localhost:8000"',
      "",
    ].join("\n");
    expect(withAtroposUrl(yaml, "eng-1", URL_WITH_TOKEN)).toBe(
      [
        "env:",
        `  rollout_server_url: "${URL_WITH_TOKEN}"`,
        '  other_url: "https://exchange.example/e/eng-10/atropos"',
        '  mine_with_token: "https://exchange.example/e/eng-1/t/x/atropos"',
        "trainer:",
        `  atropos_url: ${URL_WITH_TOKEN}`,
        '  api: "http://localhost:8000"',
        "",
      ].join("\n"),
    );
  });

  it("puts it only where the engine's URL is a whole value: not into another host's URL that names it (an operator edits the config)", () => {
    const yaml = [
      "env:",
      '  wandb_base_url: "https://collector.example/hook?next=https://x/e/eng-1/atropos"',
      "  data_url: https://collector.example/p/http://x/e/eng-1/atropos",
      "  note: 'see https://x/e/eng-1/atropos'",
      "urls:",
      "  - https://x/e/eng-1/atropos # the exchange",
      "  - 'https://x/e/eng-1/atropos'\r",
      "",
    ].join("\n");
    expect(withAtroposUrl(yaml, "eng-1", URL_WITH_TOKEN)).toBe(
      [
        "env:",
        '  wandb_base_url: "https://collector.example/hook?next=https://x/e/eng-1/atropos"',
        "  data_url: https://collector.example/p/http://x/e/eng-1/atropos",
        "  note: 'see https://x/e/eng-1/atropos'",
        "urls:",
        `  - ${URL_WITH_TOKEN} # the exchange`,
        `  - '${URL_WITH_TOKEN}'\r`,
        "",
      ].join("\n"),
    );
  });

  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const c of cleanups.splice(0)) c();
  });

  it("writes it into the run's config file and gives it to the run's processes in their environment", async () => {
    const state = tempDir();
    const stop = new AbortController();
    cleanups.push(() => {
      stop.abort();
      state.remove();
    });
    const config = runsConfig({ processes: [proc("env", "--say-env ROLLOUT_ATROPOS_URL --exit-after 0")] }, state.path);
    const reporter = new RecordingReporter();
    const sup = new RunSupervisor({ config, reporter, clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: stop.signal, atropos: { engine: "eng-1", url: URL_WITH_TOKEN } });
    const cmd = { ...startCommand("run_atropos1"), config_yaml: 'env:\n  rollout_server_url: "https://exchange.example/e/eng-1/atropos"\n' };
    expect((await sup.start(cmd))?.ok).toBe(true);
    await sup.settled();
    const dir = join(config.runsDir, "run_atropos1");
    expect(readFileSync(join(dir, "config.yaml"), "utf8")).toBe(`env:\n  rollout_server_url: "${URL_WITH_TOKEN}"\n`);
    await waitUntil(() => readFileSync(join(dir, "env.log"), "utf8").includes(URL_WITH_TOKEN), "the URL in the process's output");
    // What the exchange is told (its run views are read by viewer and client tokens) carries the
    // URL as the exchange shows it, without the token, in the command and in the log's tail.
    await sup.settled();
    const reported = reporter.reports.flatMap((r) => r.processes ?? []);
    expect(reported.some((p) => (p.log_tail ?? "").includes("http://10.0.0.5:8787/e/eng-1/atropos"))).toBe(true);
    for (const p of reported) for (const text of [p.command ?? "", p.log_tail ?? ""]) expect(text).not.toMatch(/tok%2Fen|tok\/en/);
  });

  it("keeps it out of the run processes' command lines (ps), and its files owner-only", async () => {
    const state = tempDir();
    const stop = new AbortController();
    const config = runsConfig({ processes: [proc("env", "--listen 0 --exit-after 30")] }, state.path);
    const sup = new RunSupervisor({ config, reporter: new RecordingReporter(), clock: realClock, logger: new MemoryLogger(), agentId: "host-1", stop: stop.signal, atropos: { engine: "eng-1", url: URL_WITH_TOKEN } });
    cleanups.push(() => {
      stop.abort();
      state.remove();
    });
    const cmd = { ...startCommand("run_atropos2"), config_yaml: 'env:\n  rollout_server_url: "https://exchange.example/e/eng-1/atropos"\n' };
    expect((await sup.start(cmd))?.ok).toBe(true);
    const dir = join(config.runsDir, "run_atropos2");
    await waitUntil(() => existsSync(join(dir, "run.json")) && readFileSync(join(dir, "env.log"), "utf8").includes("env up"), "the run process to start");
    const pid = Number(JSON.parse(readFileSync(join(dir, "run.json"), "utf8")).processes[0].pid);
    // What `ps` shows every user of the host.
    expect(readFileSync(`/proc/${pid}/cmdline`, "utf8")).not.toMatch(/tok%2Fen|tok\/en/);
    const mode = (p: string): string => (statSync(p).mode & 0o777).toString(8);
    expect(readFileSync(join(dir, "config.yaml"), "utf8")).toContain(URL_WITH_TOKEN);
    expect({ runs: mode(config.runsDir), run: mode(dir), config: mode(join(dir, "config.yaml")), log: mode(join(dir, "env.log")), note: mode(join(dir, "run.json")) }).toEqual({ runs: "700", run: "700", config: "600", log: "600", note: "600" });
    await sup.stop("run_atropos2", "done");
  });

  it("refuses a runs config whose commands would carry it, {atropos_url}, saying where the URL is instead", () => {
    const parsed = parseRunsConfig({ processes: [{ name: "env", command: "python env.py serve --rollout-server {atropos_url}" }] }, "/", "/tmp/state");
    expect(parsed).toEqual({
      ok: false,
      errors: [
        "processes.0.command: {atropos_url} is refused: it would put the agent's trainer token in the command line, which every user of the host can read (ps); the process finds the URL in ROLLOUT_ATROPOS_URL and in its {config} file (rollout_server_url)",
      ],
    });
  });

  it("hides the token in whatever is reported, in the URL and on its own", () => {
    expect(hideToken(`go ${URL_WITH_TOKEN} now; token tok/en, tok%2Fen`, URL_WITH_TOKEN)).toBe("go http://10.0.0.5:8787/e/eng-1/atropos now; token ***, ***");
    expect(hideToken("nothing to hide", URL_WITH_TOKEN)).toBe("nothing to hide");
  });
});
