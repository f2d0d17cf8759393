/**
 * A pinned SDK reading a newer exchange's admin and runs answers. Descriptive fields of answers
 * are read with openEnum (src/protocol/open-enum.ts), so that one value a newer version added
 * does not make a whole list unreadable; an engine's placement, a token's role and a locked
 * field's section were left closed, and listEngines (npm start's first call), listTokens and
 * getConfig threw unreadable_answer for the whole list. A real HTTP server answers as a newer
 * Worker would.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminClient, RunsClient } from "../../src/client";
import { serveHttp, type TestServer } from "./support/http-server";

let server: TestServer;

const ENGINES = {
  engines: [
    { name: "default", created_at: 1_700_000_000, location_hint: "wnam", jurisdiction: null, deleting_since: null },
    // A location hint Cloudflare added after this SDK was pinned.
    { name: "lab", created_at: 1_700_000_100, location_hint: "sas", jurisdiction: null, deleting_since: null },
  ],
};
const TOKENS = {
  tokens: [
    { id: "tok_1", role: "operator", label: "operator (created with the engine)", created_at: 1_700_000_000, revoked_at: null },
    // A role a newer exchange added.
    { id: "tok_2", role: "auditor", label: "audit", created_at: 1_700_000_050, revoked_at: null },
  ],
};
const CONFIG = {
  environment: "gsm8k",
  environment_available: true,
  file_path: "/opt/envs/gsm8k.py",
  fields_source: "import",
  fields_error: null,
  configurable_fields: [],
  locked_fields: [
    { section: "trainer", name: "learning_rate", locked_value: 0.00004, type: null, default: null, description: "" },
    // A section of the run YAML a newer exchange added.
    { section: "ledger", name: "capture", locked_value: "tokens", type: null, default: null, description: "" },
  ],
  edits: {},
  yaml: "env:\n  group_size: 16\n",
};

const CREATED = {
  engine: "lab",
  location_hint: "sas",
  jurisdiction: null,
  tokens: { operator: "op_1", trainer: "tr_1", client: "cl_1", viewer: "vw_1", auditor: "au_1" },
  token_ids: { operator: "tok_1", trainer: "tok_2", client: "tok_3", viewer: "tok_4", auditor: "tok_5" },
};

beforeAll(async () => {
  server = await serveHttp(async (req, res) => {
    const url = req.url ?? "";
    const body = req.method === "POST" && url === "/admin/engines" ? CREATED : url === "/admin/engines" ? ENGINES : url.endsWith("/tokens") ? TOKENS : url.endsWith("/runs/config") ? CONFIG : null;
    res.writeHead(body === null ? 404 : 200, { "content-type": "application/json" });
    res.end(JSON.stringify(body ?? { error: "not_found", detail: `No route ${req.method} ${url}.` }));
  });
});
afterAll(async () => server?.close());

describe("a pinned SDK reading a newer exchange's admin and runs answers", () => {
  it("listEngines reads an engine placed by a location hint it does not know", async () => {
    const admin = new AdminClient({ origin: server.origin, adminToken: "adm" });
    const { engines } = await admin.listEngines();
    expect(engines.map((e) => [e.name, e.location_hint])).toEqual([["default", "wnam"], ["lab", "sas"]]);
  });

  it("createEngine reads an engine made with the tokens of a role it does not know", async () => {
    const made = await new AdminClient({ origin: server.origin, adminToken: "adm" }).createEngine("lab");
    expect([made.location_hint, made.tokens.operator, made.token_ids.viewer]).toEqual(["sas", "op_1", "tok_4"]);
  });

  it("listTokens reads a token of a role it does not know", async () => {
    const admin = new AdminClient({ origin: server.origin, adminToken: "adm" });
    const { tokens } = await admin.listTokens("default");
    expect(tokens.map((t) => [t.id, t.role])).toEqual([["tok_1", "operator"], ["tok_2", "auditor"]]);
  });

  it("RunsClient.getConfig reads a locked field of a section it does not know", async () => {
    const runs = new RunsClient({ baseUrl: `${server.origin}/e/default`, token: "op" });
    const config = await runs.getConfig();
    expect(config.locked_fields.map((f) => f.section)).toEqual(["trainer", "ledger"]);
  });
});
