/**
 * What the OpenAPI document says of an operation, against what the Worker answers: a header it
 * sends or reads, and the field a refusal names. Each was missing from the document, or named
 * wrongly in the answer.
 */
import { describe, expect, it } from "vitest";
import { ADMIN_TOKEN, createEngine, ORIGIN, workerFetch } from "./support/harness";

type Param = { name?: string; in?: string; $ref?: string };
type Operation = { requestBody?: unknown; parameters?: Param[]; responses: Record<string, { headers?: Record<string, unknown> }> };
type Doc = { paths: Record<string, Record<string, Operation>> };

const served = async (): Promise<Doc> => (await (await workerFetch(`${ORIGIN}/openapi.json`)).json()) as Doc;

describe("the document against the answers", () => {
  it("lists the x-trajectories-total header the export's 200 carries, in both path forms", async () => {
    const doc = await served();
    const e = await createEngine("openapi-export-header");
    const res = await workerFetch(`${ORIGIN}/e/${e.name}/trajectories/export`, { headers: { authorization: `Bearer ${e.tokens.viewer}` } });
    await res.text();
    expect([res.status, res.headers.get("x-trajectories-total"), res.headers.get("cache-control")]).toEqual([200, "0", "no-store"]);
    for (const path of ["/e/{engine}/trajectories/export", "/e/{engine}/t/{token}/trajectories/export"]) {
      const headers = Object.keys(doc.paths[path]?.["get"]?.responses["200"]?.headers ?? {}).map((h) => h.toLowerCase());
      expect(headers, path).toEqual(expect.arrayContaining(["x-trajectories-total", "cache-control"]));
    }
  });

  it("lists the MCP-Protocol-Version header the MCP endpoint checks, with the versions it takes", async () => {
    const doc = await served();
    const e = await createEngine("openapi-mcp-header");
    const res = await workerFetch(`${ORIGIN}/e/${e.name}/mcp`, {
      method: "POST",
      headers: { authorization: `Bearer ${e.tokens.viewer}`, "content-type": "application/json", "mcp-protocol-version": "1999-01-01" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
    });
    expect([res.status, ((await res.json()) as { error: string }).error]).toEqual([400, "unsupported_protocol_version"]);
    for (const path of ["/e/{engine}/mcp", "/e/{engine}/t/{token}/mcp"]) {
      const header = (doc.paths[path]?.["post"]?.parameters ?? []).find((p) => p.in === "header" && p.name?.toLowerCase() === "mcp-protocol-version");
      expect(header, path).toMatchObject({ schema: { enum: expect.not.arrayContaining(["1999-01-01"]) } });
    }
  });

  it("names the path's `name` in the 422 of an archive name of no archive's form, not a body the route has none of", async () => {
    const op = (await served()).paths["/admin/archives/{name}"]?.["delete"];
    expect([op?.requestBody, op?.parameters?.find((p) => p.name === "name")?.in, Object.keys(op?.responses ?? {}).includes("422")]).toEqual([undefined, "path", true]);
    const res = await workerFetch(`${ORIGIN}/admin/archives/not-an-archive`, { method: "DELETE", headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    const body = (await res.json()) as { error: string; detail: string };
    expect([res.status, body.error]).toEqual([422, "invalid_request"]);
    expect(body.detail).toMatch(/^name: archive names are/);
  });
});
