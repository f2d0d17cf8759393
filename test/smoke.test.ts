import { exports } from "cloudflare:workers";
import { it, expect } from "vitest";
it("pings", async () => {
  const r = await exports.default.fetch("http://x/");
  expect(await r.text()).toBe("pong 1");
});
