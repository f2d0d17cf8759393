import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { migrateEngine } from "../src/engine/schema";
import { rewindSchema } from "./support/schema-rewind";
import { DEFAULT_ATROPOS_CONFIG, MAX_ATROPOS_BATCH_SIZE } from "../src/protocol/atropos";
import { atropos, ENV, group, gzipped, payloadBytes, REGISTRATION, running, tags } from "./support/atropos";
import { MAX_STORED_BYTES } from "../src/protocol/limits";
import { advance, createEngine, ORIGIN, reconnect, workerFetch } from "./support/harness";

describe("Atropos's API at /e/<engine>/atropos", () => {
  it("serves a trainer and an environment through the token in the URL, as Atropos's server does", async () => {
    const e = await createEngine("atr");
    expect((await atropos(e, "viewer", "GET", "/")).json).toEqual({ message: "AtroposLib API" });
    expect((await atropos(e, "viewer", "GET", "/info")).json).toEqual({ batch_size: -1, max_token_len: -1 });
    expect((await atropos(e, "viewer", "GET", "/wandb_info")).json).toEqual({ group: null, project: null });
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ status: "error", message: "Trainer not registered. Call /register first.", batch: [] });
    const reg = await atropos(e, "trainer", "POST", "/register", REGISTRATION);
    // uuid4().int: a 128-bit integer as a JSON number.
    expect(reg.text).toMatch(/^\{"uuid":\d{30,39}\}$/);
    expect((await atropos(e, "client", "POST", "/register-env", ENV)).json).toEqual({ status: "wait for trainer to start" });
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
    const reg1 = await atropos(e, "client", "POST", "/register-env", ENV);
    expect(reg1.json).toEqual({ status: "success", env_id: 0, wandb_name: "gsm8k_0", checkpoint_dir: "/ckpt", starting_step: 0, checkpoint_interval: 10, num_steps: 100 });
    expect((await atropos(e, "client", "POST", "/register-env", ENV)).json).toMatchObject({ env_id: 1, wandb_name: "gsm8k_1" });
    expect((await atropos(e, "viewer", "GET", "/info")).json).toEqual({ batch_size: 4, max_token_len: 2048 });
    expect((await atropos(e, "viewer", "GET", "/wandb_info")).json).toEqual({ group: "g", project: "p" });

    expect((await atropos(e, "client", "POST", "/scored_data", group(1, 2))).json).toEqual({ status: "received" });
    expect((await atropos(e, "viewer", "GET", "/status")).json).toEqual({ current_step: 0, queue_size: 1, stalls: [] });
    expect((await atropos(e, "client", "POST", "/scored_data_list", [group(2, 2), group(3, 2, 1)])).json).toEqual({ status: "received", groups_processed: 2 });
    const batch = await atropos(e, "trainer", "GET", "/batch");
    expect(tags(batch.json.batch)).toEqual([1, 2]);
    // Every field of _scored_data_to_dict, in its order; floats as Python writes them.
    expect(Object.keys(batch.json.batch[0])).toEqual(["tokens", "masks", "scores", "advantages", "ref_logprobs", "messages", "generation_params", "inference_logprobs", "overrides", "group_overrides", "images", "env_id", "distill_token_ids", "distill_logprobs"]);
    expect(batch.text).toContain('"scores":[1.0,0.0]');
    expect((await atropos(e, "viewer", "GET", "/status")).json).toEqual({ current_step: 1, queue_size: 1, stalls: [] });
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json).toMatchObject({ tokens: [[3, 0], [3, 1]], env_id: 1 });
    // With a bearer header instead of the token in the URL.
    expect((await atropos(e, "client", "POST", "/scored_data", group(4, 2, 1), { bearer: true })).json).toEqual({ status: "received" });
    expect(tags((await atropos(e, "trainer", "GET", "/batch", undefined, { bearer: true })).json.batch)).toEqual([3, 4]);
  });

  it("cuts every batch the queue holds at once, hands the newest out first and counts a step for each, as Atropos does", async () => {
    const e = await createEngine("atr");
    await running(e);
    for (let i = 1; i <= 6; i++) await atropos(e, "client", "POST", "/scored_data", group(i, 2));
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([5, 6]);
    expect((await atropos(e, "viewer", "GET", "/status")).json).toMatchObject({ current_step: 3, queue_size: 0 });
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([3, 4]);
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([1, 2]);
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
  });

  it("packs groups of different sizes into packs of the largest, as grab_exact_from_heterogeneous_queue does", async () => {
    const e = await createEngine("atr");
    await running(e, [{ ...ENV, group_size: 1 }, { ...ENV, desired_name: "b", group_size: 2 }], { ...REGISTRATION, batch_size: 4 });
    // Sizes 2, 1, 2, 1: packs of 2 are [g1], [g2 g4], [g3]; ready in the order g1, g3, g4.
    await atropos(e, "client", "POST", "/scored_data", group(1, 2, 1));
    await atropos(e, "client", "POST", "/scored_data", group(2, 1, 0));
    await atropos(e, "client", "POST", "/scored_data", group(3, 2, 1));
    await atropos(e, "client", "POST", "/scored_data", group(4, 1, 0));
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([1, 3]);
    expect((await atropos(e, "viewer", "GET", "/status")).json).toMatchObject({ current_step: 1, queue_size: 2 });
  });

  it("gives an env with min_batch_allocation its share first, as grab_batch_with_minimum_allocations does, and reports when it holds batches back", async () => {
    const e = await createEngine("atr");
    const [a, b] = await running(e, [{ ...ENV, min_batch_allocation: 0.5 }, { ...ENV, desired_name: "b" }], { ...REGISTRATION, batch_size: 8 });
    for (const tag of [1, 2, 3, 4]) await atropos(e, "client", "POST", "/scored_data", group(tag, 2, b!));
    await atropos(e, "client", "POST", "/scored_data", group(5, 2, a!));
    // a's group first (its minimum is 4 sequences; it has 2), then the queue's oldest to fill the batch.
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([5, 1, 2, 3]);
    // a has nothing queued now: no batch is cut, and /status says why.
    for (const tag of [6, 7, 8]) await atropos(e, "client", "POST", "/scored_data", group(tag, 2, b!));
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
    const status = (await atropos(e, "viewer", "GET", "/status")).json;
    expect(status).toMatchObject({ current_step: 1, queue_size: 4 });
    expect(status.stalls).toEqual([{ kind: "minimum_unmet", groups: 4, detail: expect.stringContaining("env 0 (gsm8k_0) has a min_batch_allocation") }]);
  });

  it("cuts no batch for a batch_size of 0, where Atropos's /batch loops for ever on empty ones", async () => {
    // pydantic takes 0; with an env's minimum, Atropos's packing returns [] and /batch never ends.
    const e = await createEngine("atr");
    const [a] = await running(e, [{ ...ENV, min_batch_allocation: 0.5 }], { ...REGISTRATION, batch_size: 0 });
    expect((await atropos(e, "client", "POST", "/scored_data", group(1, 2, a!))).json).toEqual({ status: "received" });
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
    expect((await atropos(e, "viewer", "GET", "/status")).json).toMatchObject({ current_step: 0, queue_size: 1 });
  });

  it("buffers an env's groups of another size until some make its group size, as _process_scored_data does", async () => {
    const e = await createEngine("atr");
    await running(e, [{ ...ENV, group_size: 4 }], { ...REGISTRATION, batch_size: 4 });
    expect((await atropos(e, "client", "POST", "/scored_data", group(1, 3))).json).toEqual({ status: "buffered", buffer_size: 3 });
    expect((await atropos(e, "client", "POST", "/scored_data", group(2, 2))).json).toEqual({ status: "buffered", buffer_size: 5 });
    expect((await atropos(e, "viewer", "GET", "/status")).json).toMatchObject({ queue_size: 0 });
    const list = await atropos(e, "client", "POST", "/scored_data_list", [group(3, 2), group(4, 1)]);
    // [3, 2, 2] has no FIFO sum of 4; 2 + 2 is found; then 3 + 1.
    expect(list.json).toEqual({ status: "received", groups_processed: 2, buffered: 2, last_buffer_size: 0 });
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json.tokens[0][0]).toBe(4);
    // Queued in the order they left the buffer: sizes 2, 2, 3, 1. The largest is 3, which 2 does
    // not divide: Atropos never packs those two, and cuts no batch of 4. Here that is reported.
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
    const status = await atropos(e, "viewer", "GET", "/status");
    expect(status.json).toMatchObject({ current_step: 0, queue_size: 4 });
    expect(status.json.stalls).toEqual([{ kind: "never_packed", groups: 2, detail: expect.stringContaining("2 queued group(s) of 2 sequences") }]);
  });
});

