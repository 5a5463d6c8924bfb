// @ts-check
/**
 * URLs of the plugin's JSON routes. Always relative (no leading slash, no host): the
 * dashboard's iframe has `<base href="plugin/sync_advisor/">`, so `runs` resolves to
 * `data/plugin/sync_advisor/runs` under any `--path_prefix` or reverse proxy.
 */

/**
 * @param {string} route e.g. "sites"
 * @param {Record<string, string | number | boolean | null | undefined>} [params]
 * @returns {string}
 */
export function apiUrl(route, params = {}) {
  if (!/^[a-z_]+$/.test(route)) throw new Error(`bad route name: ${route}`);
  const parts = [];
  for (const [key, value] of Object.entries(params)) {
    if (value === null || value === undefined || value === "") continue;
    const text = typeof value === "boolean" ? (value ? "1" : "0") : String(value);
    parts.push(`${encodeURIComponent(key)}=${encodeURIComponent(text)}`);
  }
  return parts.length ? `${route}?${parts.join("&")}` : route;
}

/**
 * The run/worker/span selection as query parameters (absent worker/span = all).
 * @param {{run: string | null, worker: string | null, span: string | null}} sel
 */
export function selection(sel) {
  return { run: sel.run, worker: sel.worker, span: sel.span };
}
