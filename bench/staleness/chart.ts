/**
 * A small hand-written SVG of one bench:staleness run: for each max_staleness, drop against
 * pace on the four things that matter: rollouts discarded, the duration bias of what is
 * delivered, the worst lag against its bound, and the rollouts consumed per hour.
 */
import type { StalenessBenchReport } from "./run";

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const COLORS = { drop: "#8c8c8c", pace: "#f38020" } as const;

type Panel = { title: string; value: (r: StalenessBenchReport["runs"][number]["drop"]) => number; format: (v: number) => string; max?: number; mark?: (s: number) => number };

export function renderStalenessChart(r: StalenessBenchReport): string {
  const panels: Panel[] = [
    { title: "rollouts discarded", value: (x) => x.discarded_fraction * 100, format: (v) => `${v.toFixed(1)}%` },
    { title: "mean duration delivered / begun", value: (x) => x.duration_bias, format: (v) => v.toFixed(2), max: 1.15, mark: () => 1 },
    { title: "worst lag (versions); bound dashed", value: (x) => x.lag.max, format: (v) => String(v), mark: (s) => s },
    { title: "rollouts consumed per hour", value: (x) => x.delivered_per_hour, format: (v) => v.toLocaleString("en") },
  ];
  const panelW = 230;
  const left = 70;
  const top = 84;
  const barH = 16;
  const groupH = 2 * barH + 18;
  const W = left + panels.length * panelW + 10;
  const H = top + r.runs.length * groupH + 50;
  const s = r.settings;
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="12" y="22" font-size="15" font-weight="bold">Staleness: drop against pace (simulated ${s.horizonSeconds / 3600} h, seed ${s.seed})</text>`,
    `<text x="12" y="42" fill="#555">${esc(`${s.workers} workers, log-normal durations (median ${s.medianSeconds} s, sigma ${s.sigma}: ${(r.tail_share * 100).toFixed(1)}% over 10x the median), trainer takes ${s.batch} per version, ${s.stepSeconds} s a step`)}</text>`,
  ];
  panels.forEach((p, pi) => {
    const x0 = left + pi * panelW;
    const values = r.runs.flatMap((run) => [p.value(run.drop), p.value(run.pace), p.mark ? p.mark(run.max_staleness) : 0]);
    const max = p.max ?? Math.max(1e-9, ...values) * 1.25;
    const x = (v: number) => x0 + (v / max) * (panelW - 70);
    out.push(`<text x="${x0}" y="${top - 14}" font-weight="bold">${esc(p.title)}</text>`);
    r.runs.forEach((run, i) => {
      const y0 = top + i * groupH;
      (["drop", "pace"] as const).forEach((policy, j) => {
        const v = p.value(run[policy]);
        const y = y0 + j * barH;
        out.push(`<rect x="${x0}" y="${y}" width="${Math.max(1, x(v) - x0).toFixed(1)}" height="${barH - 2}" fill="${COLORS[policy]}"/>`);
        out.push(`<text x="${(x(v) + 4).toFixed(1)}" y="${y + 11}">${esc(p.format(v))}</text>`);
      });
      if (p.mark) {
        const mx = x(p.mark(run.max_staleness));
        out.push(`<line x1="${mx.toFixed(1)}" x2="${mx.toFixed(1)}" y1="${y0 - 2}" y2="${y0 + 2 * barH}" stroke="#000" stroke-dasharray="3,2"/>`);
      }
    });
  });
  r.runs.forEach((run, i) => {
    out.push(`<text x="${left - 8}" y="${top + i * groupH + barH + 4}" text-anchor="end" font-weight="bold">max ${run.max_staleness}</text>`);
  });
  const ly = H - 18;
  out.push(`<rect x="${left}" y="${ly - 10}" width="12" height="12" fill="${COLORS.drop}"/><text x="${left + 16}" y="${ly}">drop</text>`);
  out.push(`<rect x="${left + 70}" y="${ly - 10}" width="12" height="12" fill="${COLORS.pace}"/><text x="${left + 86}" y="${ly}">pace</text>`);
  out.push(`<text x="${left + 140}" y="${ly}" fill="#555">${esc(`flag (no check) reaches a worst lag of ${r.runs[0]?.flag.lag.max ?? 0} versions`)}</text>`);
  out.push(`</svg>`);
  return out.join("\n") + "\n";
}
