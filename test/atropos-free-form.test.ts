/**
 * A scored group's free-form fields come back from /latest_example and /batch as Atropos answers
 * them (json.dumps of what json.loads read): a float sent as 1.0 stays 1.0, and an int past 2^53
 * keeps its digits. JSON.parse then JSON.stringify wrote `{"temperature": 1.0}` as
 * `{"temperature":1}`, a Python int where the environment sent a float (src/atropos/free-form.ts).
 */
import { describe, expect, it } from "vitest";
import { exactFreeForm, memberSources } from "../src/atropos/free-form";
import { atropos, running } from "./support/atropos";
import { createEngine } from "./support/harness";

const GROUP =
  '{"tokens":[[1,2],[3,4]],"masks":[[1,1],[1,1]],"scores":[1.0,0.0],"env_id":0,' +
  '"generation_params":{"temperature":1.0,"top_p":0.5,"max_tokens":512,"seed":1733212345678901234},"group_overrides":{"scale":2.0},' +
  '"overrides":[{"w":1e+16},{"w":3}],' +
  '"messages":[[{"role":"user","content":"{\\"not\\": 1.0} \\u00e9","reward":1.0}],[{"role":"user","content":"yo","reward":0.25}]]}';

describe("Atropos's free-form fields", () => {
  it("answers them with the numbers as the environment wrote them, and the typed fields as Atropos writes floats", async () => {
    const e = await createEngine("atr-free");
    await running(e);
    const sent = await atropos(e, "client", "POST", "/scored_data", undefined, { rawBody: GROUP, headers: { "content-type": "application/json" } });
    expect(sent.json).toEqual({ status: "received" });
    const latest = (await atropos(e, "viewer", "GET", "/latest_example")).text;
    expect(latest).toContain('"generation_params":{"temperature":1.0,"top_p":0.5,"max_tokens":512,"seed":1733212345678901234}');
    expect(latest).toContain('"group_overrides":{"scale":2.0}');
    expect(latest).toContain('"overrides":[{"w":1e+16},{"w":3}]');
    expect(latest).toContain('"messages":[[{"role":"user","content":"{\\"not\\": 1.0} é","reward":1.0}],[{"role":"user","content":"yo","reward":0.25}]]');
    expect(latest).toContain('"scores":[1.0,0.0]');
    // The list route too, each group its own.
    const second = GROUP.replace('"scale":2.0', '"scale":3.0').replace("[[1,2],", "[[9,2],");
    expect((await atropos(e, "client", "POST", "/scored_data_list", undefined, { rawBody: `[${GROUP}, ${second}]`, headers: { "content-type": "application/json" } })).status).toBe(200);
    expect((await atropos(e, "viewer", "GET", "/latest_example")).text).toContain('"group_overrides":{"scale":3.0}');
    // A batch of 4 sequences: the first two groups, each written as sent.
    const batch = (await atropos(e, "trainer", "GET", "/batch")).text;
    expect(batch.match(/"generation_params":\{"temperature":1\.0,"top_p":0\.5,"max_tokens":512,"seed":1733212345678901234\}/g)).toHaveLength(2);
  });

  it("reads no source when no free-form field holds an integral number", () => {
    expect(exactFreeForm('{"generation_params":{"t":0.5}}', [{ generation_params: { t: 0.5 }, messages: [[{ role: "u", content: "1.0" }]] }])).toBeNull();
    expect(exactFreeForm('{"generation_params":{"t":1.0}}', [{ generation_params: { t: 1 } }])).toEqual([{ generation_params: '{"t":1.0}' }]);
    // Integral, and written as JSON.stringify writes it: nothing to keep.
    expect(exactFreeForm('{"generation_params":{"n":3}}', [{ generation_params: { n: 3 } }])).toEqual([{}]);
  });

  it("finds the members of the top objects, skipping strings and nested objects, the last of a key given twice", () => {
    const keys = new Set(["a", "b"]);
    expect(memberSources(' {"a" : [1, {"b": 2}] , "x": "}\\"{,", "b":{"a":1} } ', keys)).toEqual([{ a: "[1, {\"b\": 2}]", b: '{"a":1}' }]);
    expect(memberSources('[{"a":1},{"\\u0062":2.0,"b":3.0}]', keys)).toEqual([{ a: "1" }, { b: "3.0" }]);
  });
});
