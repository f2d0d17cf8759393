/**
 * A real Gateway recording into a real CallRecorder, for the ledger's gateway tests: the calls
 * it records, the CallContext the Worker would sign in, and a wait for one call's record.
 */
import { randomUUID } from "node:crypto";
import type { CallContext, CallRecord, CaptureMode } from "../../../src/protocol/ledger";
import type { RelayEnvelope } from "../../../src/protocol/relay";
import { Gateway } from "../../src/gateway/server";
import { fixedSecret } from "../../src/gateway/secret";
import { CallRecorder } from "../../src/ledger/recorder";
import type { MediaSet } from "../../src/ledger/media";
import { silentLogger, type Logger } from "../../src/log";
import { waitUntil } from "../support/wait";

/** `media`: what each record was handed to the shipper with (by call id), the media its messages refer to. */
export type RecordingGateway = { url: string; gateway: Gateway; records: CallRecord[]; media: Map<string, MediaSet> };

export async function recordingGateway(secret: string, dialect: "vllm" | "sglang", logger: Logger = silentLogger): Promise<RecordingGateway> {
  const records: CallRecord[] = [];
  const media = new Map<string, MediaSet>();
  const recorder = new CallRecorder({ historyBytes: 64 * 1024 * 1024, sink: (r, _bytes, m) => (media.set(r.call_id, m), records.push(r)), logger: silentLogger });
  const gateway = new Gateway({
    host: "127.0.0.1",
    port: 0,
    secret: fixedSecret(secret),
    models: ["policy"],
    zmqReceiveTimeoutMs: 2000,
    logger,
    upstream: null,
    sessionPath: false,
    ledger: { recorder, tokenDialect: dialect },
  });
  return { url: await gateway.listen(), gateway, records, media };
}

/** The call's context as the Worker signs it into the envelope. */
export const callContext = (capture: CaptureMode): CallContext => ({ call_id: randomUUID(), capture, client_uuid: "client-1", task_id: "task-1", weight_version: 3, run: 0, admitted_at: Date.now() });

/** The record of `env`'s call, once the gateway has made it (it records after answering). */
export const recordOf = (r: RecordingGateway, env: RelayEnvelope): Promise<CallRecord> => waitUntil(() => r.records.find((x) => x.call_id === env.call?.call_id), `the record of ${env.call?.call_id}`);