describe("Atropos's API: inputs as FastAPI takes them", () => {
  it("coerces as pydantic's lax mode does and answers its 422 bodies, storing nothing", async () => {
    const e = await createEngine("atr");
    await running(e);
    // "4" and 4.0 are ints; True is 1.0 as a score.
    const coerced = await atropos(e, "client", "POST", "/scored_data", { tokens: [["4", 1.0]], masks: [[1, 1]], scores: [true], env_id: null, unknown_field: 1 });
    expect(coerced.json).toEqual({ status: "received" });
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json).toMatchObject({ tokens: [[4, 1]], scores: [1] });
    const before = (await atropos(e, "viewer", "GET", "/status")).json;

    const missing = await atropos(e, "client", "POST", "/scored_data", { tokens: [[1]], scores: [1] });
    expect(missing.status).toBe(422);
    expect(missing.json).toEqual({ detail: [{ type: "missing", loc: ["body", "masks"], msg: "Field required", input: { tokens: [[1]], scores: [1] } }] });
    const fractional = await atropos(e, "client", "POST", "/scored_data", { tokens: [[1, 2.5]], masks: [[1, 1]], scores: ["x"] });
    expect(fractional.json.detail).toEqual([
      { type: "int_from_float", loc: ["body", "tokens", 0, 1], msg: "Input should be a valid integer, got a number with a fractional part", input: 2.5 },
      { type: "float_parsing", loc: ["body", "scores", 0], msg: "Input should be a valid number, unable to parse string as a number", input: "x" },
    ]);
    // Ints a JSON number cannot hold exactly would be stored as other ints: refused as a bound.
    const huge = await atropos(e, "client", "POST", "/scored_data", undefined, { rawBody: '{"tokens": [[-1e308, 12345678901234567890]], "masks": [[9007199254740991, "9007199254740993"]], "scores": [1e308]}', headers: { "content-type": "application/json" } });
    expect(huge.status).toBe(422);
    expect(huge.json.detail).toEqual([
      { type: "greater_than_equal", loc: ["body", "tokens", 0, 0], msg: "Input should be greater than or equal to -9007199254740991", input: -1e308 },
      { type: "less_than_equal", loc: ["body", "masks", 0, 1], msg: "Input should be less than or equal to 9007199254740991", input: "9007199254740993" },
    ]);
    const infinite = await atropos(e, "client", "POST", "/scored_data", undefined, { rawBody: '{"tokens": [[1]], "masks": [[1]], "scores": [1e999]}', headers: { "content-type": "application/json" } });
    expect(infinite.json.detail).toEqual([{ type: "finite_number", loc: ["body", "scores", 0], msg: "Input should be a finite number", input: null }]);
    const messages = await atropos(e, "client", "POST", "/scored_data", { ...group(9, 1), messages: [[{ role: "user" }]] });
    expect(messages.json.detail[0]).toMatchObject({ type: "value_error", loc: ["body", "messages"], msg: "Value error, Message must have 'role' and 'content' fields" });
    expect((await atropos(e, "client", "POST", "/scored_data", [1, 2])).json.detail[0]).toMatchObject({ type: "model_attributes_type", loc: ["body"] });
    expect((await atropos(e, "client", "POST", "/scored_data_list", { a: 1 })).json.detail[0]).toMatchObject({ type: "list_type", loc: ["body"], msg: "Input should be a valid list" });
    expect((await atropos(e, "client", "POST", "/scored_data_list", [group(9, 2), 7])).json.detail[0]).toMatchObject({ type: "model_attributes_type", loc: ["body", 1] });
    const notJson = await atropos(e, "client", "POST", "/register-env", undefined, { rawBody: "{nope", headers: { "content-type": "application/json" } });
    expect(notJson.status).toBe(422);
    expect(notJson.json.detail[0]).toMatchObject({ type: "json_invalid", msg: "JSON decode error" });
    expect((await atropos(e, "client", "POST", "/register-env")).json).toEqual({ detail: [{ type: "missing", loc: ["body"], msg: "Field required", input: null }] });
    const wrongType = await atropos(e, "client", "POST", "/register-env", { ...ENV, desired_name: 5, group_size: "two" });
    expect(wrongType.json.detail.map((d: { type: string }) => d.type)).toEqual(["string_type", "int_parsing"]);
    expect((await atropos(e, "viewer", "GET", "/status")).json).toEqual(before);
  });

  it("inflates gzip bodies, refuses a broken one with Atropos's 400, and gzips answers of 1,000 bytes or more for clients that take it", async () => {
    const e = await createEngine("atr");
    await running(e);
    const gzip = async (text: string) => new Uint8Array(await new Response(new Blob([text]).stream().pipeThrough(new CompressionStream("gzip"))).arrayBuffer());
    const big = group(1, 2, 0, { messages: [[{ role: "user", content: "x".repeat(2000) }], [{ role: "user", content: "y" }]] });
    const sent = await atropos(e, "client", "POST", "/scored_data", undefined, { rawBody: await gzip(JSON.stringify(big)), headers: { "content-type": "application/json", "content-encoding": "gzip" } });
    expect(sent.json).toEqual({ status: "received" });
    const broken = await atropos(e, "client", "POST", "/scored_data", undefined, { rawBody: "not gzip", headers: { "content-type": "application/json", "content-encoding": "gzip" } });
    expect([broken.status, broken.text]).toEqual([400, "Invalid gzip payload"]);
    // A small body that inflates past 16 MiB is refused before it is all in memory.
    const bomb = await atropos(e, "client", "POST", "/scored_data", undefined, { rawBody: await gzip(" ".repeat(17 * 1024 * 1024)), headers: { "content-type": "application/json", "content-encoding": "gzip" } });
    expect([bomb.status, bomb.json.error]).toEqual([413, "payload_too_large"]);
    expect((await atropos(e, "viewer", "GET", "/status")).json.queue_size).toBe(1);

    const plain = await workerFetch(`${ORIGIN}/e/${e.name}/t/${e.tokens.viewer}/atropos/latest_example`, { headers: { "accept-encoding": "identity" } });
    expect(plain.headers.get("content-encoding")).toBeNull();
    const zipped = await workerFetch(`${ORIGIN}/e/${e.name}/t/${e.tokens.viewer}/atropos/latest_example`, { headers: { "accept-encoding": "gzip, deflate" } });
    expect(zipped.headers.get("content-encoding")).toBe("gzip");
    // workerd's fetch inflates it for the caller, as an HTTP client does.
    expect(await zipped.json()).toEqual(await plain.json());
    // Under 1,000 bytes: sent as it is.
    const small = await workerFetch(`${ORIGIN}/e/${e.name}/t/${e.tokens.viewer}/atropos/info`, { headers: { "accept-encoding": "gzip" } });
    expect(small.headers.get("content-encoding")).toBeNull();
  });

  it("reads /status-env's env_id from a GET body, as BaseEnv sends it, with Atropos's arithmetic", async () => {
    const e = await createEngine("atr");
    const [a, b] = await running(e, [ENV, { ...ENV, desired_name: "b", max_token_length: 3072, group_size: 4, min_batch_allocation: 0.5 }], { ...REGISTRATION, batch_size: 8 });
    await atropos(e, "client", "POST", "/scored_data", group(1, 2, a!));
    await atropos(e, "client", "POST", "/scored_data", group(2, 4, b!));
    await atropos(e, "client", "POST", "/scored_data", group(3, 4, null));
    // workerd's Request takes no GET body, so the test sends env_id in the query, which the exchange also reads.
    const status = await atropos(e, "client", "GET", `/status-env?env_id=${a}`);
    // weights 1024/(1024+3072); other envs' sequences in packs of 4 less b's minimum of 4: (4-4) + 4; own 2; over group size 2.
    expect(status.json).toEqual({ current_step: 0, queue_size: 3, unallocated_fraction: 0.5, self_queue_size: 1, max_group_size: 4, env_weight: 0.25 });
    // Atropos's floats stay floats when whole (FastAPI writes Python's 1.0), for a client that checks the type.
    const alone = await createEngine("atr");
    const [only] = await running(alone);
    expect((await atropos(alone, "client", "GET", `/status-env?env_id=${only}`)).text).toBe('{"current_step":0,"queue_size":0,"unallocated_fraction":1.0,"self_queue_size":0,"max_group_size":1,"env_weight":1.0}');
    expect((await atropos(e, "client", "GET", "/status-env?env_id=7")).status).toBe(500);
    expect((await atropos(e, "client", "GET", "/status-env?env_id=x")).json.detail[0]).toMatchObject({ type: "int_parsing", loc: ["body", "env_id"] });
    expect((await atropos(e, "client", "GET", "/status-env")).status).toBe(422);
  });
});

