/** Where bench/relay/floor/serve.ts finds the bare Worker until it imports bench/serve/ itself. */
export { serveBareWorker, type BareWorker } from "./serve/bare-worker";
