/**
 * The chaos run as a timeline: results acknowledged and delivered per second, with the faults
 * marked, so a stall after a restart shows as a gap.
 */
export type ChaosChartInput = {
  t0: number;
  /** When each delivery reached a runner (ms since the epoch), duplicates included. */
  receipts: number[];
  /** When each acknowledged result was answered. */
  acknowledged: number[];
  marks: { at: number; label: string }[];
  summary: string;
};

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

function perSecond(times: number[], t0: number, seconds: number): number[] {
  const bins = new Array<number>(seconds).fill(0);
  for (const t of times) {
    const i = Math.floor((t - t0) / 1000);
    if (i >= 0 && i < seconds) bins[i]! += 1;
  }
  return bins;
}

export function renderChaosChart(r: ChaosChartInput): string {
  // By reduce, not spread: a long run's receipts (~150,000) overflow the stack as arguments.
  const end = r.marks.reduce((m, mark) => Math.max(m, mark.at), r.receipts.reduce((m, t) => Math.max(m, t), r.t0 + 1000));
  const seconds = Math.ceil((end - r.t0) / 1000) + 1;
  const delivered = perSecond(r.receipts, r.t0, seconds);
  const acked = perSecond(r.acknowledged, r.t0, seconds);
  const W = 760;
  const H = 300;
  const left = 56;
  const right = 20;
  const top = 50;
  const bottom = 40;
  const max = [...delivered, ...acked].reduce((m, v) => Math.max(m, v), 1) * 1.1;
  const x = (s: number) => left + (s / seconds) * (W - left - right);
  const y = (v: number) => top + (1 - v / max) * (H - top - bottom);
  const line = (bins: number[]) => bins.map((v, i) => `${i === 0 ? "M" : "L"}${x(i + 0.5).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="#fff"/>`);
  out.push(`<text x="${left}" y="20" font-size="15" font-weight="bold">Results per second through SIGKILLs of the exchange and the agent</text>`);
  out.push(`<text x="${left}" y="38" fill="#555">${esc(r.summary)}</text>`);
  for (let i = 0; i <= 4; i++) {
    const v = (max / 1.1) * (i / 4);
    out.push(`<line x1="${left}" x2="${W - right}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="#eee"/>`);
    out.push(`<text x="${left - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end" fill="#555">${Math.round(v)}</text>`);
  }
  const step = seconds > 60 ? 20 : 10;
  for (let s = 0; s <= seconds; s += step) out.push(`<text x="${x(s).toFixed(1)}" y="${H - bottom + 16}" text-anchor="middle" fill="#555">${s} s</text>`);
  r.marks.forEach((m, i) => {
    const mx = x((m.at - r.t0) / 1000);
    out.push(`<line x1="${mx.toFixed(1)}" x2="${mx.toFixed(1)}" y1="${top}" y2="${H - bottom}" stroke="#c00" stroke-dasharray="4,3"/>`);
    // A mark near the right edge gets its label on its left, where there is room for it.
    const nearEnd = mx > W - right - 90;
    out.push(`<text x="${(nearEnd ? mx - 3 : mx + 3).toFixed(1)}" y="${top + 12 + (i % 2) * 14}" fill="#c00"${nearEnd ? ' text-anchor="end"' : ""}>${esc(m.label)}</text>`);
  });
  out.push(`<path d="${line(acked)}" fill="none" stroke="#8c8c8c" stroke-width="1.5"/>`);
  out.push(`<path d="${line(delivered)}" fill="none" stroke="#f38020" stroke-width="2"/>`);
  out.push(`<text x="${W - right - 230}" y="${H - 8}" fill="#f38020">delivered to runners</text>`);
  out.push(`<text x="${W - right - 100}" y="${H - 8}" fill="#8c8c8c">acknowledged</text>`);
  out.push(`</svg>`);
  return out.join("\n");
}
