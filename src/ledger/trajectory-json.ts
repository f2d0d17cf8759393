/**
 * A trajectory's JSON in pieces: its head, then each call, then its training sequence, so that a
 * reader sends it call by call and never holds it as one string. Each call's conversation is
 * whole, so a long episode's JSON grows with the square of its length (150 turns over 4 MB of
 * history were 585 MB: past V8's longest string, and far past an isolate's 128 MB); the built
 * calls share their messages, so the trajectory as objects stays small. The pieces joined are
 * what JSON.stringify of the whole gives.
 */
import type { Trajectory } from "../protocol/ledger";

const enc = new TextEncoder();

export function* trajectoryJsonPieces(t: Trajectory): Generator<string> {
  // The calls' place is kept where JSON.stringify puts them, so the pieces are its text exactly.
  const marker = `rx-calls-${crypto.randomUUID()}`;
  const shell = JSON.stringify({ ...t, calls: marker });
  const at = shell.indexOf(`"${marker}"`);
  yield `${shell.slice(0, at)}[`;
  const { calls } = t;
  for (let i = 0; i < calls.length; i++) yield `${i === 0 ? "" : ","}${JSON.stringify(calls[i])}`;
  yield `]${shell.slice(at + marker.length + 2)}`;
}

/** One trajectory as a stream of its pieces, each encoded when the reader pulls it. */
export function trajectoryStream(t: Trajectory): ReadableStream<Uint8Array> {
  const pieces = trajectoryJsonPieces(t);
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        const next = pieces.next();
        if (next.done === true) controller.close();
        else controller.enqueue(enc.encode(next.value));
      },
    },
    { highWaterMark: 0 },
  );
}
