// @ts-check
/**
 * Sorting, filtering and keyboard navigation of the hotspot (sites) table, mirroring the
 * plugin's query module: the columns and their first-click order come from its catalogue
 * route, and ties keep the order the plugin sent (the report's ranking).
 */
import { siteSortOrder } from "./catalogue.js";

/**
 * The order a column starts with when first clicked (the plugin's: costs descending,
 * names ascending).
 * @param {string} key
 * @returns {"asc" | "desc"}
 */
export function defaultOrder(key) {
  return siteSortOrder(key);
}

/**
 * Next sort after a click on a column header: the same column flips the order, a new
 * column starts with its natural order.
 * @param {{sort: string, order: "asc" | "desc"}} current
 * @param {string} key
 * @returns {{sort: string, order: "asc" | "desc"}}
 */
export function nextSort(current, key) {
  if (current.sort === key) return { sort: key, order: current.order === "asc" ? "desc" : "asc" };
  return { sort: key, order: defaultOrder(key) };
}

/**
 * @param {any} site
 * @param {string} key
 * @returns {string | number | null}
 */
function sortValue(site, key) {
  if (key === "ops") return Array.isArray(site.ops) ? site.ops.join(" ") : null;
  const v = site[key];
  return v === undefined ? null : v;
}

/**
 * A sorted copy of `sites`. Stable: ties keep the order the plugin sent (its ranking);
 * missing values (no source line) always go last.
 * @template T
 * @param {T[]} sites
 * @param {string} key
 * @param {"asc" | "desc"} order
 * @returns {T[]}
 */
export function sortSites(sites, key, order) {
  const dir = order === "asc" ? 1 : -1;
  const indexed = sites.map((s, i) => ({ s, i }));
  indexed.sort((a, b) => {
    const c = compareValues(sortValue(a.s, key), sortValue(b.s, key), dir);
    return c !== 0 ? c : a.i - b.i;
  });
  return indexed.map((x) => x.s);
}

/**
 * @param {string | number | null} a
 * @param {string | number | null} b
 * @param {number} dir 1 ascending, -1 descending
 */
function compareValues(a, b, dir) {
  const aMissing = a === null || a === "";
  const bMissing = b === null || b === "";
  if (aMissing || bMissing) return aMissing === bMissing ? 0 : aMissing ? 1 : -1;
  if (typeof a === "number" && typeof b === "number") return (a - b) * dir;
  return String(a).localeCompare(String(b), "en", { numeric: true, sensitivity: "base" }) * dir;
}

/**
 * Sites matching the kind filter and the free-text filter (case-insensitive, matched
 * against file, function, operators, APIs and kind; several words must all match).
 * @template T
 * @param {T[]} sites
 * @param {{kind?: string, q?: string}} filter
 * @returns {T[]}
 */
export function filterSites(sites, filter) {
  const kind = filter.kind || "";
  const words = (filter.q || "").toLowerCase().split(/\s+/).filter(Boolean);
  return sites.filter((site) => {
    const s = /** @type {any} */ (site);
    if (kind && s.kind !== kind) return false;
    if (!words.length) return true;
    const hay = [s.file, s.func, s.kind, s.line, ...(s.ops || []), ...(s.apis || [])]
      .filter((x) => x !== null && x !== undefined)
      .join(" ")
      .toLowerCase();
    return words.every((w) => hay.includes(w));
  });
}

/**
 * Row index after a navigation key in a list of `length` rows; null when the key does
 * not move. `current` -1 means no row is focused yet.
 * @param {number} current
 * @param {string} key KeyboardEvent.key
 * @param {number} length
 * @param {number} [page] rows per PageUp/PageDown
 * @returns {number | null}
 */
export function nextRowIndex(current, key, length, page = 10) {
  if (length <= 0) return null;
  const last = length - 1;
  switch (key) {
    case "ArrowDown":
    case "j":
      return current < 0 ? 0 : Math.min(last, current + 1);
    case "ArrowUp":
    case "k":
      return current < 0 ? 0 : Math.max(0, current - 1);
    case "Home":
      return 0;
    case "End":
      return last;
    case "PageDown":
      return Math.min(last, Math.max(0, current) + page);
    case "PageUp":
      return Math.max(0, current - page);
    default:
      return null;
  }
}
