/**
 * JSON in pieces, so that a reader sends it a piece at a time and never holds it as one string.
 * A trajectory's: its head, then each call, then its training sequence. Each call's conversation
 * is whole, so a long episode's JSON grows with the square of its length (150 turns over 4 MB of
 * history were 585 MB: past V8's longest string, and far past an isolate's 128 MB); the built
 * calls share their messages, so the trajectory as objects stays small. A rollout pull's with
 * each claim's turns (rollout-tokens.ts) is quadratic the same way. The pieces joined are what
 * JSON.stringify of the whole gives.
 */
import type { Trajectory } from "../protocol/ledger";

const enc = new TextEncoder();

/**
 * JSON.stringify(shellOf(list)) cut where the list goes: the text before it and after it. The
 * list's place is kept where JSON.stringify puts it (a marker in its stead), so pieces written
 * between them are its text exactly.
 */
export function aroundList(shellOf: (list: string) => unknown): [string, string] {
  const marker = `rx-list-${crypto.randomUUID()}`;
  const shell = JSON.stringify(shellOf(marker));
  const at = shell.indexOf(`"${marker}"`);
  return [`${shell.slice(0, at)}[`, `]${shell.slice(at + marker.length + 2)}`];
}

/** An item's pieces, the `i`th of a list: the comma goes with its first piece (one piece per call of a trajectory). */
export function* listed(i: number, pieces: Iterable<string>): Generator<string> {
  let comma = i > 0;
  for (const piece of pieces) {
    yield comma ? `,${piece}` : piece;
    comma = false;
  }
}

/** JSON.stringify(shellOf(list)) in pieces: the shell around the list, and each item's pieces (`piecesOf`). */
export function* listJsonPieces<T>(shellOf: (list: string) => unknown, items: readonly T[], piecesOf: (item: T) => Iterable<string> = (item) => [JSON.stringify(item)]): Generator<string> {
  const [head, tail] = aroundList(shellOf);
  yield head;
  for (let i = 0; i < items.length; i++) yield* listed(i, piecesOf(items[i] as T));
  yield tail;
}

export const trajectoryJsonPieces = (t: Trajectory): Generator<string> => listJsonPieces((calls) => ({ ...t, calls }), t.calls);

/** JSON pieces as a stream, each encoded when the reader pulls it (and, from an async generator, made then). */
export function jsonStream(pieces: Iterator<string> | AsyncIterator<string>): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const next = await pieces.next();
        if (next.done === true) controller.close();
        else controller.enqueue(enc.encode(next.value));
      },
    },
    { highWaterMark: 0 },
  );
}

/** One trajectory as a stream of its pieces. */
export const trajectoryStream = (t: Trajectory): ReadableStream<Uint8Array> => jsonStream(trajectoryJsonPieces(t));
