/**
 * The runners' ZeroMQ addresses stay with the trainer and the admin (docs/security.md, "What is
 * never shown to whom"), also where the agent's own words name them: a result or context reset
 * it could not hand over is reported as "runner at tcp://... did not ack" (runner-link.ts), kept
 * as said, and shown in the overview every role reads (`undeliverable[].detail`,
 * `refusals[].detail`). Other roles read the words with the address left out.
 */
import { describe, expect, it } from "vitest";
import { createEngine, endBody, raw, rollingWith } from "./support/harness";

const ADDR = "tcp://10.0.0.1:";

describe("a runner's ZeroMQ address in the agent's words", () => {
  it("is not in the overview a viewer or client reads after the agent reports a result or reset undeliverable", async () => {
    const e = await createEngine("zmq-leak");
    const [ep0] = await rollingWith(e, 2, { zmq: true });
    const client = e.as("client");
    const trainer = e.as("trainer");

    // One result ended and not delivered, as the agent words it (runner-link.ts).
    const c = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    expect(c.episode_uuid).toBe(ep0);
    await client.endEpisode(endBody("c", c.episode_uuid, 1));
    // One claim given back: its runner gets a context reset, which the agent cannot deliver either.
    const d = await client.claimEpisode({ client_uuid: "d", discard_episode_timeout: 60 });
    await client.abortEpisode({ client_uuid: "d", episode_uuid: d.episode_uuid });
    const { commands } = await trainer.pollCommands();
    expect(commands.map((x) => x.body.kind).sort()).toEqual(["deliver", "reset"]);
    for (const cmd of commands) {
      const addr = (cmd.body as { zmq_listen_result_addr: string }).zmq_listen_result_addr;
      await trainer.ackCommand({ seq: cmd.seq, ok: false, detail: `runner at ${addr} did not ack in 3 attempts of 30 s each (no ack within 30 s); it is gone, or it already took this message and stopped listening` });
    }

    // The view the docs name blanks the addresses for these roles (this holds)...
    for (const role of ["viewer", "client"] as const) {
      const buf = await raw(`/e/${e.name}/get_episode_buffer`, { token: e.tokens[role], body: "{}" });
      expect(buf.status).toBe(200);
      expect(buf.text).not.toContain(ADDR);
    }
    // ...and so does the overview, which keeps the agent's words.
    for (const role of ["viewer", "client", "operator"] as const) {
      const o = await raw(`/e/${e.name}/overview`, { token: e.tokens[role] });
      expect(o.status).toBe(200);
      const shown = [...o.text.matchAll(/tcp:\/\/[0-9.:]+/g)].map((m) => m[0]);
      expect({ role, addresses_in_overview: shown }).toEqual({ role, addresses_in_overview: [] });
      expect((await e.as(role).overview()).undeliverable[0]?.detail).toMatch(/^runner at <runner address> did not ack in 3 attempts/);
    }
    // The trainer reads them as the agent said them.
    const own = (await trainer.overview()).undeliverable[0]?.detail ?? "";
    expect(own).toMatch(new RegExp(`^runner at ${ADDR.replace(/[.]/g, "\\.")}\\d+ did not ack`));
  });

  it("is left out also when it is no ZeroMQ URL at all, as the agent refuses it by name (\"10.0.0.7:5555\")", async () => {
    const e = await createEngine("zmq-leak-bare");
    const trainer = e.as("trainer");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 0 });
    const runner = '10.0.0.7:5555 "x"';
    expect((await trainer.registerEpisode({ episode_uuid: "ep-0", openai_base_url: "http://trainer.internal:8000/v1", openai_api_key: "sk-x", zmq_listen_result_addr: runner })).success).toBe(true);
    const c = await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    await e.as("client").endEpisode(endBody("c", c.episode_uuid, 1));
    const deliver = (await trainer.pollCommands()).commands.find((x) => x.body.kind === "deliver")!;
    // The agent's words for such an address (local-agent/src/runner-link.ts).
    await trainer.ackCommand({ seq: deliver.seq, ok: false, detail: `"${runner}" is not a ZeroMQ address (expected tcp://host:port or ipc:///path)` });
    expect((await trainer.overview()).undeliverable[0]?.detail).toContain(runner);
    for (const role of ["viewer", "client", "operator"] as const) {
      expect((await e.as(role).overview()).undeliverable[0]?.detail).toBe('"<runner address>" is not a ZeroMQ address (expected <runner address> or <runner address>)');
    }
  });
});