describe("Atropos's API: an env's group_size", () => {
  // Atropos's /register-env takes any int, and a group of another size is then matched against it
  // by find_groups_summing_to_target, whose table is (buffered + 1) x (group_size + 1) booleans: a
  // group_size no batch could hold makes every scored group of that env a 500 (and a large one a
  // table of gigabytes). The exchange bounds group_size and batch_size where the request comes in.
  it("beyond what a batch holds is a 422 naming the limit, as is such a batch_size, never a 500 later", async () => {
    const e = await createEngine("atr");
    await running(e, []);
    const r = await atropos(e, "client", "POST", "/register-env", { ...ENV, group_size: 2 ** 40 });
    expect([r.status, r.json]).toEqual([422, { detail: [{ type: "less_than_equal", loc: ["body", "group_size"], msg: `Input should be less than or equal to ${MAX_ATROPOS_BATCH_SIZE}`, input: 2 ** 40 }] }]);
    const t = await atropos(e, "trainer", "POST", "/register", { ...REGISTRATION, batch_size: "1099511627776" });
    expect([t.status, t.json.detail[0].loc, t.json.detail[0].msg]).toEqual([422, ["body", "batch_size"], `Input should be less than or equal to ${MAX_ATROPOS_BATCH_SIZE}`]);
    expect((await atropos(e, "viewer", "GET", "/status")).status).toBe(200);
  });

  it("at the limit buffers a smaller group without a 500, and trainers' real sizes are taken", async () => {
    const e = await createEngine("atr");
    const [a, b] = await running(e, [{ ...ENV, group_size: MAX_ATROPOS_BATCH_SIZE }, { ...ENV, group_size: 256 }], { ...REGISTRATION, batch_size: 4096 });
    const r = await atropos(e, "client", "POST", "/scored_data", group(1, 2, a!));
    expect([r.status, r.text.slice(0, 200)]).toEqual([200, JSON.stringify({ status: "buffered", buffer_size: 2 })]);
    expect(b).toBe(1);
    expect((await atropos(e, "viewer", "GET", "/info")).json).toEqual({ batch_size: 4096, max_token_len: 2048 });
    expect((await atropos(e, "viewer", "GET", "/status")).status).toBe(200);
  });
});

