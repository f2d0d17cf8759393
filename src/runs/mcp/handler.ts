/**
 * The MCP endpoint (streamable HTTP, stateless): POST /e/<engine>/mcp, or with the token in
 * the path. Each POST carries one JSON-RPC message (or a batch) and is answered with JSON;
 * notifications and responses get 202. The engine token authenticates every POST, and each
 * tool call is checked for its own operation, so a viewer's agent sees and may call only
 * the read-only tools.
 *
 * A refused operation (locked field, unknown environment, a run already active) is a tool
 * result with isError, carrying the same {error, detail, ...hints} as the REST answer: the
 * model reads it and can correct itself. Protocol mistakes are JSON-RPC errors.
 */
import type { Context } from "hono";
import { z } from "zod";
import { mayRun } from "../../auth/roles";
import type { Env } from "../../env";
import { routedBodyText } from "../../http/body";
import { bearerChallenge, describeIssues } from "../../http/errors";
import { loggedErrorId } from "../../error-id";
import { MAX_JSON_DEPTH, nestsDeeperThan, tooDeep } from "../../http/validate";
import { standaloneJsonSchema } from "../../openapi/json-schema";
import { authorize, credentials, envOf, guarded, type Credentials } from "../context";
import type { Refused } from "../reply";
import { ERR, LATEST_PROTOCOL_VERSION, PROTOCOL_VERSIONS, classify, result, rpcError, type JsonRpcRequest, type Outgoing } from "./jsonrpc";
import { TOOLS, toolByName, type Tool } from "./tools";

const SERVER_INFO = { name: "rollout-exchange-runs", title: "Rollout Exchange: RL training runs", version: "1" };

const INSTRUCTIONS =
  "Tools to run RL training on this engine's GPU host. Typical flow: rl_list_environments -> rl_select_environment -> " +
  "rl_get_current_config -> rl_edit_config (locked fields cannot change) -> optionally rl_test_inference -> rl_start_training -> " +
  "rl_check_status now and then -> rl_get_results. Every result is JSON; a refusal has `error`, `detail` and hints to act on.";

const MAX_BATCH = 20;

const CallParams = z.object({ name: z.string(), arguments: z.record(z.string(), z.unknown()).optional() });
const InitializeParams = z.object({ protocolVersion: z.string() }).loose();

function toolListing(t: Tool) {
  return { name: t.name, title: t.title, description: t.description, inputSchema: standaloneJsonSchema(t.input, "input") };
}

/** A refusal or success as an MCP tool result: JSON text for the model, the same object as structured content. */
function toolResult(body: Record<string, unknown>, isError: boolean) {
  return { content: [{ type: "text", text: JSON.stringify(body, null, 2) }], structuredContent: body, isError };
}

const refusalBody = (r: Refused): Record<string, unknown> => ({ error: r.error, detail: r.detail, ...r.hints });

async function callTool(env: Env, who: Credentials, role: string, req: JsonRpcRequest): Promise<Outgoing> {
  const params = CallParams.safeParse(req.params ?? {});
  if (!params.success) return rpcError(req.id, ERR.invalidParams, `tools/call: ${describeIssues(params.error)}`);
  const t = toolByName(params.data.name);
  if (t === undefined) return rpcError(req.id, ERR.invalidParams, `Unknown tool '${params.data.name}'. Tools: ${TOOLS.map((x) => x.name).join(", ")}.`);
  // The role first, as the REST routes do: a model told to fix its arguments would go on fixing
  // them for a call its role can never make.
  const ctx = await authorize(env, who, t.op);
  if ("ok" in ctx) return result(req.id, toolResult({ ...refusalBody(ctx), role }, true));
  const args = t.input.safeParse(params.data.arguments ?? {});
  if (!args.success) {
    return result(req.id, toolResult({ error: "invalid_arguments", detail: describeIssues(args.error), tool: t.name }, true));
  }
  const out = await guarded(ctx, () => t.call(ctx, args.data));
  if (!out.ok) return result(req.id, toolResult(refusalBody(out), true));
  return result(req.id, toolResult({ ...(out.body as Record<string, unknown>), next_steps: t.nextSteps(out.body) }, false));
}

