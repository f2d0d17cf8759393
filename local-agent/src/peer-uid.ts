/**
 * Which local user is at the other end of a TCP connection, from Linux's /proc/net/tcp and
 * /proc/net/tcp6: the facade serves the trainer's per-episode keys, so on a shared GPU host it
 * must tell the agent's own user's processes from everyone else's, and the unmodified AgentJet
 * trainer sends no credentials it could check instead.
 */
import { accessSync, constants } from "node:fs";
import { readFile } from "node:fs/promises";
import { endianness } from "node:os";

/** The two ends of an accepted connection, as Node's socket names them. */
export type ConnectionEnds = { localAddress?: string | undefined; localPort?: number | undefined; remoteAddress?: string | undefined; remotePort?: number | undefined };

/** The uid of the process holding the connection's other end, or null when this host does not list it. */
export type PeerUidLookup = (ends: ConnectionEnds) => Promise<number | null>;

const TABLES = { v4: "/proc/net/tcp", v6: "/proc/net/tcp6" } as const;

/** Whether this host lists its TCP connections with their owners' uids (Linux does; elsewhere nothing tells local users apart). */
export function procNetAvailable(): boolean {
  try {
    accessSync(TABLES.v4, constants.R_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The peer's uid from /proc/net: the row whose local end is the peer's and whose remote end is
 * ours is the peer's own socket, and its uid column is its owner's. Read asynchronously: on a
 * busy host the table is megabytes, and the gateway shares this event loop. Lookups that come
 * together share one read, and are answered in the order they came: the trainer's runner
 * threads open connections in bursts, and their calls are served in the order they connected.
 */
export const procPeerUid: PeerUidLookup = async (ends) => {
  const { localAddress, localPort, remoteAddress, remotePort } = ends;
  if (localAddress === undefined || localPort === undefined || remoteAddress === undefined || remotePort === undefined) return null;
  const peer = procForms(remoteAddress);
  const ours = procForms(localAddress);
  if (peer === null || ours === null) return null;
  // A v4-mapped connection to a dual-stack listener: the peer's own socket may be either family.
  for (const family of ["v4", "v6"] as const) {
    const p = peer[family];
    const o = ours[family];
    if (p === undefined || o === undefined) continue;
    const table = await freshTable(TABLES[family]);
    if (table === null) continue;
    const uid = uidOfRow(table, `${p}:${procPort(remotePort)} ${o}:${procPort(localPort)}`);
    if (uid !== null) return uid;
  }
  return null;
};

/** Per table, the read that has not started yet: a lookup joins it rather than start its own. */
const queued = new Map<string, Promise<string | null>>();
/** Per table, the read under way (or the last one). */
const reading = new Map<string, Promise<unknown>>();

/**
 * The table as read after the call: a read already under way may have started before the
 * connection was made, so a lookup waits for the next one, which every lookup until it starts shares.
 */
function freshTable(path: string): Promise<string | null> {
  const joined = queued.get(path);
  if (joined !== undefined) return joined;
  const next = (reading.get(path) ?? Promise.resolve()).then(() => {
    queued.delete(path);
    const read = readFile(path, "latin1").catch(() => null);
    reading.set(path, read);
    return read;
  });
  queued.set(path, next);
  return next;
}

/** The uid column of the row whose "local remote" ends are `ends`, or null. */
export function uidOfRow(table: string, ends: string): number | null {
  const at = table.indexOf(` ${ends} `);
  if (at < 0) return null;
  const end = table.indexOf("\n", at);
  // sl local rem st tx:rx tr:when retrnsmt uid ...; from the local end on, the uid is the 7th.
  const fields = table.slice(at, end < 0 ? undefined : end).trim().split(/\s+/);
  const uid = Number(fields[6]);
  return Number.isInteger(uid) ? uid : null;
}

/** A port as /proc/net prints it: four upper-case hex digits. */
function procPort(port: number): string {
  return port.toString(16).toUpperCase().padStart(4, "0");
}

/**
 * An address as /proc/net/tcp{,6} prints it: 32-bit words of the address in the host's byte
 * order, each as 8 upper-case hex digits. An IPv4 address (or an IPv4-mapped IPv6 one) has
 * both forms, the mapped one in tcp6; null for what is no IP address.
 */
export function procForms(address: string): { v4?: string; v6?: string } | null {
  const bytes = ipBytes(address);
  if (bytes === null) return null;
  if (bytes.length === 4) return { v4: words(bytes), v6: words([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ...bytes]) };
  const mapped = bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff;
  return mapped ? { v4: words(bytes.slice(12)), v6: words(bytes) } : { v6: words(bytes) };
}

function words(bytes: number[]): string {
  const little = endianness() === "LE";
  let out = "";
  for (let i = 0; i < bytes.length; i += 4) {
    const w = bytes.slice(i, i + 4);
    for (const b of little ? w.reverse() : w) out += b.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

/** The address's bytes in network order (4 or 16), or null. */
function ipBytes(address: string): number[] | null {
  const a = address.split("%")[0]!;
  if (!a.includes(":")) return ipv4Bytes(a);
  const halves = a.split("::");
  if (halves.length > 2) return null;
  const groups = (s: string): number[] | null => {
    if (s === "") return [];
    const out: number[] = [];
    const parts = s.split(":");
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i]!;
      if (i === parts.length - 1 && part.includes(".")) {
        const v4 = ipv4Bytes(part);
        if (v4 === null) return null;
        out.push(...v4);
      } else {
        if (!/^[0-9a-fA-F]{1,4}$/.test(part)) return null;
        const n = parseInt(part, 16);
        out.push(n >> 8, n & 0xff);
      }
    }
    return out;
  };
  const head = groups(halves[0]!);
  const tail = halves.length === 2 ? groups(halves[1]!) : [];
  if (head === null || tail === null) return null;
  const fill = 16 - head.length - tail.length;
  if (fill < 0 || (halves.length === 1 && fill !== 0)) return null;
  return [...head, ...new Array<number>(fill).fill(0), ...tail];
}

function ipv4Bytes(a: string): number[] | null {
  const parts = a.split(".");
  if (parts.length !== 4 || !parts.every((p) => /^\d{1,3}$/.test(p) && Number(p) <= 255)) return null;
  return parts.map(Number);
}