describe("Atropos's API: an empty /scored_data_list", () => {
  // Atropos's scored_data_list([]) loops over nothing: it answers, and app.state.queue is not created.
  it("changes nothing, so the trainer's /register that follows still registers its run", async () => {
    const e = await createEngine("atr");
    expect((await atropos(e, "client", "POST", "/scored_data_list", [])).json).toEqual({ status: "received", groups_processed: 0 });
    expect((await atropos(e, "trainer", "POST", "/register", REGISTRATION)).status).toBe(200);
    // Atropos's /register saw no app.state.queue, so it set the batch size and token length.
    expect((await atropos(e, "viewer", "GET", "/info")).json).toEqual({ batch_size: 4, max_token_len: 2048 });
  });

  it("after /reset_data, does not keep the trainer's new /register from taking effect", async () => {
    const e = await createEngine("atr");
    await running(e);
    expect((await atropos(e, "trainer", "GET", "/reset_data")).status).toBe(200);
    expect((await atropos(e, "client", "POST", "/scored_data_list", [])).status).toBe(200);
    expect((await atropos(e, "trainer", "POST", "/register", { ...REGISTRATION, batch_size: 8 })).status).toBe(200);
    expect((await atropos(e, "viewer", "GET", "/info")).json).toEqual({ batch_size: 8, max_token_len: 2048 });
  });
});

