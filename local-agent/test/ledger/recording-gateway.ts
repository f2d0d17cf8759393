/**
 * A real Gateway recording into a real CallRecorder, for the ledger's gateway tests: the calls
 * it records, the CallContext the Worker would sign in, and a wait for one call's record; and,
 * for a test file, one in front of its own HTTP model, with signed calls to that model.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { afterAll, beforeAll } from "vitest";
import type { CallContext, CallRecord, CaptureMode } from "../../../src/protocol/ledger";
import type { RelayEnvelope } from "../../../src/protocol/relay";
import { Gateway } from "../../src/gateway/server";
import { fixedSecret } from "../../src/gateway/secret";
import { CallRecorder } from "../../src/ledger/recorder";
import type { MediaSet } from "../../src/ledger/media";
import { silentLogger, type Logger } from "../../src/log";
import { envelope, post } from "../gateway/envelope";
import { serveHttp, type TestServer } from "../support/http-server";
import { waitUntil } from "../support/wait";

/** `media`: what each record was handed to the shipper with (by call id), the media its messages refer to. */
/** `sizes`: the bytes the recorder said each record takes, by call id, as the shipper weighs it. */
export type RecordingGateway = { url: string; gateway: Gateway; records: CallRecord[]; media: Map<string, MediaSet>; sizes: Map<string, number> };

export async function recordingGateway(secret: string, dialect: "vllm" | "sglang", logger: Logger = silentLogger): Promise<RecordingGateway> {
  const records: CallRecord[] = [];
  const media = new Map<string, MediaSet>();
  const sizes = new Map<string, number>();
  const recorder = new CallRecorder({ historyBytes: 64 * 1024 * 1024, sink: (r, bytes, m) => (media.set(r.call_id, m), sizes.set(r.call_id, bytes), records.push(r)), logger: silentLogger });
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
  return { url: await gateway.listen(), gateway, records, media, sizes };
}

/** The call's context as the Worker signs it into the envelope. */
export const callContext = (capture: CaptureMode): CallContext => ({ call_id: randomUUID(), capture, client_uuid: "client-1", task_id: "task-1", weight_version: 3, run: 0, admitted_at: Date.now() });

/** The record of `env`'s call, once the gateway has made it (it records after answering). */
export const recordOf = (r: RecordingGateway, env: RelayEnvelope): Promise<CallRecord> => waitUntil(() => r.records.find((x) => x.call_id === env.call?.call_id), `the record of ${env.call?.call_id}`);

/**
 * An HTTP model answering with `answer` and a recording gateway (of `dialect`, vLLM's unless told)
 * whose secret is `secret`, started before the file's tests and closed after. `call` makes a claim's call to that
 * model with `callContext(capture)`; `post` sends it to the gateway signed; `recordOf` waits for its record.
 */
export function recordingGatewayOnModel(secret: string, answer: (req: IncomingMessage, res: ServerResponse) => Promise<void>, dialect: "vllm" | "sglang" = "vllm") {
  let model: TestServer | undefined;
  let gw: RecordingGateway | undefined;
  beforeAll(async () => {
    model = await serveHttp(answer);
    gw = await recordingGateway(secret, dialect);
  });
  afterAll(async () => {
    await gw?.gateway.close();
    await model?.close();
  });
  return {
    get gw(): RecordingGateway {
      return gw!;
    },
    call: (episode: string, request: Record<string, unknown>, capture: CaptureMode): RelayEnvelope => envelope({ episode_uuid: episode, trainer_base_url: `${model!.origin}/v1`, request, call: callContext(capture) }),
    post: (env: RelayEnvelope) => post(gw!.url, env, secret),
    recordOf: (env: RelayEnvelope): Promise<CallRecord> => recordOf(gw!, env),
  };
}
