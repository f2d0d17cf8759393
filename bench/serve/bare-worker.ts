/**
 * Serves a plain-JavaScript Worker on Miniflare exactly as scripts/local/exchange.ts serves the
 * real one: same Miniflare (the pinned devDependency), same options (workerd on a 127.0.0.1
 * port, requests straight into the Worker through a direct socket, placeholder `request.cf`,
 * Miniflare logging at WARN), state in memory. The benchmarks' references (the engine's limit
 * reference, the relay's floor) go through here, so only their Workers differ from the exchange.
 */
import { Miniflare, convertV4MiniflareOptions, type V4WorkerOptionsShape } from "miniflare";
import { LineLog } from "../../scripts/local/exchange";
import { withWorkerdPids, type Served } from "./served";

export type BareWorker = Served;

export async function serveBareWorker(o: {
  /** The Worker's module, plain JavaScript (Miniflare serves it without a bundler). */
  scriptPath: string;
  /** Prefixes the Worker's console output in `log`. */
  label: string;
  log: (line: string) => void;
  /** The direct socket's port on 127.0.0.1; 0 (the default) picks a free one. */
  port?: number;
  bindings?: V4WorkerOptionsShape["bindings"];
  serviceBindings?: V4WorkerOptionsShape["serviceBindings"];
  durableObjects?: V4WorkerOptionsShape["durableObjects"];
  /** Opens workerd's V8 inspector on this port, for profiling. */
  inspectorPort?: number;
}): Promise<BareWorker> {
  return withWorkerdPids(async () => {
    const mf = new Miniflare(
      convertV4MiniflareOptions({
        host: "127.0.0.1",
        port: 0,
        log: new LineLog(o.log),
        handleStructuredLogs: ({ level, message }) => o.log(`[${o.label} ${level}] ${message}`),
        telemetry: { enabled: false },
        cf: false,
        compatibilityDate: "2026-11-01",
        modules: true,
        scriptPath: o.scriptPath,
        ...(o.bindings ? { bindings: o.bindings } : {}),
        ...(o.serviceBindings ? { serviceBindings: o.serviceBindings } : {}),
        ...(o.durableObjects ? { durableObjects: o.durableObjects } : {}),
        unsafeDirectSockets: [{ host: "127.0.0.1", port: o.port ?? 0 }],
        ...(o.inspectorPort !== undefined ? { inspectorPort: o.inspectorPort } : {}),
      }),
    );
    try {
      await mf.ready;
    } catch (e) {
      await mf.dispose().catch(() => {});
      throw e;
    }
    return { url: (await mf.unsafeGetDirectURL()).origin, stop: () => mf.dispose() };
  });
}