describe("Atropos's API: roles", () => {
  it("lets a client token register envs, post groups and read, and keeps the trainer's calls to the trainer", async () => {
    const e = await createEngine("atr");
    for (const [path, method] of [["/register", "POST"], ["/batch", "GET"], ["/reset_data", "GET"]] as const) {
      const r = await atropos(e, "client", method, path, method === "POST" ? REGISTRATION : undefined);
      expect([path, r.status]).toEqual([path, 403]);
    }
    await running(e);
    expect((await atropos(e, "client", "POST", "/scored_data", group(1, 2))).status).toBe(200);
    expect((await atropos(e, "client", "GET", "/status")).status).toBe(200);
    expect((await atropos(e, "viewer", "POST", "/scored_data", group(1, 2))).status).toBe(403);
    expect((await atropos(e, "viewer", "POST", "/register-env", ENV)).status).toBe(403);
    expect((await atropos(e, "operator", "GET", "/batch")).status).toBe(403);
    expect((await atropos(e, "trainer", "POST", "/scored_data", group(2, 2))).status).toBe(200);
    const anonymous = await workerFetch(`${ORIGIN}/e/${e.name}/atropos/status`);
    expect(anonymous.status).toBe(401);
    const wrong = await workerFetch(`${ORIGIN}/e/${e.name}/t/not-a-token/atropos/status`);
    expect(wrong.status).toBe(401);
    expect((await workerFetch(`${ORIGIN}/e/no-such-engine/t/x/atropos/status`)).status).toBe(404);
    expect((await atropos(e, "viewer", "GET", "/status")).json.queue_size).toBe(2);
  });
});

