/** SseRedaction under random line ends and random cuts gives the same bytes as one chunk, and never shows the key outside a completion. */
import { expect, it } from "vitest";
import { credentialForms, hiddenTextProbe, hideAddresses, hideSecrets } from "../../src/gateway/errors";
import { SseRedaction } from "../../src/gateway/sse-redaction";

const KEY = "sk-trainer-XYZ-fuzz";
const addresses = ["http://10.9.8.7:8000/v1", "10.9.8.7:8000", "10.9.8.7"];
const secrets = credentialForms(KEY);
const make = () => new SseRedaction((t) => hideSecrets(hideAddresses(t, addresses), secrets), hiddenTextProbe(addresses, secrets));

let seed = 12345;
const rand = (n: number): number => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);

function stream(): string {
  const ends = ["\n", "\r\n", "\r"];
  let s = "";
  for (let i = 0, n = 1 + rand(6); i < n; i++) {
    const e = ends[rand(3)]!;
    const kind = rand(4);
    if (kind === 0) s += `data: {"choices":[{"delta":{"content":"ok ${i}"}}]}${e}${e}`;
    else if (kind === 1) s += `data: {"error":{"message":"bad key ${KEY} at 10.9.8.7:8000"}}${e}${ends[rand(3)]!}`;
    else if (kind === 2) s += `event: error${e}data: ${KEY}${e}${e}`;
    else s += `: comment ${KEY}${e}${e}`;
  }
  return s + (rand(2) ? "data: [DONE]\n\n" : "");
}

it("any cut, any line ends: the same output as one chunk, no key outside completions", () => {
  for (let k = 0; k < 300; k++) {
    const text = stream();
    const buf = Buffer.from(text);
    const one = make();
    const whole = Buffer.concat([one.push(buf), one.end()]).toString();
    expect(whole.includes(KEY), JSON.stringify({ text, whole })).toBe(false);
    for (let t = 0; t < 10; t++) {
      const r = make();
      const outs: Buffer[] = [];
      let at = 0;
      while (at < buf.length) {
        const len = 1 + rand(8);
        outs.push(r.push(buf.subarray(at, at + len)));
        at += len;
      }
      outs.push(r.end());
      const got = Buffer.concat(outs).toString();
      expect(got.includes(KEY), JSON.stringify({ text, got })).toBe(false);
      expect(JSON.stringify(got), JSON.stringify(text)).toBe(JSON.stringify(whole));
    }
  }
});
