/**
 * The engine's Atropos API (the exchange's /e/<engine>/atropos) as this host's run processes
 * reach it. The exchange locks a run's rollout_server_url to that URL without a token, since its
 * views show the config; the agent puts its own token in the path on the host, where the
 * config file is written, so Atropos environments and trainers, which send no headers, get in.
 */

/** `<server>/e/<engine>/t/<token>/atropos`: what the run's processes use. */
export function atroposUrl(engineBaseUrl: string, token: string): string {
  return `${engineBaseUrl}/t/${encodeURIComponent(token)}/atropos`;
}

const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/**
 * The run's YAML with every tokenless URL of the engine's Atropos API (whatever origin the
 * exchange saw the run started from) replaced by `url`, where the URL is a whole value of a
 * block mapping or list (quoted or not, a comment after it, CRLF or LF). One inside another
 * value (another host's URL naming it in its query, say: an operator edits the config) is left
 * as it is, as are other URLs: the token goes nowhere but to the engine.
 */
export function withAtroposUrl(yaml: string, engine: string, url: string): string {
  const own = new RegExp(
    `^([ \\t]*(?:-[ \\t]+)?(?:[^\\s#:"'-][^\\n#]*?:[ \\t]+)?)(["']?)https?://[^\\s"'/]+/e/${escape(encodeURIComponent(engine))}/atropos\\2([ \\t]*(?:#[^\\r\\n]*)?\\r?)$`,
    "gm",
  );
  return yaml.replace(own, (_whole, lead: string, quote: string, tail: string) => `${lead}${quote}${url}${quote}${tail}`);
}

/**
 * `text` as the exchange may be told it: the URL with the agent's token shown as the exchange
 * shows it (no token), and the token itself, wherever else it appears, as ***. What a run
 * reports (its processes' commands and log tails) is read by every viewer and client token.
 */
export function hideToken(text: string, url: string): string {
  const m = /\/t\/([^/]+)\/atropos$/.exec(url);
  if (m === null) return text;
  const encoded = m[1] as string;
  let shown = text.replaceAll(url, url.slice(0, m.index) + "/atropos").replaceAll(encoded, "***");
  const raw = decodeURIComponent(encoded);
  if (raw !== encoded) shown = shown.replaceAll(raw, "***");
  return shown;
}
