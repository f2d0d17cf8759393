/**
 * Readiness checks for a run's processes: a TCP port that accepts a connection, or an HTTP
 * URL that answers 200. Each check is one short attempt; the supervisor repeats it until the
 * process's deadline.
 */
import { connect } from "node:net";
import type { Ready } from "./runs-config";

const ATTEMPT_MS = 2000;

function portOpen(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(ATTEMPT_MS, () => done(false));
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
  });
}

async function httpOk(url: string): Promise<boolean> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(ATTEMPT_MS) });
    await res.body?.cancel();
    return res.status === 200;
  } catch {
    return false;
  }
}

export function checkReady(ready: Ready): Promise<boolean> {
  return "port" in ready ? portOpen(ready.host, ready.port) : httpOk(ready.http);
}

export function describeReady(ready: Ready | undefined): string {
  if (ready === undefined) return "running";
  return "port" in ready ? `port ${ready.host}:${ready.port} open` : `${ready.http} answering 200`;
}
