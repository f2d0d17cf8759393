/** A gateway a test starts for itself. */
import { Gateway, type GatewayOptions } from "../../src/gateway/server";
import { fixedSecret } from "../../src/gateway/secret";
import { silentLogger } from "../../src/log";

/**
 * A gateway on a free port that takes envelopes signed with `secret` and has no upstream of its
 * own (each envelope names one), closed by the test's `cleanups`; its URL.
 */
export async function ownGateway(secret: string, cleanups: Array<() => unknown>, over: Partial<GatewayOptions> = {}): Promise<string> {
  const g = new Gateway({ host: "127.0.0.1", port: 0, secret: fixedSecret(secret), models: ["m"], zmqReceiveTimeoutMs: 1000, logger: silentLogger, upstream: null, sessionPath: false, ...over });
  const at = await g.listen();
  cleanups.push(() => g.close());
  return at;
}
