/**
 * Serves the limit reference (./worker.js) on Miniflare exactly as scripts/local/exchange.ts
 * serves the real Worker: same Miniflare (the pinned devDependency), same options (workerd on
 * a 127.0.0.1 port, requests straight into the Worker through a direct socket, placeholder
 * `request.cf`, Miniflare logging at WARN), state in memory. Only the Worker differs.
 */
import { fileURLToPath } from "node:url";
import { Log, LogLevel, Miniflare, convertV4MiniflareOptions } from "miniflare";

export type ReferenceServer = { url: string; stop(): Promise<void> };

class LineLog extends Log {
  constructor(private readonly sink: (line: string) => void) {
    super(LogLevel.WARN);
  }
  protected override log(message: string): void {
    for (const line of message.split("\n")) this.sink(line);
  }
}

export async function startReference(opts: { port?: number; log?: (line: string) => void } = {}): Promise<ReferenceServer> {
  const log = opts.log ?? (() => {});
  const mf = new Miniflare(
    convertV4MiniflareOptions({
      host: "127.0.0.1",
      port: 0,
      log: new LineLog(log),
      handleStructuredLogs: ({ level, message }) => log(`[reference ${level}] ${message}`),
      telemetry: { enabled: false },
      cf: false,
      compatibilityDate: "2026-11-01",
      modules: true,
      scriptPath: fileURLToPath(new URL("./worker.js", import.meta.url)),
      durableObjects: { ENGINE: { className: "ReferenceEngine", useSQLite: true } },
      // As the exchange is served: a socket straight into the Worker, not through Miniflare's entry worker.
      unsafeDirectSockets: [{ host: "127.0.0.1", port: opts.port ?? 0 }],
    }),
  );
  await mf.ready;
  const url = (await mf.unsafeGetDirectURL()).origin;
  log(`limit reference serving ${url} (in-memory state)`);
  return { url, stop: () => mf.dispose() };
}