describe("Atropos's API: beyond run-api", () => {
  it("keeps registrations, envs, the queue, cut batches and the step through a restart in the middle of a run", async () => {
    const e = await createEngine("atr");
    const [a, b] = await running(e, [ENV, { ...ENV, desired_name: "b", group_size: 4 }]);
    for (let i = 1; i <= 6; i++) await atropos(e, "client", "POST", "/scored_data", group(i, 2, a!));
    // Three batches cut, the newest handed out; two wait cut, and a group of b's waits in its buffer.
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([5, 6]);
    expect((await atropos(e, "client", "POST", "/scored_data", group(7, 2, b!))).json).toEqual({ status: "buffered", buffer_size: 2 });
    await atropos(e, "client", "POST", "/scored_data", group(8, 2, a!));
    const before = (await atropos(e, "viewer", "GET", "/status")).json;
    expect(before).toMatchObject({ current_step: 3, queue_size: 1 });

    await expect(runInDurableObject(e.stub, (_i, state) => state.abort("restart"))).rejects.toThrow();
    await reconnect(e);

    expect((await atropos(e, "viewer", "GET", "/status")).json).toEqual(before);
    expect((await atropos(e, "viewer", "GET", "/info")).json).toEqual({ batch_size: 4, max_token_len: 2048 });
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json.tokens[0][0]).toBe(8);
    // The envs carry on with their ids: b's buffered group joins the next one of its size.
    expect((await atropos(e, "client", "POST", "/scored_data", group(9, 2, b!))).json).toEqual({ status: "buffered", buffer_size: 0 });
    expect((await atropos(e, "client", "GET", `/status-env?env_id=${b}`)).json).toMatchObject({ current_step: 3, self_queue_size: 1 });
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([3, 4]);
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([1, 2]);
    // The registration is the one from before: a new env is the third.
    expect((await atropos(e, "client", "POST", "/register-env", ENV)).json).toMatchObject({ env_id: 2, wandb_name: "gsm8k_1", starting_step: 3 });
  });

  it("streams a batch larger than an RPC value may be (32 MiB), and its rows go once it is read", async () => {
    const e = await createEngine("atr");
    // 20 groups of one sequence of 250,000 token ids (about 1.8 MB of JSON each): a 36 MB batch.
    await running(e, [{ ...ENV, group_size: 1 }], { ...REGISTRATION, batch_size: 20 });
    const long = Array.from({ length: 250_000 }, (_, i) => 100_000 + i);
    for (let tag = 1; tag <= 20; tag++) {
      const res = await atropos(e, "client", "POST", "/scored_data", { tokens: [[tag, ...long]], masks: [[1]], scores: [1], env_id: 0 });
      expect(res.json).toEqual({ status: "received" });
    }
    const res = await workerFetch(`${ORIGIN}/e/${e.name}/t/${e.tokens.trainer}/atropos/batch`);
    expect(res.status).toBe(200);
    // Read as it comes: the first group's head, how many groups, and the end.
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let head = "";
    let tail = "";
    let bytes = 0;
    let groups = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (head.length < 40) head += value.slice(0, 40);
      bytes += value.length;
      groups += value.split('{"tokens":').length - 1;
      tail = (tail + value).slice(-20);
    }
    expect(bytes).toBeGreaterThan(32 * 1024 * 1024);
    expect(head.startsWith('{"batch":[{"tokens":[[1,100000,100001')).toBe(true);
    expect(groups).toBe(20);
    expect(tail.endsWith("]}")).toBe(true);
    const left = await runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM atropos_groups").one().n);
    // Only the latest example's row stays.
    expect(left).toBe(1);
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json.tokens[0].slice(0, 2)).toEqual([20, 100000]);
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
  }, 60_000);

  it("drops a batch whose reader went away, and one a restart left half sent, at the next /batch", async () => {
    const e = await createEngine("atr");
    await running(e);
    for (let i = 1; i <= 4; i++) await atropos(e, "client", "POST", "/scored_data", group(i, 2));
    const rows = () => runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM atropos_groups WHERE place = 'batch'").one().n);
    // Two batches are cut at the first /batch, which hands out the newest. Its reader goes before
    // the end: the batch was handed out (as Atropos's is), and its rows go.
    const gone = await workerFetch(`${ORIGIN}/e/${e.name}/t/${e.tokens.trainer}/atropos/batch`);
    await gone.body!.cancel();
    await expect.poll(rows).toBe(2);
    // A batch an earlier run of the object took and never finished sending (it was evicted
    // mid-answer): its rows stay renumbered, and the next /batch drops them, handing out nothing twice.
    await runInDurableObject(e.stub, (_i, state) => void state.storage.sql.exec("UPDATE atropos_groups SET batch = -batch - 1 WHERE place = 'batch'"));
    expect(await rows()).toBe(2);
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
    expect(await rows()).toBe(0);
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json.tokens[0][0]).toBe(4);
  });

  it("sets a group larger than the batch aside instead of blocking every batch, and reports it in /status", async () => {
    const e = await createEngine("atr");
    await running(e, [{ ...ENV, group_size: 8 }, ENV]);
    await atropos(e, "client", "POST", "/scored_data", group(1, 8, 0));
    await atropos(e, "client", "POST", "/scored_data", group(2, 2, 1));
    await atropos(e, "client", "POST", "/scored_data", group(3, 2, 1));
    // In Atropos the group of 8 is the first pack and overshoots the batch of 4, this one and every later one.
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([2, 3]);
    const status = (await atropos(e, "viewer", "GET", "/status")).json;
    expect(status.queue_size).toBe(0);
    expect(status.stalls).toEqual([{ kind: "larger_than_batch", groups: 1, detail: expect.stringContaining("of 8 sequences are larger than the batch (4)") }]);
    // The engine's overview (and so the dashboard) says it too.
    expect((await e.as("viewer").overview()).atropos).toEqual({
      registered: true,
      current_step: 1,
      batch_size: 4,
      queued_groups: 0,
      stored_groups: 1,
      max_groups: 200_000,
      // The group set aside, and the latest example's row (group 3's).
      stored_bytes: await payloadBytes(e),
      max_stored_bytes: DEFAULT_ATROPOS_CONFIG.max_stored_bytes,
      environments: 2,
      stalls: status.stalls,
    });
  });

  it("keeps a count row only for the (env, size) classes with something queued, so cuts and /status read no more than the queue holds", async () => {
    const e = await createEngine("atr");
    await running(e, [ENV], { ...REGISTRATION, batch_size: 2000 });
    const countRows = () => runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ env: string; size: number; n: number }>("SELECT env, size, n FROM atropos_counts ORDER BY env, size").toArray());
    // 1,000 groups with env_ids no env registered, queued as they are (as Atropos queues them): 1,000 classes.
    const list = Array.from({ length: 1000 }, (_, i) => group(i + 1, 2, 1000 + i));
    expect((await atropos(e, "client", "POST", "/scored_data_list", list)).json).toMatchObject({ groups_processed: 1000 });
    expect(await countRows()).toHaveLength(1000);
    expect((await atropos(e, "trainer", "GET", "/batch")).json.batch).toHaveLength(1000);
    expect((await e.as("viewer").overview()).atropos).toMatchObject({ stored_groups: 0, queued_groups: 0 });
    expect(await countRows()).toEqual([]);
    // A class keeps its row while some of its groups are queued, with their number.
    await atropos(e, "client", "POST", "/scored_data_list", [group(1, 2, 1000), group(2, 2, 1000), group(3, 2, 1001)]);
    expect(await countRows()).toEqual([
      { env: "1000", size: 2, n: 2 },
      { env: "1001", size: 2, n: 1 },
    ]);
    expect((await atropos(e, "viewer", "GET", "/status")).json.queue_size).toBe(3);
    // Rows an engine left at 0 before they were deleted go with the schema's migration.
    const migrated = await runInDurableObject(e.stub, (_i, state) => {
      const sql = state.storage.sql;
      sql.exec("INSERT INTO atropos_counts (env, size, n) VALUES ('7', 2, 0), ('8', 4, 0)");
      rewindSchema(sql, 15);
      migrateEngine(sql);
      return sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM atropos_counts").one().n;
    });
    expect(migrated).toBe(2);
  }, 60_000);

  it("bounds the groups it holds with a 503 that stores nothing, and the trainer sets the bound", async () => {
    const e = await createEngine("atr");
    await running(e);
    expect((await atropos(e, "client", "POST", "/config", { max_groups: 2 })).status).toBe(403);
    expect((await atropos(e, "trainer", "POST", "/config", { max_groups: 2 })).json).toEqual({ ...DEFAULT_ATROPOS_CONFIG, max_groups: 2 });
    expect((await atropos(e, "trainer", "POST", "/config", { max_groups: 0 })).status).toBe(422);
    await atropos(e, "client", "POST", "/scored_data", group(1, 2));
    const full = await atropos(e, "client", "POST", "/scored_data_list", [group(2, 2), group(3, 2)]);
    expect(full.status).toBe(503);
    expect(full.headers.get("retry-after")).toBe("5");
    expect(full.json).toMatchObject({ error: "queue_full" });
    expect((await atropos(e, "viewer", "GET", "/status")).json.queue_size).toBe(1);
    await atropos(e, "client", "POST", "/scored_data", group(2, 2));
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([1, 2]);
    // Taken batches free their room.
    expect((await atropos(e, "client", "POST", "/scored_data_list", [group(3, 2), group(4, 2)])).status).toBe(200);
    expect((await atropos(e, "viewer", "GET", "/config")).json).toEqual({ ...DEFAULT_ATROPOS_CONFIG, max_groups: 2 });
  });

  it("writes every scored group to D1 as a trajectory, without its token ids", async () => {
    const e = await createEngine("atr");
    await running(e);
    await atropos(e, "client", "POST", "/scored_data", group(1, 2, 0, { messages: [[{ role: "user", content: "hi" }], [{ role: "user", content: "yo" }]] }));
    await atropos(e, "client", "POST", "/scored_data_list", [group(2, 1, 0), group(3, 2, null)]);
    await advance(e, 1_000);
    const rows = (
      await env.DB.prepare("SELECT episode_uuid, client_uuid, task_id, episode_type, reward, workflow_output, outcome FROM trajectories WHERE engine = ? ORDER BY id").bind(e.name).all<{
        episode_uuid: string;
        client_uuid: string;
        task_id: string;
        reward: number;
        workflow_output: string;
      }>()
    ).results;
    expect(rows.map((r) => [r.client_uuid, r.task_id, r.reward])).toEqual([
      ["gsm8k_0", "gsm8k", 0.5],
      ["gsm8k_0", "gsm8k", 1],
      ["atropos", "", 0.5],
    ]);
    expect(new Set(rows.map((r) => r.episode_uuid)).size).toBe(3);
    const output = JSON.parse(rows[0]!.workflow_output);
    expect(output).toMatchObject({ reward: [1, 0], metadata: { source: "atropos", env_id: 0, group_size: 2, sequence_lengths: [2, 2], messages: [[{ role: "user", content: "hi" }], [{ role: "user", content: "yo" }]] } });
    expect(rows[0]!.workflow_output).not.toContain("tokens");
    // The trajectory ledger's list shows them like every other rollout.
    const list = await workerFetch(`${ORIGIN}/e/${e.name}/t/${e.tokens.viewer}/trajectories`);
    const listed = ((await list.json()) as { trajectories: { episode_uuid: string; client_uuid: string; reward: number; calls: number }[] }).trajectories;
    expect(new Set(listed.map((t) => t.episode_uuid))).toEqual(new Set(rows.map((r) => r.episode_uuid)));
    expect(listed.find((t) => t.client_uuid === "atropos")).toMatchObject({ reward: 0.5, calls: 0 });
  });

  it("records a group of a hundred thousand sequences within what D1 holds in a value: its mean, and what it left out", async () => {
    // The record without messages still carried every score and sequence length: 2.76 MB for
    // this group, which D1 refuses (SQLITE_TOOBIG) on every retry, for ever.
    const e = await createEngine("atr-huge");
    await running(e);
    const n = 120_000;
    const scores = Array.from({ length: n }, (_, i) => -0.12345678901234567 - i * 1e-12);
    const body = await gzipped({ tokens: Array.from({ length: n }, (_, i) => [7, i]), masks: Array.from({ length: n }, () => [-100, 1]), scores, env_id: null });
    const r = await atropos(e, "client", "POST", "/scored_data", undefined, { rawBody: body, headers: { "content-type": "application/json", "content-encoding": "gzip" } });
    expect(r.status).toBe(200);
    const [row] = await runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ bytes: number }>("SELECT octet_length(payload) AS bytes FROM outbox").toArray());
    expect(row!.bytes).toBeLessThanOrEqual(MAX_STORED_BYTES);
    await advance(e, 2_000);
    const stored = await env.DB.prepare("SELECT reward, workflow_output FROM trajectories WHERE engine = ?").bind(e.name).first<{ reward: number; workflow_output: string }>();
    const mean = scores.reduce((a, x) => a + x, 0) / n;
    expect(JSON.parse(stored!.workflow_output)).toEqual({
      reward: mean,
      is_success: null,
      metadata: { source: "atropos", env_id: null, group_size: n, messages_omitted: true, omitted: ["messages", "scores", "sequence_lengths", "generation_params", "group_overrides"] },
      log_metrics: {},
    });
    expect(stored!.reward).toBeCloseTo(mean, 12);
  }, 60_000);

  it("resets as /reset_data does: the run's state goes, the latest example and max_token_len stay", async () => {
    const e = await createEngine("atr");
    await running(e);
    await atropos(e, "client", "POST", "/scored_data", group(1, 2));
    expect((await atropos(e, "client", "POST", "/disconnect-env", { env_id: 0 })).json).toEqual({ status: "success" });
    expect((await atropos(e, "client", "POST", "/disconnect-env", { env_id: 5 })).json).toEqual({ status: "failure", error: "list index out of range" });
    const reset = await atropos(e, "trainer", "GET", "/reset_data");
    expect([reset.status, reset.text]).toEqual([200, "Reset successful"]);
    expect((await atropos(e, "viewer", "GET", "/status")).json).toMatchObject({ current_step: 0, queue_size: 0 });
    expect((await atropos(e, "viewer", "GET", "/info")).json).toEqual({ batch_size: -1, max_token_len: 2048 });
    expect((await atropos(e, "viewer", "GET", "/wandb_info")).json).toEqual({ group: null, project: null });
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json.tokens[0][0]).toBe(1);
    // Its queue is gone, so its /batch fails as Atropos's does, until a trainer registers again.
    expect((await atropos(e, "trainer", "GET", "/batch")).status).toBe(500);
    await running(e);
    expect((await atropos(e, "viewer", "GET", "/info")).json).toEqual({ batch_size: 4, max_token_len: 2048 });
    expect((await atropos(e, "client", "POST", "/scored_data", group(2, 2))).json).toEqual({ status: "received" });
  });
});

