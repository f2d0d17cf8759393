import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ChatRequestShape, envelopeRequestText, envelopeText, isChatRequest, isRelayEnvelope, RelayEnvelope } from "../src/protocol/relay";
import { isRecord } from "../src/protocol/record";

const meta = {
  endpoint: "/v1/chat/completions" as const,
  engine: "e1",
  // Strings that look like the request key must not fool the gateway's search.
  episode_uuid: 'ep "request": {',
  fence: 3,
  trainer_api_key: 'sk-"request":\\',
  trainer_base_url: "http://10.0.0.9:8000/v1",
  deadline_seconds: 600,
  call: {
    call_id: "c1",
    capture: "tokens" as const,
    client_uuid: 'client "request": [',
    task_id: "t1",
    weight_version: null,
    run: 2,
    admitted_at: 1_700_000_000_000,
  },
  request: null,
};

function gatewaySide(text: string): { env: RelayEnvelope; requestText: string | null } {
  const parsed = JSON.parse(text) as Record<string, unknown>;
  return { env: RelayEnvelope.parse(parsed), requestText: envelopeRequestText(text, parsed) };
}

describe("relay envelope layout", () => {
  it("carries the client's request text unchanged, and the gateway finds exactly that text", () => {
    const client = ' {"model":"tiny","request":{"request":1},"messages":[{"role":"user","content":"é \\u2028 \\"q\\" }"}],"top_k":20}\n';
    const text = envelopeText(meta, client);
    const { env, requestText } = gatewaySide(text);
    expect(requestText).toBe(client);
    expect(env).toEqual({ ...meta, request: JSON.parse(client) });
  });

  it("writes a null request as plain JSON, which the gateway does not slice", () => {
    const text = envelopeText(meta, null);
    expect(text).toBe(JSON.stringify(meta));
    expect(gatewaySide(text).requestText).toBeNull();
  });

  it("the gateway falls back to serializing when request is not the last field, or an object precedes it", () => {
    const request = { model: "tiny" };
    const notLast = JSON.stringify({ ...meta, request, zzz: "after" });
    expect(envelopeRequestText(notLast, JSON.parse(notLast) as Record<string, unknown>)).toBeNull();
    const objectBefore = `{"extra":{"request":{"model":"x"}},${JSON.stringify({ ...meta, request }).slice(1)}`;
    expect(envelopeRequestText(objectBefore, JSON.parse(objectBefore) as Record<string, unknown>)).toBeNull();
    // The ledger's call context is the one object allowed before the request, and only while flat and without a `request` key.
    for (const call of [{ ...meta.call, request: { model: "x" } }, { ...meta.call, nested: { a: 1 } }]) {
      const bent = JSON.stringify({ ...meta, call, request });
      expect(envelopeRequestText(bent, JSON.parse(bent) as Record<string, unknown>)).toBeNull();
    }
  });
});

describe("the relay's check of a request's shape", () => {
  const agree = (v: unknown): boolean => isChatRequest(v) === ChatRequestShape.safeParse(v).success;

  it("accepts exactly what ChatRequestShape accepts", () => {
    for (const v of [
      { model: "m" },
      { model: "m", stream: true, messages: [] },
      { model: "m", stream: false },
      { model: "" },
      { model: 3 },
      { model: "m", stream: "true" },
      { model: "m", stream: null },
      { stream: true },
      [{ model: "m" }],
      null,
      "m",
      JSON.parse('{"model":"m","__proto__":{"stream":1}}'),
      JSON.parse('{"__proto__":{"model":"m"}}'),
    ]) {
      expect(agree(v), JSON.stringify(v)).toBe(true);
    }
  });

  it("agrees with ChatRequestShape on arbitrary JSON", () => {
    const model = fc.oneof(fc.string(), fc.constant(""), fc.jsonValue());
    const stream = fc.oneof(fc.boolean(), fc.jsonValue());
    const body = fc.oneof(
      fc.jsonValue(),
      fc.record({ model, stream, messages: fc.jsonValue() }, { requiredKeys: [] }),
      fc.dictionary(fc.constantFrom("model", "stream", "messages", "__proto__", "tools"), fc.jsonValue()),
    );
    // Through JSON, as the relay sees a body.
    fc.assert(fc.property(body, (v) => agree(JSON.parse(JSON.stringify(v)))), { numRuns: 2000 });
  });
});

describe("the gateway's check of an envelope", () => {
  it("takes the Worker's envelopes as they are, without zod", () => {
    for (const v of [meta, { ...meta, request: { model: "m", messages: [] } }, { ...meta, call: undefined }, { ...meta, endpoint: "/v1/models" }]) {
      const env = JSON.parse(JSON.stringify(v)) as unknown;
      expect(isRelayEnvelope(env), JSON.stringify(v)).toBe(true);
      expect(RelayEnvelope.parse(env)).toEqual(env);
    }
  });

  it("never takes what RelayEnvelope refuses, or what zod would change", () => {
    // The Worker's envelope with a few of its fields, or its call context's, broken, left out or
    // added to (a key zod would strip).
    const text = fc.oneof(fc.string(), fc.constantFrom("", "\uD800", "x".repeat(65), "\uDC00a"));
    const value = fc.oneof(fc.jsonValue(), text, fc.constantFrom(1.5, -1, 0, 0.5, 2 ** 53, null, [], {}, undefined));
    const keys = [...Object.keys(meta), "extra"];
    const callKeys = [...Object.keys(meta.call), "extra"];
    const change = fc.tuple(fc.boolean(), fc.nat(), value);
    const envelope = fc.tuple(fc.array(change, { minLength: 0, maxLength: 3 }), fc.constantFrom(null, { model: "m" })).map(([changes, request]) => {
      const env: Record<string, unknown> = { ...meta, call: { ...meta.call }, request };
      for (const [inCall, k, v] of changes) {
        const call = env["call"];
        // Once the call context itself is replaced, its fields are no longer there to change.
        const target = inCall && isRecord(call) ? call : env;
        const names = target === env ? keys : callKeys;
        const key = names[k % names.length]!;
        // A copy: fast-check hands out the same `{}` and `[]` every time, and a change may put
        // one inside another (a cycle), or into the next run's envelope.
        if (v === undefined) delete target[key];
        else target[key] = structuredClone(v);
      }
      return env;
    });
    let taken = 0;
    fc.assert(
      fc.property(envelope, (v) => {
        const env = JSON.parse(JSON.stringify(v)) as unknown;
        if (!isRelayEnvelope(env)) return;
        taken++;
        expect(RelayEnvelope.parse(env)).toEqual(env);
      }),
      { numRuns: 5000 },
    );
    // Not a check that passes by taking nothing.
    expect(taken).toBeGreaterThan(100);
  });
});
