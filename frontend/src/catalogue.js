// @ts-check
/**
 * The sync kinds as the plugin's `catalogue` route describes them (label, colours,
 * description): the dashboard keeps no copy of its own, so a kind added to
 * tb_syncfinder/catalogue.py shows here with no frontend edit. Until the catalogue has
 * loaded (or if it cannot), kinds read as their de-underscored names on a neutral badge.
 */

/** @typedef {{name: string, label: string, summary?: string, description?: string, colour?: string, colour_dark?: string}} KindInfo */

/** @type {KindInfo[]} */
let kinds = [];
/** Sortable site columns and the order a first click starts with (the plugin's query module). */
/** @type {Record<string, "asc" | "desc">} */
let siteSorts = {};
/** The fields a site's occurrences sort by, each with its first click's order (the same). */
/** @type {Record<string, "asc" | "desc">} */
let syncSorts = {};

/** Kind names are identifiers; anything else is never put into a CSS rule. */
const SAFE_NAME = /^[a-z0-9_]+$/;
const SAFE_COLOUR = /^#[0-9a-fA-F]{3,8}$/;

/**
 * Take the catalogue the plugin served.
 * @param {{kinds?: KindInfo[]} | null | undefined} data
 */
export function setCatalogue(data) {
  kinds = Array.isArray(data?.kinds) ? data.kinds.filter((k) => k && typeof k.name === "string") : [];
  const sorts = /** @type {any} */ (data)?.site_sorts;
  siteSorts = sorts && typeof sorts === "object" ? sorts : {};
  const syncs = /** @type {any} */ (data)?.sync_sorts;
  syncSorts = syncs && typeof syncs === "object" ? syncs : {};
}

/**
 * The order a site column starts with when first clicked, as the plugin sorts it; "desc"
 * for a column the plugin does not list (or before the catalogue loaded).
 * @param {string} key
 * @returns {"asc" | "desc"}
 */
export function siteSortOrder(key) {
  return siteSorts[key] === "asc" ? "asc" : "desc";
}

/**
 * The direction a site's occurrences sorted by `key` are listed in, as the plugin's
 * `sync_sorts` gives it (costs largest first); "desc" for a field it does not list (or
 * before the catalogue loaded): every order the detail offers is a cost.
 * @param {string} key
 * @returns {"asc" | "desc"}
 */
export function syncSortOrder(key) {
  return syncSorts[key] === "asc" ? "asc" : "desc";
}

/**
 * Whether the plugin sorts sites by this column (any column while no catalogue is loaded:
 * the table still sorts, by the dashboard's own columns).
 * @param {string} key
 */
export function isSiteSort(key) {
  return Object.keys(siteSorts).length === 0 || Object.prototype.hasOwnProperty.call(siteSorts, key);
}

/** @param {string} name */
function find(name) {
  return kinds.find((k) => k.name === name);
}

/**
 * @param {string | null | undefined} kind
 * @returns {string}
 */
export function kindLabel(kind) {
  if (!kind) return "unknown";
  return find(kind)?.label || kind.replace(/_/g, " ");
}

/**
 * What a kind means, for tooltips ("" when unknown).
 * @param {string | null | undefined} kind
 * @returns {string}
 */
export function kindDescription(kind) {
  return (kind && find(kind)?.description) || "";
}

/**
 * Position of a kind in the catalogue's listing order; unknown kinds last.
 * @param {string} kind
 * @returns {number}
 */
export function kindRank(kind) {
  const i = kinds.findIndex((k) => k.name === kind);
  return i < 0 ? kinds.length : i;
}

/**
 * CSS rules giving each kind's badge its colours (light and dark theme).
 * @returns {string}
 */
export function kindStyles() {
  const rules = [];
  for (const k of kinds) {
    if (!SAFE_NAME.test(k.name)) continue;
    if (k.colour && SAFE_COLOUR.test(k.colour)) rules.push(`.sa-badge.k-${k.name} { background: ${k.colour}; }`);
    if (k.colour_dark && SAFE_COLOUR.test(k.colour_dark)) {
      rules.push(`:root[data-theme="dark"] .sa-badge.k-${k.name} { background: ${k.colour_dark}; }`);
    }
  }
  return rules.join("\n");
}
