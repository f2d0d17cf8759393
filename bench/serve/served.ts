/** What every way of serving a benchmark's target gives back. */
import { workerdPids } from "../stats";

export type Served = {
  /** The origin, e.g. `http://127.0.0.1:41234`. */
  url: string;
  /** The workerd processes serving it (for their CPU per request), or none for a Node target. */
  pids: number[];
  stop(): Promise<void>;
};

/** Starts a Miniflare target and adds the workerd processes that appeared while it started. */
export async function withWorkerdPids<T extends { url: string; stop(): Promise<void> }>(start: () => Promise<T>): Promise<T & { pids: number[] }> {
  const before = new Set(workerdPids());
  const served = await start();
  return { ...served, pids: workerdPids().filter((p) => !before.has(p)) };
}