async function answerRequest(env: Env, who: Credentials, role: Parameters<typeof mayRun>[0], req: JsonRpcRequest): Promise<Outgoing> {
  switch (req.method) {
    case "initialize": {
      const p = InitializeParams.safeParse(req.params ?? {});
      if (!p.success) return rpcError(req.id, ERR.invalidParams, `initialize: ${describeIssues(p.error)}`);
      const asked = p.data.protocolVersion;
      // Answer the client's version when we speak it, else ours (the client then decides).
      const version = (PROTOCOL_VERSIONS as readonly string[]).includes(asked) ? asked : LATEST_PROTOCOL_VERSION;
      return result(req.id, { protocolVersion: version, capabilities: { tools: { listChanged: false } }, serverInfo: SERVER_INFO, instructions: INSTRUCTIONS });
    }
    case "ping":
      return result(req.id, {});
    case "tools/list":
      return result(req.id, { tools: TOOLS.filter((t) => mayRun(role, t.op)).map(toolListing) });
    case "tools/call":
      return callTool(env, who, role, req);
    default:
      return rpcError(req.id, ERR.methodNotFound, `Method '${req.method}' is not supported by this server (it offers tools only).`);
  }
}

const rpcJson = (c: Context, body: Outgoing | Outgoing[], status: 200 | 400 = 200): Response => c.json(body, status);


/**
 * One request's answer; a failure that escapes it (D1 unreachable) is that request's JSON-RPC
 * internal error, with the id it is logged under: the batch's other answers still go, and the
 * writes they made stand told.
 */
async function answeredOrInternal(...args: Parameters<typeof answerRequest>): Promise<Outgoing> {
  try {
    return await answerRequest(...args);
  } catch (err) {
    return rpcError(args[3].id, ERR.internal, `Internal error (error id ${loggedErrorId("internal error (MCP request)", err)}); try again.`);
  }
}

export async function mcpHandler(c: Context): Promise<Response> {
  const who = await credentials(c);
  if ("ok" in who) return c.json(refusalBody(who), who.status, who.status === 401 ? { "www-authenticate": bearerChallenge(who.error) } : {});
  // Any token of the engine may talk MCP; what it may call is checked per tool.
  const auth = await who.stub.authorizeOp(who.caller, "list_runs");
  if (!auth.ok) return c.json({ error: auth.error, detail: auth.detail }, auth.status, auth.status === 401 ? { "www-authenticate": bearerChallenge(auth.error) } : {});
  const version = c.req.header("mcp-protocol-version");
  if (version !== undefined && !(PROTOCOL_VERSIONS as readonly string[]).includes(version)) {
    return c.json({ error: "unsupported_protocol_version", detail: `MCP-Protocol-Version ${version} is not supported; supported: ${PROTOCOL_VERSIONS.join(", ")}.` }, 400);
  }
  const text = routedBodyText(c);
  if (nestsDeeperThan(text, MAX_JSON_DEPTH)) return rpcJson(c, rpcError(null, ERR.invalidRequest, `Invalid request: ${tooDeep}.`), 400);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    return rpcJson(c, rpcError(null, ERR.parse, `Parse error: ${e instanceof Error ? e.message : String(e)}`), 400);
  }
  const batch = Array.isArray(raw);
  const messages: unknown[] = batch ? (raw as unknown[]) : [raw];
  if (messages.length === 0 || messages.length > MAX_BATCH) {
    return rpcJson(c, rpcError(null, ERR.invalidRequest, `A batch holds 1 to ${MAX_BATCH} messages.`), 400);
  }
  const answers: Outgoing[] = [];
  for (const m of messages) {
    const msg = classify(m);
    if (msg.kind === "request") answers.push(await answeredOrInternal(envOf(c), who, auth.body.role, msg.msg));
    else if (msg.kind === "invalid") answers.push(rpcError(msg.id, msg.code, msg.message));
  }
  // Only notifications (e.g. notifications/initialized) or responses: nothing to answer.
  if (answers.length === 0) return c.body(null, 202);
  return rpcJson(c, batch ? answers : (answers[0] as Outgoing), answers.every((a) => "error" in a && a.error.code === ERR.invalidRequest) ? 400 : 200);
}
