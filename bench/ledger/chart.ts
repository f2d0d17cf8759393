/**
 * The export as a timeline on two axes: trajectories exported so far (left) and the workerd
 * processes' resident memory (right), so a Worker that buffered the export would show as RSS
 * climbing with the progress line.
 */
export type LedgerChartInput = {
  /** One sample every ~100 ms of the export: seconds since it started, trajectories read, workerd RSS in MB. */
  samples: { t: number; exported: number; rss_mb: number }[];
  total: number;
  title: string;
  summary: string;
};

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

export function renderLedgerChart(r: LedgerChartInput): string {
  const W = 760;
  const H = 320;
  const left = 64;
  const right = 64;
  const top = 56;
  const bottom = 40;
  const seconds = Math.max(1, ...r.samples.map((s) => s.t));
  const maxExported = Math.max(1, r.total, ...r.samples.map((s) => s.exported)) * 1.05;
  // RSS from zero, so that a flat line looks flat and a doubling looks like one.
  const maxRss = Math.max(1, ...r.samples.map((s) => s.rss_mb)) * 1.2;
  const x = (t: number) => left + (t / seconds) * (W - left - right);
  const yl = (v: number) => top + (1 - v / maxExported) * (H - top - bottom);
  const yr = (v: number) => top + (1 - v / maxRss) * (H - top - bottom);
  const path = (ys: (s: LedgerChartInput["samples"][number]) => number) =>
    r.samples.map((s, i) => `${i === 0 ? "M" : "L"}${x(s.t).toFixed(1)},${ys(s).toFixed(1)}`).join(" ");
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="#fff"/>`);
  out.push(`<text x="${left}" y="20" font-size="15" font-weight="bold">${esc(r.title)}</text>`);
  out.push(`<text x="${left}" y="38" fill="#555">${esc(r.summary)}</text>`);
  for (let i = 0; i <= 4; i++) {
    const f = i / 4;
    const y = top + (1 - f) * (H - top - bottom);
    out.push(`<line x1="${left}" x2="${W - right}" y1="${y.toFixed(1)}" y2="${y.toFixed(1)}" stroke="#eee"/>`);
    out.push(`<text x="${left - 6}" y="${(y + 4).toFixed(1)}" text-anchor="end" fill="#f38020">${Math.round((maxExported / 1.05) * f).toLocaleString("en")}</text>`);
    out.push(`<text x="${W - right + 6}" y="${(y + 4).toFixed(1)}" fill="#2a6ebb">${Math.round(maxRss * f)} MB</text>`);
  }
  const step = seconds > 60 ? 20 : seconds > 20 ? 5 : seconds > 5 ? 2 : 0.5;
  for (let s = 0; s <= seconds; s += step) out.push(`<text x="${x(s).toFixed(1)}" y="${H - bottom + 16}" text-anchor="middle" fill="#555">${s} s</text>`);
  out.push(`<path d="${path((s) => yl(s.exported))}" fill="none" stroke="#f38020" stroke-width="2"/>`);
  out.push(`<path d="${path((s) => yr(s.rss_mb))}" fill="none" stroke="#2a6ebb" stroke-width="2"/>`);
  out.push(`<text x="${left}" y="${H - 8}" fill="#f38020">trajectories exported (left)</text>`);
  out.push(`<text x="${W - right - 200}" y="${H - 8}" fill="#2a6ebb">workerd RSS, all processes (right)</text>`);
  out.push(`</svg>`);
  return out.join("\n");
}
