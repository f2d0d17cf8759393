/**
 * A request that declares a body of `bytes` and sends only its headers, for a server that refuses
 * a declared length past its bound unread: a client still writing the body races the connection
 * the refusal closes (EPIPE now and then), and one waiting to finish would wait for ever.
 */
import { request } from "node:http";

export function headersOnly(url: string, method: string, headers: Record<string, string>, bytes: number): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers: { ...headers, "content-type": "application/json", "content-length": String(bytes) } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (text += c));
      res.on("end", () => {
        resolve({ status: res.statusCode ?? 0, text });
        req.destroy();
      });
    });
    req.on("error", reject);
    req.flushHeaders();
  });
}
