/**
 * A small hand-written SVG of one bench:relay-scale run: relayed calls/s against the relay's
 * floor with the 0.8x target, the engine's requests per call against the 0.1 bound, and a
 * saturated engine's cycles/s with and without relayed calls flowing.
 */
export type ScaleChartInput = {
  claims: number;
  cpus: number;
  started_at: string;
  /** The engine's ledger capture: with it on, every relayed call is also recorded. */
  capture: string;
  steady: { relayed_calls_per_s: number; floor_calls_per_s: number; engine_requests_per_call: number; concurrency: number };
  saturated: { cycles_per_s_alone: number; cycles_per_s_with_relay: number; relayed_claims: number; rounds: { relayed_calls_per_s: number }[] };
};

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

type Bar = { label: string; value: number; color: string; text: string };

/** One panel of horizontal bars on its own scale, with an optional target line. */
function panel(out: string[], y0: number, title: string, bars: Bar[], target?: { value: number; label: string }): number {
  const left = 230;
  const width = 400;
  const max = Math.max(...bars.map((b) => b.value), target?.value ?? 0) * 1.1 || 1;
  const x = (v: number) => left + (v / max) * width;
  out.push(`<text x="20" y="${y0}" font-size="13" font-weight="bold">${esc(title)}</text>`);
  bars.forEach((b, i) => {
    const y = y0 + 12 + i * 30;
    out.push(`<text x="${left - 8}" y="${y + 15}" text-anchor="end">${esc(b.label)}</text>`);
    out.push(`<rect x="${left}" y="${y}" width="${Math.max(1, x(b.value) - left)}" height="20" fill="${b.color}"/>`);
    out.push(`<text x="${x(b.value) + 6}" y="${y + 15}">${esc(b.text)}</text>`);
  });
  const bottom = y0 + 12 + bars.length * 30;
  if (target) {
    out.push(`<line x1="${x(target.value)}" x2="${x(target.value)}" y1="${y0 + 6}" y2="${bottom}" stroke="#c00" stroke-dasharray="4 3"/>`);
    out.push(`<text x="${x(target.value)}" y="${bottom + 12}" fill="#c00" text-anchor="middle">${esc(target.label)}</text>`);
  }
  return bottom + 36;
}

export function renderScaleChart(r: ScaleChartInput): string {
  const out: string[] = [];
  const s = r.steady;
  const t = r.saturated;
  const flowing = Math.round(t.rounds.reduce((a, x) => a + x.relayed_calls_per_s, 0) / Math.max(1, t.rounds.length));
  let y = 60;
  y = panel(out, y, `Calls/s, ${r.claims} claims calling a zero-latency model, ${s.concurrency} calls in flight`, [
    { label: "through the exchange", value: s.relayed_calls_per_s, color: "#f38020", text: `${s.relayed_calls_per_s}/s` },
    { label: "floor: bare Worker + bare proxy", value: s.floor_calls_per_s, color: "#8c8c8c", text: `${s.floor_calls_per_s}/s` },
  ], { value: 0.8 * s.floor_calls_per_s, label: "0.8x floor" });
  y = panel(out, y, "The engine's requests per relayed call", [
    { label: "with the claim gate", value: s.engine_requests_per_call, color: "#f38020", text: s.engine_requests_per_call.toFixed(4) },
    { label: "one admission per call", value: 1, color: "#c8c8c8", text: "1" },
  ], { value: 0.1, label: "0.1 bound" });
  y = panel(out, y, "Claim -> end -> register cycles/s on a saturated engine", [
    { label: "alone", value: t.cycles_per_s_alone, color: "#8c8c8c", text: `${t.cycles_per_s_alone}/s` },
    { label: `with ${flowing} relayed calls/s`, value: t.cycles_per_s_with_relay, color: "#f38020", text: `${t.cycles_per_s_with_relay}/s` },
  ], { value: 0.9 * t.cycles_per_s_alone, label: "0.9x alone" });
  const H = y;
  const W = 720;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="20" y="24" font-size="15" font-weight="bold">One engine's relay at scale (npm run bench:relay-scale)</text>`,
    `<text x="20" y="42" fill="#555">${esc(`${r.cpus} cores, ${r.started_at.slice(0, 16).replace("T", " ")} UTC; ledger capture ${r.capture}; medians of the rounds`)}</text>`,
    ...out,
    `</svg>`,
  ].join("\n");
}