describe("Atropos's API: any body", () => {
  it("answers any JSON body with its answer or a 4xx, never a 500 Atropos would not give, and a refusal stores nothing", async () => {
    const e = await createEngine("atr");
    await running(e);
    // A valid group with any of its fields replaced by any JSON value, or any JSON value at all.
    const mutated = fc.oneof(
      fc.jsonValue(),
      fc.tuple(fc.constantFrom("tokens", "masks", "scores", "messages", "env_id", "advantages", "overrides", "images"), fc.jsonValue()).map(([k, v]) => ({ ...group(1, 2), [k]: v })),
    );
    const routes = ["/scored_data", "/scored_data_list", "/register-env", "/disconnect-env", "/config"] as const;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...routes), mutated, async (route, body) => {
        const before = (await atropos(e, "viewer", "GET", "/status")).json;
        const r = await atropos(e, "trainer", "POST", route, route === "/scored_data_list" && !Array.isArray(body) && typeof body === "object" ? [body] : body);
        // Atropos's IndexError: a scored group whose env_id is below -len(envs) (here, 1 env).
        const atroposError = r.status === 500 && r.text === "Internal Server Error" && JSON.stringify(body).includes('"env_id":-');
        expect([200, 413, 422].includes(r.status) || atroposError, `${route} ${JSON.stringify(body).slice(0, 200)} -> ${r.status} ${r.text.slice(0, 200)}`).toBe(true);
        if (r.status !== 200) expect((await atropos(e, "viewer", "GET", "/status")).json).toEqual(before);
      }),
      { numRuns: 150 },
    );
  });
});

