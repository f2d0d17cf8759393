/** The gateway's redaction of an upstream's event stream, chunk by chunk, on its own. */
import { describe, expect, it } from "vitest";
import { credentialForms, hiddenTextProbe, hideAddresses, hideSecrets } from "../../src/gateway/errors";
import { eventsEnd, SseRedaction } from "../../src/gateway/sse-redaction";

const KEY = "sk-trainer-0a1b2c-unit-key";
const BASE = "http://10.1.2.3:8000/v1";
const addresses = [BASE, "http://10.1.2.3:8000", "10.1.2.3:8000", "10.1.2.3"];
const secrets = credentialForms(KEY);
const redaction = () => new SseRedaction((t) => hideSecrets(hideAddresses(t, addresses), secrets), hiddenTextProbe(addresses, secrets));

/** What `chunks` come out as, and each push's output. */
function run(chunks: Buffer[]): { out: Buffer; pushes: Buffer[] } {
  const r = redaction();
  const pushes = chunks.map((c) => r.push(c));
  return { out: Buffer.concat([...pushes, r.end()]), pushes };
}

const completion = (text: string, end = "\n\n") => `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: text } }] })}${end}`;

describe("eventsEnd", () => {
  it.each([
    ["no blank line", "data: x\n", 0],
    ["LF", "data: x\n\ndata: y", 9],
    ["CRLF", "data: x\r\n\r\ndata: y", 11],
    ["CR", "data: x\r\rdata: y", 9],
    ["a CR that may begin a CRLF", "data: x\r\n\r", 10],
    ["whole events", "data: x\n\ndata: y\n\n", 18],
  ])("finds where the last whole event ends (%s)", (_what, text, end) => {
    expect(eventsEnd(Buffer.from(text))).toBe(end);
  });
});

describe("SseRedaction", () => {
  it("passes chunks of whole events on as the very same bytes, holding nothing", () => {
    for (const end of ["\n\n", "\r\n\r\n", "\r\r"]) {
      const chunks = [completion("a", end), completion(`the address ${BASE} and ${KEY}`, end), `data: [DONE]${end}`].map((c) => Buffer.from(c));
      const { pushes } = run(chunks);
      pushes.forEach((p, i) => expect(p).toBe(chunks[i]));
    }
  });

  it("hides the key and the address in an error event wherever the stream is cut, keeping UTF-8 whole", () => {
    const stream = Buffer.from(
      `${completion("日本")}data: {"error": {"message": "キー ${KEY} at ${BASE} は無効", "code": 401}}\r\n\r\n: ping ${KEY}\n\nevent: error\rdata: {"message": "${KEY}"}\r\r${completion(`echo ${KEY}`)}data: [DONE]`,
    );
    const expected = `${completion("日本")}data: {"error":{"message":"キー [hidden] at [hidden] は無効","code":401}}\r\n\r\n: ping [hidden]\n\nevent: error\ndata: {"message":"[hidden]"}\r\r${completion(`echo ${KEY}`)}data: [DONE]`;
    expect(run([stream]).out.toString()).toBe(expected);
    for (let cut = 1; cut < stream.length; cut++) {
      const out = run([stream.subarray(0, cut), stream.subarray(cut)]).out.toString();
      expect(out, `cut at ${cut}`).toBe(expected);
    }
    const bytes = Array.from({ length: stream.length }, (_, i) => stream.subarray(i, i + 1));
    expect(run(bytes).out.toString()).toBe(expected);
  });

  it("holds only an incomplete event, and sends it once its blank line comes", () => {
    const r = redaction();
    expect(r.push(Buffer.from(`${completion("a")}data: {"error": {"message": "${KEY.slice(0, 5)}`)).toString()).toBe(completion("a"));
    expect(r.push(Buffer.from(`${KEY.slice(5)}"}}\n`)).length).toBe(0);
    expect(r.push(Buffer.from("\n")).toString()).toBe(`data: {"error":{"message":"[hidden]"}}\n\n`);
    expect(r.end().length).toBe(0);
  });
});
