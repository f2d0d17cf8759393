/**
 * The common frame of the integration suites: one local Worker per file, and per test a
 * fresh engine, a temporary directory and a list of cleanups run in reverse order.
 */
import { afterAll, afterEach, beforeAll, beforeEach } from "vitest";
import { startTestExchange, type TestEngine, type TestExchange } from "./exchange";
import { tempDir } from "./temp";

export type Suite = {
  readonly ex: TestExchange;
  readonly engine: TestEngine;
  /** This test's temporary directory. */
  readonly dir: string;
  /** Runs `fn` after the test (last registered first). */
  defer(fn: () => unknown): void;
};

export function exchangeSuite(opts: { commandLeaseSeconds?: number } = {}): Suite {
  let ex: TestExchange | undefined;
  let engine: TestEngine | undefined;
  let dir: ReturnType<typeof tempDir> | undefined;
  const cleanups: Array<() => unknown> = [];
  beforeAll(async () => {
    ex = await startTestExchange(opts);
  });
  afterAll(async () => {
    await ex?.stop();
  });
  beforeEach(async () => {
    dir = tempDir();
    engine = await (ex as TestExchange).newEngine();
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
    dir?.remove();
  });
  const need = <T>(v: T | undefined, what: string): T => {
    if (v === undefined) throw new Error(`${what} is only available inside a test`);
    return v;
  };
  return {
    get ex() {
      return need(ex, "the exchange");
    },
    get engine() {
      return need(engine, "the engine");
    },
    get dir() {
      return need(dir, "the temporary directory").path;
    },
    defer: (fn) => void cleanups.push(fn),
  };
}
