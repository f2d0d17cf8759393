/**
 * The relay's floor: what any two-hop relay of the same shape costs on this machine, so the
 * exchange's overhead can be read against it (as the engine benchmark reads cycles/s against
 * its limit reference). Client -> a bare Worker (./worker.js, served as the exchange is, by
 * ../../bare-worker.ts, with a network binding out) -> a
 * bare Node proxy in its own process (./proxy.ts, as the agent's gateway is) -> the model.
 * What the exchange adds on top of this is its own work: the per-claim key, the engine's
 * admission, the signed envelope and its check, the error handling.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { serveBareWorker, type BareWorker } from "../../bare-worker";

export type RelayFloor = {
  /** The bare Worker's origin: call `${url}/v1/chat/completions`. */
  url: string;
  /** The bare Node proxy's origin alone (the gateway's floor). */
  proxyUrl: string;
  /** The proxy's process, for its CPU. */
  proxyPid: number | undefined;
  stop(): Promise<void>;
};

/** Starts ./proxy.ts in its own process, forwarding to `upstream`; resolves with its origin. */
async function startProxy(upstream: string): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(new URL("./proxy.ts", import.meta.url)), upstream], { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout! });
  const port = await new Promise<string>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`the relay floor's proxy exited (${code}) before listening`)));
    lines.on("line", (l) => {
      const m = /^listening (\d+)$/.exec(l);
      if (m) resolve(m[1]!);
    });
  });
  return { url: `http://127.0.0.1:${port}`, child };
}

export async function startRelayFloor(opts: { upstream: string; log?: (line: string) => void }): Promise<RelayFloor> {
  const log = opts.log ?? (() => {});
  const { url: proxyUrl, child } = await startProxy(opts.upstream);
  const stopProxy = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGTERM");
    await once(child, "exit");
  };
  let worker: BareWorker;
  try {
    worker = await serveBareWorker({
      scriptPath: fileURLToPath(new URL("./worker.js", import.meta.url)),
      label: "relay floor",
      log,
      bindings: { PROXY: proxyUrl },
      serviceBindings: { NET: { network: { allow: ["public", "private", "local"] } } },
    });
  } catch (e) {
    await stopProxy();
    throw e;
  }
  return {
    url: worker.url,
    proxyUrl,
    proxyPid: child.pid,
    stop: async () => {
      await worker.stop();
      await stopProxy();
    },
  };
}
