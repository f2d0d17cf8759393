/** A recorded call as the gateway's recorder makes one, its answer `content`, its times `at`: for the shipper's and the spool's tests. */
import { randomUUID } from "node:crypto";
import type { CallRecord } from "../../../src/protocol/ledger";

export function callRecord(content = "ok", at = 0): CallRecord {
  return {
    call_id: randomUUID(),
    capture: "messages",
    client_uuid: "c",
    task_id: "t",
    weight_version: null,
    run: 0,
    admitted_at: at,
    episode_uuid: "ep",
    fence: 1,
    endpoint: "/v1/chat/completions",
    model: "tiny",
    stream: false,
    started_at: at,
    first_byte_at: at,
    done_at: at,
    status: 200,
    error: null,
    finish_reason: "stop",
    usage: null,
    truncated: false,
    body: { params: { model: "tiny" }, tools: null, tools_from_prefix: false, prefix: null, messages: [], answer: { role: "assistant", content }, tokens: null },
  };
}
