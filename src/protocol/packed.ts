/**
 * Token ids and logprobs packed as base64 of little-endian 32-bit values (ledger.ts says why).
 * Written for both runtimes the ledger runs in, the Worker and the gateway's Node: atob/btoa and
 * typed arrays, no Buffer.
 */

/** btoa takes a "binary string"; building it 8 KiB at a time keeps fromCharCode's argument list small. */
function toBase64(bytes: Uint8Array): string {
  let s = "";
  for (let i = 0; i < bytes.length; i += 8192) s += String.fromCharCode(...bytes.subarray(i, i + 8192));
  return btoa(s);
}

function fromBase64(text: string): Uint8Array {
  const s = atob(text);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

function words(bytes: Uint8Array, what: string): DataView {
  if (bytes.length % 4 !== 0) throw new Error(`packed ${what}: ${bytes.length} bytes is not a whole number of 32-bit values`);
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

export function packInts(values: readonly number[]): string {
  const view = new DataView(new ArrayBuffer(values.length * 4));
  values.forEach((v, i) => view.setUint32(i * 4, v, true));
  return toBase64(new Uint8Array(view.buffer));
}

export function unpackInts(text: string): number[] {
  const view = words(fromBase64(text), "token ids");
  const out = new Array<number>(view.byteLength / 4);
  for (let i = 0; i < out.length; i++) out[i] = view.getUint32(i * 4, true);
  return out;
}

export function packFloats(values: readonly number[]): string {
  const view = new DataView(new ArrayBuffer(values.length * 4));
  values.forEach((v, i) => view.setFloat32(i * 4, v, true));
  return toBase64(new Uint8Array(view.buffer));
}

export function unpackFloats(text: string): number[] {
  const view = words(fromBase64(text), "logprobs");
  const out = new Array<number>(view.byteLength / 4);
  for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}
