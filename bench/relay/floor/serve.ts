/**
 * The relay's floor: what any two-hop relay of the same shape costs on this machine, so the
 * exchange's overhead can be read against it (as the engine benchmark reads cycles/s against
 * its limit reference). Client -> a bare Worker (./worker.js, served as the exchange is, by
 * bench/serve/bare-worker.ts, with a network binding out) -> a bare Node proxy in its own
 * process (./proxy.ts, as the agent's gateway is) -> the model.
 * What the exchange adds on top of this is its own work: the per-claim key, the engine's
 * admission, the signed envelope and its check, the error handling.
 */
import { fileURLToPath } from "node:url";
import { serveBareWorker, type BareWorker } from "../../serve/bare-worker";
import { startProcess } from "../../serve/process";
import type { Served } from "../../serve/served";

/** `url` is the bare Worker's origin (call `${url}/v1/chat/completions`), `pids` its workerd. */
export type RelayFloor = Served & {
  /** The bare Node proxy's origin alone (the gateway's floor). */
  proxyUrl: string;
  /** The proxy's process, for its CPU. */
  proxyPid: number;
};

export async function startRelayFloor(opts: { upstream: string; log?: (line: string) => void; inspectorPort?: number }): Promise<RelayFloor> {
  const log = opts.log ?? (() => {});
  // The proxy exits when its stdin closes, so it does not outlive a benchmark that dies.
  const proxy = await startProcess({ script: fileURLToPath(new URL("./proxy.ts", import.meta.url)), args: [opts.upstream], ready: /^listening (\d+)$/, stdinPipe: true, what: "the relay floor's proxy" });
  const proxyUrl = `http://127.0.0.1:${proxy.ready[1]!}`;
  let worker: BareWorker;
  try {
    worker = await serveBareWorker({
      scriptPath: fileURLToPath(new URL("./worker.js", import.meta.url)),
      label: "relay floor",
      log,
      bindings: { PROXY: proxyUrl },
      serviceBindings: { NET: { network: { allow: ["public", "private", "local"] } } },
      ...(opts.inspectorPort !== undefined ? { inspectorPort: opts.inspectorPort } : {}),
    });
  } catch (e) {
    await proxy.stop();
    throw e;
  }
  return {
    url: worker.url,
    pids: worker.pids,
    proxyUrl,
    proxyPid: proxy.child.pid!,
    stop: async () => {
      await worker.stop();
      await proxy.stop();
    },
  };
}
