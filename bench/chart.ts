/**
 * A small hand-written SVG of one bench run: cycles/s per load configuration, engine next to
 * the limit reference, with the 0.8x-reference target and the seed's figures marked.
 */
import type { BenchReport } from "./report";

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

/** The seed's cycles/s from the issue, per configuration (measured with 256 or 10,000 episodes). */
const SEED_CYCLES: Record<string, number> = { "32x256": 160, "128x256": 160, "32x10000": 55 };

export function renderChart(r: BenchReport): string {
  const rows = r.comparison.per_load;
  const W = 720;
  const left = 110;
  const right = 90;
  const top = 56;
  const groupH = 74;
  const barH = 22;
  const H = top + rows.length * groupH + 56;
  const max = Math.max(1, ...rows.flatMap((p) => [p.engine_cycles_per_s ?? 0, p.reference_cycles_per_s ?? 0, SEED_CYCLES[p.label] ?? 0])) * 1.08;
  const x = (v: number) => left + (v / max) * (W - left - right);
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="#fff"/>`);
  out.push(`<text x="${left}" y="22" font-size="15" font-weight="bold">Cycles/s (claim + end + register), engine vs limit reference</text>`);
  out.push(
    `<text x="${left}" y="40" fill="#555">${esc(`${r.machine.cores} cores, ${r.settings.duration_s} s per bar (median of ${r.settings.rounds} rounds), ${r.started_at.slice(0, 16).replace("T", " ")} UTC; clients x registered episodes`)}</text>`,
  );
  rows.forEach((p, i) => {
    const y0 = top + i * groupH;
    out.push(`<text x="${left - 8}" y="${y0 + barH + 4}" text-anchor="end" font-weight="bold">${esc(p.label)}</text>`);
    const bars: [string, number | undefined, string][] = [
      ["engine", p.engine_cycles_per_s, "#f38020"],
      ["reference", p.reference_cycles_per_s, "#8c8c8c"],
    ];
    bars.forEach(([name, v, color], j) => {
      const y = y0 + j * (barH + 4);
      if (v === undefined) return;
      out.push(`<rect x="${left}" y="${y}" width="${Math.max(1, x(v) - left).toFixed(1)}" height="${barH}" fill="${color}"/>`);
      out.push(`<text x="${(x(v) + 5).toFixed(1)}" y="${y + 15}">${esc(`${v} ${name}`)}</text>`);
    });
    if (p.reference_cycles_per_s !== undefined) {
      const tx = x(0.8 * p.reference_cycles_per_s);
      out.push(`<line x1="${tx.toFixed(1)}" x2="${tx.toFixed(1)}" y1="${y0 - 3}" y2="${y0 + barH + 3}" stroke="#000" stroke-dasharray="3,2"/>`);
    }
    const seed = SEED_CYCLES[p.label];
    if (seed !== undefined) {
      const sx = x(seed);
      out.push(`<line x1="${sx.toFixed(1)}" x2="${sx.toFixed(1)}" y1="${y0 - 3}" y2="${y0 + 2 * barH + 7}" stroke="#c00" stroke-width="2"/>`);
    }
  });
  const ly = H - 24;
  out.push(`<rect x="${left}" y="${ly - 10}" width="12" height="12" fill="#f38020"/><text x="${left + 16}" y="${ly}">engine</text>`);
  out.push(`<rect x="${left + 80}" y="${ly - 10}" width="12" height="12" fill="#8c8c8c"/><text x="${left + 96}" y="${ly}">limit reference</text>`);
  out.push(`<line x1="${left + 210}" x2="${left + 210}" y1="${ly - 11}" y2="${ly + 2}" stroke="#000" stroke-dasharray="3,2"/><text x="${left + 216}" y="${ly}">0.8x reference (target)</text>`);
  out.push(`<line x1="${left + 380}" x2="${left + 380}" y1="${ly - 11}" y2="${ly + 2}" stroke="#c00" stroke-width="2"/><text x="${left + 386}" y="${ly}">seed's Python server</text>`);
  out.push(`</svg>`);
  return out.join("\n") + "\n";
}
