/**
 * A small hand-written SVG of one bench:relay run: what each way of reaching the model adds
 * over calling it directly, p50 as a bar and p99 as a tick, so the exchange can be read
 * against the floor (a bare Worker and a bare Node proxy in the same two hops).
 */
import type { Latency } from "../stats";

type Overheads = {
  overhead: Overhead;
  overhead_of_gateway: Overhead;
  overhead_of_floor: Overhead;
  overhead_of_floor_proxy: Overhead;
  /** Another checkout's relay in the same rounds (--against). */
  against?: { checkout: string; overhead: Overhead };
};
type Overhead = { p50: number; p99: number };

export type RelayChartInput = {
  clients: number;
  cpus: number;
  model_latency_ms: number;
  /** Runs before the floor was measured have no start time. */
  started_at?: string;
  stream: Overheads;
  whole: Overheads;
  /** One call at a time: each target's latency; overheads are taken against `direct`. */
  one_at_a_time: Record<"direct" | "relayed" | "gateway_only" | "floor" | "floor_proxy_only", Latency>;
};

const SERIES = {
  exchange: { name: "through the exchange", color: "#f38020" },
  against: { name: "through the exchange at --against", color: "#6a3d9a" },
  floor: { name: "floor: bare Worker + bare proxy", color: "#8c8c8c" },
  gateway: { name: "the agent's gateway alone", color: "#f9b27a" },
  proxy: { name: "floor: bare proxy alone", color: "#c8c8c8" },
} as const;
type Series = keyof typeof SERIES;

export function renderRelayChart(r: RelayChartInput): string {
  const one = r.one_at_a_time;
  const vs = (l: Latency): Overhead => ({ p50: round(l.p50 - one.direct.p50), p99: round(l.p99 - one.direct.p99) });
  const fromRounds = (o: Overheads): [Series, Overhead][] => [
    ["exchange", o.overhead],
    ...(o.against ? [["against", o.against.overhead] as [Series, Overhead]] : []),
    ["floor", o.overhead_of_floor],
    ["gateway", o.overhead_of_gateway],
    ["proxy", o.overhead_of_floor_proxy],
  ];
  const groups: [string, [Series, Overhead][]][] = [
    [`${r.clients} streams, streamed`, fromRounds(r.stream)],
    [`${r.clients} streams, whole`, fromRounds(r.whole)],
    ["one call at a time", [["exchange", vs(one.relayed)], ["floor", vs(one.floor)], ["gateway", vs(one.gateway_only)], ["proxy", vs(one.floor_proxy_only)]]],
  ];
  const shown = (Object.keys(SERIES) as Series[]).filter((k) => groups.some(([, os]) => os.some(([s]) => s === k)));
  const againstName = r.stream.against ? `through the exchange at ${r.stream.against.checkout.split("/").pop()}` : "";
  const W = 720;
  const left = 170;
  const right = 150;
  const top = 66 + Math.ceil(shown.length / 2) * 18;
  const barH = 14;
  const groupH = Math.max(...groups.map(([, os]) => os.length)) * (barH + 3) + 18;
  const H = top + groups.length * groupH + 20;
  // One stalled call can make a p99 ten times the rest: the scale stops at 3x the largest p50,
  // and a p99 beyond it is drawn at the edge with an arrow (its label still gives the value).
  const p50s = groups.flatMap(([, os]) => os.map(([, o]) => o.p50));
  const p99s = groups.flatMap(([, os]) => os.map(([, o]) => o.p99));
  const max = Math.max(1, Math.min(Math.max(...p99s), 3 * Math.max(...p50s)), ...p50s) * 1.05;
  const x = (v: number) => left + (Math.min(max, Math.max(0, v)) / max) * (W - left - right);
  const signed = (v: number) => (v < 0 ? `${v}` : `+${v}`);
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="12" y="22" font-size="15" font-weight="bold">What the relay adds over calling the model directly (ms): p50 bars, p99 ticks</text>`,
    `<text x="12" y="42" fill="#555">${r.cpus} cores, ${r.started_at ? `${r.started_at.slice(0, 16).replace("T", " ")} UTC; ` : ""}${r.model_latency_ms} ms model for the streams, 20 ms one at a time</text>`,
  ];
  // Two to a row, in the order of the bars.
  shown.forEach((k, i) => {
    const s = SERIES[k];
    const lx = 12 + (i % 2) * 240;
    const ly = 54 + Math.floor(i / 2) * 18;
    out.push(`<rect x="${lx}" y="${ly}" width="12" height="12" fill="${s.color}"/>`, `<text x="${lx + 16}" y="${ly + 10}">${k === "against" ? againstName : s.name}</text>`);
  });
  groups.forEach(([label, os], g) => {
    const y0 = top + g * groupH;
    out.push(`<text x="${left - 8}" y="${y0 + 2 * (barH + 3)}" text-anchor="end" font-weight="bold">${label}</text>`);
    os.forEach(([k, o], i) => {
      const y = y0 + i * (barH + 3);
      out.push(`<rect x="${left}" y="${y}" width="${Math.max(1, x(o.p50) - left).toFixed(1)}" height="${barH}" fill="${SERIES[k].color}"/>`);
      // A whisker from the p50 bar's end to the p99 tick.
      out.push(`<line x1="${x(o.p50).toFixed(1)}" x2="${x(o.p99).toFixed(1)}" y1="${y + barH / 2}" y2="${y + barH / 2}" stroke="#999"/>`);
      if (o.p99 > max) {
        const e = x(o.p99);
        out.push(`<path d="M${e - 6} ${y + 1} L${e} ${y + barH / 2} L${e - 6} ${y + barH - 1} Z" fill="#333"/>`);
      } else {
        out.push(`<line x1="${x(o.p99).toFixed(1)}" x2="${x(o.p99).toFixed(1)}" y1="${y}" y2="${y + barH}" stroke="#333" stroke-width="2"/>`);
      }
      out.push(`<text x="${(Math.max(x(o.p50), x(o.p99)) + 6).toFixed(1)}" y="${y + 11}" fill="#333">${signed(o.p50)} / ${signed(o.p99)}</text>`);
    });
  });
  out.push("</svg>");
  return out.join("\n") + "\n";
}

const round = (v: number): number => Math.round(v * 100) / 100;
