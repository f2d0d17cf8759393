/** Numbers, durations and ids the way a person reads them on the dashboard. */
export function formatModule() {
  /** A reward or other real number: 3 significant digits, no exponent for ordinary sizes. */
  function num(x: number | null | undefined): string {
    if (x === null || x === undefined || !Number.isFinite(x)) return "–";
    if (x === 0) return "0";
    const a = Math.abs(x);
    if (a >= 1000 || a < 0.001) return x.toExponential(2);
    return String(Number(x.toPrecision(3)));
  }

  /** A count: 950, 12.3k, 4.5M (999,950 rounds to 1M, not to 1000k). */
  function count(n: number): string {
    if (n < 10_000) return String(n);
    const k = Number((n / 1000).toPrecision(3));
    if (k < 1000) return `${k}k`;
    return `${Number((n / 1_000_000).toPrecision(3))}M`;
  }

  /** A span of seconds: 4.2 s, 3 min 10 s, 2 h 5 min, 3 d 4 h. Rounded whole first, so never "1 min 60 s". */
  function duration(seconds: number): string {
    if (!Number.isFinite(seconds)) return "–";
    const s = Math.max(0, seconds);
    if (s < 9.95) return `${s.toFixed(1)} s`;
    const whole = Math.round(s);
    if (whole < 60) return `${whole} s`;
    if (whole < 3600) return `${Math.floor(whole / 60)} min ${whole % 60} s`;
    if (whole < 86400) return `${Math.floor(whole / 3600)} h ${Math.floor((whole % 3600) / 60)} min`;
    return `${Math.floor(whole / 86400)} d ${Math.floor((whole % 86400) / 3600)} h`;
  }

  /** A span of milliseconds: 850 ms, 1.25 s, then as `duration`. */
  function ms(x: number): string {
    if (!Number.isFinite(x)) return "–";
    if (Math.abs(x) < 1000) return `${Math.round(x)} ms`;
    if (Math.abs(x) < 10_000) return `${(x / 1000).toFixed(2)} s`;
    return duration(x / 1000);
  }

  /** A size in bytes: 900 bytes, 512 KiB, 1.5 MiB, 4 GiB (3 significant digits). */
  function bytes(n: number): string {
    const units = ["bytes", "KiB", "MiB", "GiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i++;
    }
    return `${Number(n.toPrecision(3))} ${units[i]}`;
  }

  /** A moment (ms since the epoch) as the reader's clock and date say it. */
  const at = (msSinceEpoch: number): string => new Date(msSinceEpoch).toLocaleString();

  /** "12 s ago" from unix seconds. */
  const ago = (unixSeconds: number, nowMs: number): string => `${duration(nowMs / 1000 - unixSeconds)} ago`;

  /** Long ids are shown by their first characters; the full id is in the element's title. */
  const shortId = (id: string): string => (id.length > 12 ? `${id.slice(0, 8)}…` : id);

  /** ENGINE.ROLLING -> ROLLING; ENGINE.WEIGHT_SYNCING -> WEIGHT SYNCING. */
  const status = (s: string): string => s.replace(/^ENGINE\./, "").replace(/_/g, " ");

  return { num, count, duration, ms, bytes, at, ago, shortId, status };
}
export type Format = ReturnType<typeof formatModule>;
