/**
 * A taken Atropos batch's answer, `{"batch":[<group>,...]}`, as a stream read out of the
 * engine's SQLite about a mebibyte at a time. A batch of long sequences (1,024 of 8,192 tokens
 * is about 100 MB of JSON) is larger than one RPC value may be (32 MiB) and than a Worker's
 * memory; streamed, neither the engine's object nor the Worker holds more than a chunk of it.
 * The batch's rows go once the answer is read to its end, or its reader goes (AtroposHub.finishTaken).
 */
import type { AtroposHub } from "./atropos-hub";

export function atroposBatchStream(hub: AtroposHub, taken: number, tx: <T>(fn: () => T) => T): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  let from = 0;
  let first = true;
  let finished = false;
  const finish = (): void => {
    if (finished) return;
    finished = true;
    tx(() => hub.finishTaken(taken));
  };
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      const rows = hub.takenChunk(taken, from);
      if (rows.length === 0) {
        controller.enqueue(enc.encode(first ? '{"batch":[]}' : "]}"));
        controller.close();
        finish();
        return;
      }
      const text = rows.map((r) => r.payload).join(",");
      controller.enqueue(enc.encode(first ? `{"batch":[${text}` : `,${text}`));
      first = false;
      from = rows[rows.length - 1]!.pos + 1;
    },
    cancel() {
      finish();
    },
  });
}
