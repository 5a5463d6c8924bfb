// @ts-check
/**
 * JSON fetches from the plugin's routes (relative URLs only), with a per-URL cache of
 * immutable answers and errors that carry the server's message and hint.
 */
import { apiUrl } from "./query.js";

export class ApiError extends Error {
  /**
   * @param {number} status HTTP status, 0 for a network failure
   * @param {string} message
   * @param {string | null} [hint]
   */
  constructor(status, message, hint = null) {
    super(message);
    this.status = status;
    this.hint = hint;
  }
}

/** @type {Map<string, Promise<any>>} */
const cache = new Map();

/**
 * GET a route's JSON. `fresh` skips the cache (for `runs`, which changes while loading);
 * `keep` says whether an answer is kept (one that says the thing asked for is not there
 * yet, as a failed answer is not).
 * @param {string} route
 * @param {Record<string, any>} [params]
 * @param {{fresh?: boolean, keep?: (body: any) => boolean}} [opts]
 * @returns {Promise<any>}
 */
export function getJson(route, params = {}, opts = {}) {
  const url = apiUrl(route, params);
  if (!opts.fresh && cache.has(url)) return /** @type {Promise<any>} */ (cache.get(url));
  const p = fetchJson(url);
  if (!opts.fresh) {
    cache.set(url, p);
    const forget = () => {
      if (cache.get(url) === p) cache.delete(url);
    };
    // Failed answers are not kept: a trace still loading may answer next time.
    p.then((body) => (opts.keep && !opts.keep(body) ? forget() : undefined), forget);
  }
  return p;
}

/** Forget cached answers (after the runs list changed: a run may have new traces). */
export function clearCache() {
  cache.clear();
}

/** @param {string} url */
async function fetchJson(url) {
  let res;
  try {
    res = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  } catch (e) {
    throw new ApiError(0, `cannot reach TensorBoard (${url}): ${e instanceof Error ? e.message : e}`);
  }
  let body = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  if (!res.ok) {
    const msg = body && typeof body.error === "string" ? body.error : `HTTP ${res.status} for ${url}`;
    throw new ApiError(res.status, msg, body && typeof body.hint === "string" ? body.hint : null);
  }
  if (body === null) throw new ApiError(res.status, `not JSON: ${url}`);
  return body;
}
