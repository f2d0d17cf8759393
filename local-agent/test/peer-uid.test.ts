/**
 * The facade's lookup of who holds a connection's other end, against this host's real
 * /proc/net/tcp and /proc/net/tcp6 for real connections (Linux only).
 */
import { createServer, connect, type Server, type Socket } from "node:net";
import { endianness } from "node:os";
import { afterEach, describe, expect, it } from "vitest";
import { procForms, procNetAvailable, procPeerUid, uidOfRow } from "../src/peer-uid";

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A listener on `host` and a client connected to it from `from`; the server's end of the connection. */
async function connection(host: string, connectTo = host): Promise<Socket | null> {
  const server: Server = createServer();
  const accepted = new Promise<Socket>((r) => server.once("connection", r));
  const listening = await new Promise<boolean>((resolve) => {
    server.once("error", () => resolve(false));
    server.listen(0, host, () => resolve(true));
  });
  if (!listening) return null;
  cleanups.push(() => new Promise((r) => server.close(r)));
  const port = (server.address() as { port: number }).port;
  const client = connect(port, connectTo);
  client.on("error", () => undefined);
  cleanups.push(() => client.destroy());
  const socket = await accepted;
  cleanups.push(() => socket.destroy());
  return socket;
}

const ends = (s: Socket) => ({ localAddress: s.localAddress, localPort: s.localPort, remoteAddress: s.remoteAddress, remotePort: s.remotePort });

describe.runIf(procNetAvailable())("the peer's uid from /proc/net", () => {
  it("finds this process's own uid for a real loopback connection", async () => {
    const socket = await connection("127.0.0.1");
    expect(await procPeerUid(ends(socket!))).toBe(process.getuid!());
  });

  it("finds it over IPv6, and for an IPv4 client of a dual-stack listener (an IPv4-mapped address)", async (ctx) => {
    const v6 = await connection("::1");
    const mapped = await connection("::", "127.0.0.1");
    if (v6 === null || mapped === null) return ctx.skip();
    expect(v6.remoteAddress).toBe("::1");
    expect(mapped.remoteAddress).toBe("::ffff:127.0.0.1");
    expect(await procPeerUid(ends(v6))).toBe(process.getuid!());
    expect(await procPeerUid(ends(mapped))).toBe(process.getuid!());
  });

  it("finds no peer for a connection this host does not have", async () => {
    const socket = await connection("127.0.0.1");
    expect(await procPeerUid({ ...ends(socket!), remotePort: socket!.localPort })).toBeNull();
    expect(await procPeerUid({ ...ends(socket!), remoteAddress: "not an address" })).toBeNull();
    expect(await procPeerUid({})).toBeNull();
  });
});

describe("/proc/net's address forms", () => {
  it("prints addresses as the kernel does: 32-bit words in the host's byte order", () => {
    const le = endianness() === "LE";
    expect(procForms("127.0.0.1")).toEqual(le ? { v4: "0100007F", v6: "0000000000000000FFFF00000100007F" } : { v4: "7F000001", v6: "00000000000000000000FFFF7F000001" });
    expect(procForms("::ffff:127.0.0.1")).toEqual(procForms("127.0.0.1"));
    expect(procForms("::1")).toEqual({ v6: le ? "00000000000000000000000001000000" : "00000000000000000000000000000001" });
    expect(procForms("fe80::1:2%eth0")).toEqual({ v6: le ? "000080FE000000000000000002000100" : "FE800000000000000000000000010002" });
    for (const bad of ["", "1.2.3", "256.0.0.1", "1::2::3", "1:2:3:4:5:6:7", "g::1"]) expect(procForms(bad)).toBeNull();
  });

  it("reads the uid column of the row with the connection's ends", () => {
    const table = [
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
      "   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1082 1 0 100 0 0 10 0",
      "   1: 0100007F:B1B4 0100007F:2766 01 00000000:00000000 00:00000000 00000000  1001        0 4242 1 0 20 4 30 10 -1",
      "   2: 0100007F:2766 0100007F:B1B4 01 00000000:00000000 00:00000000 00000000  1000        0 4243 1 0 20 4 30 10 -1",
    ].join("\n");
    expect(uidOfRow(table, "0100007F:B1B4 0100007F:2766")).toBe(1001);
    expect(uidOfRow(table, "0100007F:2766 0100007F:B1B4")).toBe(1000);
    expect(uidOfRow(table, "0100007F:B1B5 0100007F:2766")).toBeNull();
  });
});
