/**
 * Python writes an int of any size digit for digit, and a float with an integral value as 2.0;
 * the seed's server passed a client's workflow output to the runner as pydantic's
 * model_dump_json wrote it, so a 64-bit id, a time.time_ns() stamp or a seed in metadata arrived
 * as sent, and a float stayed a float. The Worker parsed the end with JSON.parse and the engine
 * wrote it again with JSON.stringify, so any integer above 2^53 reached the runner (and D1) as the
 * nearest double (1733212345678901234 as 1733212345678901200), and a metadata 2.0 as the int 2.
 * The end now carries its output written with the client's numbers (http/python-json.ts
 * exactNumbers).
 */
import { describe, expect, it } from "vitest";
import { env } from "cloudflare:workers";
import { exactNumbers } from "../src/http/python-json";
import { advance, createEngine, raw, rollingWith } from "./support/harness";

describe("numbers in free-form workflow output", () => {
  it("delivers a 64-bit integer in metadata to the runner digit for digit, as the seed's model_dump_json did", async () => {
    const e = await createEngine("bigint");
    await rollingWith(e, 1, { zmq: true });
    const client = `/e/${e.name}/t/${e.tokens.client}`;
    const trainer = `/e/${e.name}/t/${e.tokens.trainer}`;

    const claim = await raw(`${client}/claim_episode`, {
      body: '{"client_uuid": "c1", "episode_type": "train", "discard_episode_timeout": 240.0, "throttle_policy": null}',
    });
    expect(claim.status).toBe(200);
    expect(claim.json?.["episode_uuid"]).toBe("ep-0");

    // As httpx sends SwarmClient.end_episode's model_dump(): a Python int larger than 2^53 in metadata.
    const end = await raw(`${client}/end_episode`, {
      body:
        '{"client_uuid": "c1", "episode_uuid": "ep-0", "workflow_output": {"reward": 1.0, "is_success": true, ' +
        '"metadata": {"task_id": "t1", "trace_id": 1733212345678901234, "score": 2.0}, "log_metrics": {}}, "task_id": "t1"}',
    });
    expect(end.status).toBe(200);
    expect(end.json).toEqual({ success: true });

    // What the GPU host's agent hands the runner: the deliver command's payload, as text.
    const polled = await raw(`${trainer}/agent/commands`);
    expect(polled.status).toBe(200);
    const commands = (polled.json?.["commands"] ?? []) as { body: { kind: string; payload?: string } }[];
    const deliver = commands.find((c) => c.body.kind === "deliver");
    expect(deliver, "a deliver command for the ended episode").toBeDefined();
    const payload = deliver!.body.payload ?? "";
    expect(payload).toContain('"trace_id":1733212345678901234');
    expect(payload).toContain('"score":2.0');
    expect(payload).toContain('"reward":1.0');
    expect(JSON.parse(payload)).toMatchObject({ reward: 1, is_success: true, metadata: { task_id: "t1" } });
    // And the trajectory D1 keeps.
    await advance(e, 2000);
    const row = await env.DB.prepare("SELECT workflow_output FROM trajectories WHERE engine = ?").bind(e.name).first<{ workflow_output: string }>();
    expect(row?.workflow_output).toContain('"trace_id":1733212345678901234');
  });

  it("writes a value again with its integers, and its floats JSON.stringify would write as integers, as the text has them, and nothing else changed", () => {
    const text =
      '{"w": {"big": 1733212345678901234, "neg": -98765432109876543210, "safe": 9007199254740991, "f": 2.5, "e": 1e20, "s": "12345678901234567890",' +
      ' "two": 2.0, "big_float": 1e+16, "exp": 1.0e5, "neg_zero": -0.0, "small": 1e-05, "tenth": 0.1, "inf": 1e999}}';
    expect(exactNumbers(text, "w")).toBe(
      '{"big":1733212345678901234,"neg":-98765432109876543210,"safe":9007199254740991,"f":2.5,"e":1e20,"s":"12345678901234567890",' +
        '"two":2.0,"big_float":1e+16,"exp":1.0e5,"neg_zero":-0.0,"small":0.00001,"tenth":0.1,"inf":null}',
    );
    // Nothing JSON.stringify would change, as Python reads it: left to JSON.stringify.
    expect(exactNumbers('{"w": {"a": 12, "s": "x", "f": 2.5, "g": 2.05, "h": 1e-7}}', "w")).toBeNull();
    expect(exactNumbers('{"w": {"a": 12, "s": "2.0 is a version"}}', "w")).toBe('{"a":12,"s":"2.0 is a version"}');
    // Python's NaN is no JSON for this parse: written as usual.
    expect(exactNumbers('{"w": {"a": NaN, "b": 12345678901234567890}}', "w")).toBeNull();
    expect(exactNumbers('{"v": 12345678901234567890}', "w")).toBeNull();
  });
});
