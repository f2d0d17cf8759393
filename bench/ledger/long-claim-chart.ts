/**
 * Reading one long claim's trajectory: workerd's resident memory at peak above its start, per
 * number of turns, as bars, this tree beside an earlier run when one is given; a read that
 * crashed workerd (its heap past the limit) is marked as such.
 */
export type LongClaimPoint = { turns: number; claims?: number; answer_mb: number; workerd_rss_mb: { peak_minus_start: number } } | { turns: number; claims?: number; failed: string };
/** `by`: what the bars are per, the claim's turns (the default) or the claims of a pull. */
export type LongClaimChartInput = { title: string; summary: string; by?: "turns" | "claims"; runs: { name: string; points: LongClaimPoint[] }[] };

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const COLORS = ["#2a6ebb", "#f38020", "#6a9f3a"];

export function renderLongClaimChart(r: LongClaimChartInput): string {
  const by = r.by ?? "turns";
  const keyOf = (p: LongClaimPoint): number => (by === "claims" ? (p.claims ?? 1) : p.turns);
  const turns = [...new Set(r.runs.flatMap((run) => run.points.map(keyOf)))].sort((a, b) => a - b);
  // Wide enough for a pull's title on one line.
  const W = 900;
  const left = 110;
  const right = 40;
  const top = 60;
  const barH = 18;
  const groupH = r.runs.length * barH + 18;
  const H = top + turns.length * groupH + 50;
  const max = Math.max(1, ...r.runs.flatMap((run) => run.points.map((p) => ("failed" in p ? 0 : p.workerd_rss_mb.peak_minus_start)))) * 1.25;
  const x = (v: number) => left + (Math.max(0, v) / max) * (W - left - right);
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="#fff"/>`);
  out.push(`<text x="12" y="22" font-size="15" font-weight="bold">${esc(r.title)}</text>`);
  out.push(`<text x="12" y="40" fill="#555">${esc(r.summary)}</text>`);
  turns.forEach((t, g) => {
    const y0 = top + g * groupH;
    out.push(`<text x="${left - 8}" y="${y0 + (r.runs.length * barH) / 2 + 4}" text-anchor="end">${t} ${by}</text>`);
    r.runs.forEach((run, k) => {
      const p = run.points.find((q) => keyOf(q) === t);
      if (p === undefined) return;
      const y = y0 + k * barH;
      if ("failed" in p) {
        out.push(`<text x="${left + 4}" y="${y + barH - 6}" fill="#c00" font-weight="bold">crashed: out of memory</text>`);
        return;
      }
      const v = p.workerd_rss_mb.peak_minus_start;
      out.push(`<rect x="${left}" y="${y}" width="${(x(v) - left).toFixed(1)}" height="${barH - 3}" fill="${COLORS[k % COLORS.length]}"/>`);
      out.push(`<text x="${(x(v) + 4).toFixed(1)}" y="${y + barH - 6}" fill="#333">${Math.round(v)} MB (answer ${Math.round(p.answer_mb)} MB)</text>`);
    });
  });
  r.runs.forEach((run, k) => {
    out.push(`<rect x="${left + k * 300}" y="${H - 24}" width="12" height="12" fill="${COLORS[k % COLORS.length]}"/>`);
    out.push(`<text x="${left + k * 300 + 18}" y="${H - 14}">${esc(run.name)}</text>`);
  });
  out.push(`</svg>`);
  return out.join("\n");
}
