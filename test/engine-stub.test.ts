/**
 * An engine's placement reaches the Durable Object namespace: its jurisdiction picks the
 * namespace its object's id comes from, and its location hint goes with every get(). workerd
 * implements no jurisdictions and ignores location hints, so the real binding cannot show
 * either: the namespace here is a stand-in that records each call and hands the rest to the
 * real binding (engine-stub.ts is the code under test, the binding is not).
 */
import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import type { EngineObject } from "../src/engine/engine-object";
import { cachedEngineStub, engineStub, placedEngineStub } from "../src/http/engine-stub";
import { createEngine } from "./support/harness";

type Call =
  | { on: string; call: "jurisdiction"; jurisdiction: string }
  | { on: string; call: "idFromName"; name: string }
  | { on: string; call: "get"; id: string; options: DurableObjectNamespaceGetDurableObjectOptions | undefined };

/**
 * A namespace that records its calls. Each namespace derives ids from its own label, so an id
 * tells which namespace made it. `jurisdictions` says what jurisdiction() does: give a
 * namespace of its own, throw as workerd's real binding does, or throw this error.
 */
function recordingNamespace(calls: Call[], jurisdictions: "confined" | "workerd" | Error, on = "top"): DurableObjectNamespace<EngineObject> {
  const real = env.ENGINE;
  const ns = {
    jurisdiction(j: DurableObjectJurisdiction) {
      calls.push({ on, call: "jurisdiction", jurisdiction: j });
      if (jurisdictions instanceof Error) throw jurisdictions;
      if (jurisdictions === "workerd") return real.jurisdiction(j);
      return recordingNamespace(calls, jurisdictions, `jurisdiction ${j}`);
    },
    idFromName(name: string) {
      calls.push({ on, call: "idFromName", name });
      return real.idFromName(`${on}/${name}`);
    },
    get(id: DurableObjectId, options?: DurableObjectNamespaceGetDurableObjectOptions) {
      calls.push({ on, call: "get", id: id.toString(), options });
      return real.get(id, options);
    },
  };
  return ns as unknown as DurableObjectNamespace<EngineObject>;
}

const idIn = (namespace: string, name: string) => env.ENGINE.idFromName(`${namespace}/${name}`).toString();

describe("an engine's placement reaches the Durable Object namespace", () => {
  it("takes the id from the jurisdiction's namespace and passes the location hint to get(), also from the kept route", () => {
    const calls: Call[] = [];
    const ENGINE = recordingNamespace(calls, "confined");
    const stub = placedEngineStub({ ENGINE }, { name: "eu-engine", jurisdiction: "eu", locationHint: "weur" });
    const id = idIn("jurisdiction eu", "eu-engine");
    expect(stub.id.toString()).toBe(id);
    expect(calls).toEqual([
      { on: "top", call: "jurisdiction", jurisdiction: "eu" },
      { on: "jurisdiction eu", call: "idFromName", name: "eu-engine" },
      { on: "top", call: "get", id, options: { locationHint: "weur" } },
    ]);
    // The kept route: no new id, the same hint.
    calls.length = 0;
    expect(cachedEngineStub({ ENGINE }, "eu-engine")?.id.toString()).toBe(id);
    expect(calls).toEqual([{ on: "top", call: "get", id, options: { locationHint: "weur" } }]);
  });

  it("uses the namespace itself and no options for an engine placed nowhere", () => {
    const calls: Call[] = [];
    const ENGINE = recordingNamespace(calls, "confined");
    placedEngineStub({ ENGINE }, { name: "anywhere", jurisdiction: null, locationHint: null });
    expect(calls).toEqual([
      { on: "top", call: "idFromName", name: "anywhere" },
      { on: "top", call: "get", id: idIn("top", "anywhere"), options: undefined },
    ]);
  });

  it("routes by the placement in the engine's D1 row", async () => {
    const e = await createEngine("placed", { location_hint: "enam", jurisdiction: "fedramp" });
    const calls: Call[] = [];
    const stub = await engineStub({ ENGINE: recordingNamespace(calls, "confined"), DB: env.DB }, e.name);
    const id = idIn("jurisdiction fedramp", e.name);
    expect(stub?.id.toString()).toBe(id);
    expect(calls).toEqual([
      { on: "top", call: "jurisdiction", jurisdiction: "fedramp" },
      { on: "jurisdiction fedramp", call: "idFromName", name: e.name },
      { on: "top", call: "get", id, options: { locationHint: "enam" } },
    ]);
  });

  it("falls back to the one namespace only where the runtime has no jurisdictions, with a warning", () => {
    const calls: Call[] = [];
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      const stub = placedEngineStub({ ENGINE: recordingNamespace(calls, "workerd") }, { name: "local-eu", jurisdiction: "eu", locationHint: "weur" });
      expect(stub.id.toString()).toBe(idIn("top", "local-eu"));
      expect(calls.map((c) => [c.on, c.call])).toEqual([
        ["top", "jurisdiction"],
        ["top", "idFromName"],
        ["top", "get"],
      ]);
      expect(warn).toHaveBeenCalledWith(expect.stringMatching(/^engine 'local-eu': this runtime has no jurisdictions .*not confined to 'eu'$/));
    } finally {
      warn.mockRestore();
    }
    // Any other failure of jurisdiction() stands: an engine must not end up outside its jurisdiction.
    const broken = recordingNamespace([], new Error("jurisdiction unavailable"));
    expect(() => placedEngineStub({ ENGINE: broken }, { name: "x", jurisdiction: "eu", locationHint: null })).toThrow("jurisdiction unavailable");
  });
});