describe("Atropos's API: what Python environments send", () => {
  // An environment whose numbers come out of numpy float32 through json.dumps(default=str) sends
  // group_size "2.0" and max_token_length "1024.0". Atropos's RegisterEnv (group_size: int) takes
  // them: pydantic v2 parses "2.0" as 2 (it strips a zero fraction). The Worker: 422 int_parsing.
  it("register-env takes \"2.0\" for an int field, as pydantic does", async () => {
    const e = await createEngine("pya");
    await running(e, [ENV]);
    const r = await atropos(e, "client", "POST", "/register-env", { ...ENV, group_size: "2.0", max_token_length: "1024.0" });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ status: "success" });
    // "2." too (pydantic strips any fraction of zeros); "2.5" and "2.0_0" are no ints to pydantic either.
    expect((await atropos(e, "client", "POST", "/register-env", { ...ENV, group_size: " 2. " })).status).toBe(200);
    for (const group_size of ["2.5", "2.0_0", "2.0e0", ".0"]) {
      const bad = await atropos(e, "client", "POST", "/register-env", { ...ENV, group_size });
      expect([group_size, bad.status, bad.json.detail?.[0]?.type]).toEqual([group_size, 422, "int_parsing"]);
    }
  });

  // BaseEnv sends scored data with json.dumps (atroposlib/envs/base.py _post_json_with_compression),
  // which writes NaN for a float("nan") score. Atropos took it (pydantic float allows NaN). The
  // Worker refuses non-finite scores by design (pyFloat: "finite_number"), but a literal NaN was
  // answered "JSON decode error" at a byte offset instead of finite_number at body.scores.0.
  it("a NaN score is refused as finite_number at its field, not as a JSON decode error", async () => {
    const e = await createEngine("pya");
    await running(e, [ENV]);
    const text = JSON.stringify(group(1, 2)).replace('"scores":[1,0]', '"scores":[NaN,0]');
    const r = await atropos(e, "client", "POST", "/scored_data", undefined, { rawBody: text, headers: { "content-type": "application/json" } });
    expect(r.status).toBe(422);
    expect(r.json.detail[0]).toMatchObject({ type: "finite_number", loc: ["body", "scores", 0] });
    // Infinity and -Infinity alike, and nothing was queued.
    const inf = await atropos(e, "client", "POST", "/scored_data", undefined, { rawBody: text.replace("[NaN,0]", "[Infinity,-Infinity]"), headers: { "content-type": "application/json" } });
    expect(inf.status).toBe(422);
    expect(inf.json.detail[0]).toMatchObject({ type: "finite_number", loc: ["body", "scores", 0] });
    expect((await atropos(e, "viewer", "GET", "/status")).json).toMatchObject({ queue_size: 0 });
  });

  // POST {rollout_server_url}/scored_data/ : Atropos (FastAPI) 307s to /scored_data, which aiohttp
  // follows with the body. The Worker: 404.
  it("POST /atropos/scored_data/ reaches /scored_data (or redirects there)", async () => {
    const e = await createEngine("pya");
    await running(e, [ENV]);
    const r = await atropos(e, "client", "POST", "/scored_data/", group(1, 2));
    expect(r.status === 200 || r.status === 307 || r.status === 308).toBe(true);
    // Served as the route itself (bearer URLs too, and GETs); one slash only; a HEAD of a GET that changes state is refused as without it.
    expect((await atropos(e, "viewer", "GET", "/status/", undefined, { bearer: true })).json).toMatchObject({ queue_size: 1 });
    expect((await atropos(e, "client", "POST", "/scored_data//", group(2, 2))).status).toBe(404);
    expect((await atropos(e, "trainer", "HEAD", "/batch/")).status).toBe(405);
    expect((await atropos(e, "viewer", "GET", "/status")).json).toMatchObject({ queue_size: 1 });
  });
});
