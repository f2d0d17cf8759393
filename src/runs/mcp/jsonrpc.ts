/**
 * The JSON-RPC 2.0 envelope MCP speaks, and the MCP protocol versions this server accepts.
 * Implemented here rather than with the MCP SDK's server: its transports expect Node's http
 * objects or a session store, while a Worker answers each POST on its own (stateless).
 */
import { z } from "zod";

export const PROTOCOL_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"] as const;
export const LATEST_PROTOCOL_VERSION = PROTOCOL_VERSIONS[0];

const Id = z.union([z.string(), z.number()]);

const Named = z.record(z.string(), z.unknown());
/** JSON-RPC 2.0 allows params by name (an object) or by position (an array). */
const Structured = z.union([Named, z.array(z.unknown())]);

/** A request this server can answer: MCP methods take their params by name. */
export const JsonRpcRequest = z.object({ jsonrpc: z.literal("2.0"), id: Id, method: z.string(), params: Named.optional() });
/** A valid JSON-RPC request whatever its params: one that JsonRpcRequest refuses has them by position. */
const AnyRequest = JsonRpcRequest.extend({ params: Structured.optional() });
export const JsonRpcNotification = z.object({ jsonrpc: z.literal("2.0"), method: z.string(), params: Structured.optional() });
/** A client's answer to a server request; this server sends none, so these are only acknowledged. */
export const JsonRpcResponse = z.object({ jsonrpc: z.literal("2.0"), id: Id.nullable(), result: z.unknown().optional(), error: z.unknown().optional() });

export type JsonRpcRequest = z.infer<typeof JsonRpcRequest>;
export const ERR = { parse: -32700, invalidRequest: -32600, methodNotFound: -32601, invalidParams: -32602, internal: -32603 } as const;

export type Incoming =
  | { kind: "request"; msg: JsonRpcRequest }
  | { kind: "notification" }
  | { kind: "response" }
  | { kind: "invalid"; id: string | number | null; code: typeof ERR.invalidRequest | typeof ERR.invalidParams; message: string };

export type Outgoing =
  | { jsonrpc: "2.0"; id: string | number; result: unknown }
  | { jsonrpc: "2.0"; id: string | number | null; error: { code: number; message: string; data?: unknown } };

export const result = (id: string | number, value: unknown): Outgoing => ({ jsonrpc: "2.0", id, result: value });
export const rpcError = (id: string | number | null, code: number, message: string, data?: unknown): Outgoing => ({
  jsonrpc: "2.0",
  id,
  error: data === undefined ? { code, message } : { code, message, data },
});

export function classify(raw: unknown): Incoming {
  const req = JsonRpcRequest.safeParse(raw);
  if (req.success) return { kind: "request", msg: req.data };
  // A valid Request all the same, so it is answered as one, to its id (JSON-RPC 2.0, 5.1).
  const positional = AnyRequest.safeParse(raw);
  if (positional.success) {
    return { kind: "invalid", id: positional.data.id, code: ERR.invalidParams, message: `Invalid params: ${positional.data.method} takes its params by name (an object), not by position (an array).` };
  }
  if (JsonRpcNotification.safeParse(raw).success && !(typeof raw === "object" && raw !== null && "id" in raw)) return { kind: "notification" };
  if (JsonRpcResponse.safeParse(raw).success && typeof raw === "object" && raw !== null && ("result" in raw || "error" in raw)) return { kind: "response" };
  const id = typeof raw === "object" && raw !== null && "id" in raw && (typeof raw.id === "string" || typeof raw.id === "number") ? raw.id : null;
  return { kind: "invalid", id, code: ERR.invalidRequest, message: "Invalid request: not a JSON-RPC 2.0 request, notification or response." };
}
