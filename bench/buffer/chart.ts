/**
 * A small hand-written SVG of one bench:buffer run: get_rollout_data p50 and p99 with 100
 * and with 10,000 pending groups, side by side, and the ingestion rate in the title.
 */
import type { BufferBenchReport } from "./report";

export function renderBufferChart(r: BufferBenchReport): string {
  const W = 640;
  const left = 150;
  const top = 64;
  const barH = 20;
  const rows = r.pulls.flatMap((p) => [
    { label: `${p.pending_groups.toLocaleString("en")} pending, p50`, v: p.ready_pull_ms.p50, color: "#f38020" },
    { label: `${p.pending_groups.toLocaleString("en")} pending, p99`, v: p.ready_pull_ms.p99, color: "#f9b27a" },
  ]);
  const H = top + rows.length * (barH + 8) + 30;
  const max = Math.max(1, ...rows.map((x) => x.v)) * 1.15;
  const x = (v: number) => left + (v / max) * (W - left - 80);
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="12" y="22" font-size="15" font-weight="bold">get_rollout_data latency (ms), one ready group per pull</text>`,
    `<text x="12" y="42" fill="#555">${r.machine.cores} cores, ${r.started_at.slice(0, 16).replace("T", " ")} UTC; ingestion ${r.ingest.rows_per_s} rows/s (batches of 100, ${r.ingest.posters} posters)</text>`,
  ];
  rows.forEach((row, i) => {
    const y = top + i * (barH + 8);
    out.push(`<text x="${left - 8}" y="${y + 14}" text-anchor="end">${row.label}</text>`);
    out.push(`<rect x="${left}" y="${y}" width="${Math.max(1, x(row.v) - left).toFixed(1)}" height="${barH}" fill="${row.color}"/>`);
    out.push(`<text x="${(x(row.v) + 5).toFixed(1)}" y="${y + 14}">${row.v} ms</text>`);
  });
  out.push(`<text x="12" y="${H - 10}" fill="#555">10,000 over 100 pending: p50 ${r.ratios.ready_p50}x, p99 ${r.ratios.ready_p99}x (a log factor would be 2x)</text>`);
  out.push(`</svg>`);
  return out.join("\n") + "\n";
}
