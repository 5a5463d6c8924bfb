// @ts-check
/**
 * Sorting, filtering and keyboard navigation of the hotspot (sites) table, mirroring the
 * plugin's query module: the columns and their first-click order come from its catalogue
 * route, and ties keep the order the plugin sent (the report's ranking).
 */
import { kindLabel, siteSortOrder } from "./catalogue.js";
import { afterReadText, cellName, cellPlace, guardPhrase, siteFallbackLabel } from "./format.js";

/**
 * The order a column starts with when first clicked (the plugin's: costs descending,
 * names ascending).
 * @param {string} key
 * @returns {"asc" | "desc"}
 */
export function defaultOrder(key) {
  return key === UNPROFILED_SORT ? "desc" : siteSortOrder(key);
}

/**
 * The column of each site's saving without the profiler: the dashboard's own, from the
 * `unprofiled` route's answer for the step time given (the plugin's site list has no such
 * figure to sort by), largest first.
 */
export const UNPROFILED_SORT = "unprofiled_predicted_saving_per_step_us";

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
  // The location as the cell shows it: `file:line` (lines in numeric order), or for a site
  // without a Python stack the operator or call named in its place.
  if (key === "file") return site.file ? `${site.file}:${site.line ?? ""}` : site.ops?.[0] || site.apis?.[0] ? siteFallbackLabel(site) : null;
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
 * against file, `file:line`, function, operators, APIs and kind; several words must all
 * match).
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
    // `file:line` too, as the table shows the location (`seg.py:82` must find it).
    const where = s.file ? `${s.file}:${s.line ?? ""}` : null;
    const hay = [s.file, where, s.func, s.kind, s.line, ...(s.ops || []), ...(s.apis || [])]
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

/** The figures a step filter replaces by the step's own (the rest stay the whole run's). */
export const STEP_FIGURES = Object.freeze(["count", "host_wait_us", "gpu_idle_us"]);

/**
 * The sites as the table shows them with a step selected: the count, host wait and GPU idle
 * of that step alone (the `in_step` the plugin adds to a step-filtered list), so the cells
 * and the sorting by them are the step's, as the chart's bar is; `whole` keeps the run's.
 * The predicted saving, the share and the per-step mean stay the whole run's. Without a step,
 * or from a plugin that does not send `in_step`, the sites are returned as they are and
 * `inStep` is false (the figures are then the whole run's and must be labelled so).
 * @template T
 * @param {T[]} sites
 * @param {number | null} step
 * @returns {{sites: T[], inStep: boolean}}
 */
export function sitesInStep(sites, step) {
  if (step === null || step === undefined) return { sites, inStep: false };
  const of = (/** @type {any} */ s) => (s && s.in_step && s.in_step.step === step ? s.in_step : null);
  if (!sites.every(of)) return { sites, inStep: false };
  return {
    sites: sites.map((site) => {
      const s = /** @type {any} */ (site);
      const own = of(s);
      /** @type {Record<string, any>} */
      const whole = {};
      /** @type {Record<string, any>} */
      const shown = {};
      for (const k of STEP_FIGURES) {
        whole[k] = s[k];
        shown[k] = typeof own[k] === "number" ? own[k] : 0;
      }
      return /** @type {T} */ ({ ...s, ...shown, whole });
    }),
    inStep: true,
  };
}

/** @param {unknown} v */
const known = (v) => v !== null && v !== undefined;

/**
 * Why a site's line is not the syncing call's, in the order the CLI's report tells it
 * (`outputs/text.py` `_inexact_reason`): the file not read here first (`source_read`
 * false; an older answer without the field: no def line and no recorded line stand for
 * it), then a file changed since profiling, a function already running, its def line.
 * @param {any} site
 * @returns {string}
 */
export function inexactWhy(site) {
  const unread = site.source_read === false || (!known(site.source_read) && !known(site.def_line) && !known(site.recorded_line));
  if (unread && site.other_run_copy) {
    return `line the trace recorded for the function, not the call that synced: the only copy of its source file found (${site.other_run_copy}) lies in another run's folder, beside that run's traces, and may be another version`;
  }
  if (unread && site.copies_found) {
    return `line the trace recorded for the function, not the call that synced: ${site.copies_found} different files of its name lie under the source roots, none in the trace's folder or above it, so none was taken`;
  }
  if (unread) {
    // A file in a package folder as torch shortens a library's path (`rlpkg/algo.py`): a
    // library neither known nor installed where TensorBoard runs is taken for the user's.
    const file = String(site.file || "").replace(/\\/g, "/");
    const library = file.includes("/") && !file.startsWith("/") && !/(^|\/)ipykernel_\d+\//.test(file)
      ? "; if its package is a library (installed where the trace was recorded, not here), run TensorBoard where it is installed: its reads are then told under your line that called it"
      : "";
    return (known(site.def_line) && site.def_line === site.line
      ? "line where the function is defined (the trace shows it called), not the call that synced: its source file was not found here"
      : "line the trace recorded for the function (where it is defined, or where it was when profiling started), not the call that synced: its source file was not read here") + library;
  }
  if (known(site.recorded_line)) {
    return known(site.def_line)
      ? "line where the function is defined in the file as it is now: the file changed since profiling, so the lines of its calls are candidates only"
      : "line the trace recorded: the file found here has no such function there (it changed since profiling, or it is another file)";
  }
  if ((known(site.def_line) && site.def_line !== site.line) || site.func === "<module>") {
    return "line the function was at when profiling started (it was already running): the sync is in a call it made after that, which in a loop may stand above it";
  }
  return "line where the function is defined, not the call that synced: the trace records no call line, and none was found in the source";
}

/** At most this many candidate lines of a library's function are named (`LIBRARY_CANDIDATES_SHOWN`). */
const LIBRARY_CANDIDATES_SHOWN = 6;

/**
 * `synced in transformers/trainer.py:2257 (_maybe_log_save_evaluate)`, as the CLI's
 * `library_text`: not exact, the function's own line stands for it (a loop running when
 * profiling started recorded its callback's call), with its few candidate lines.
 * @param {any} library the site's `library` source
 * @param {string | null | undefined} file the site's own file
 * @param {(path: string) => string} short
 * @param {{file: string, func: string} | null} [via] the code the site's fix is about (`keyLibrary`)
 * @param {{line: number, count: number}[] | null} [lines] the site's `library_lines`: where its
 *   syncs ran several lines of that code, each is named with its count
 */
export function libraryText(library, file, short = (p) => p, via = null, lines = null) {
  const exact = !!library.line_exact;
  const under = via && (via.file !== library.file || via.func !== library.func) ? `, under ${via.file} (${via.func})` : "";
  if (lines && lines.length > 1) {
    const where = library.file === file ? "this file" : short(library.file);
    let named = lines.map((l) => `${l.line} (${l.count})`);
    if (named.length > LIBRARY_CANDIDATES_SHOWN) named = [...named.slice(0, LIBRARY_CANDIDATES_SHOWN), `${named.length - LIBRARY_CANDIDATES_SHOWN} more`];
    return `synced in ${where}${library.func ? ` (${library.func})` : ""} at lines ${named.join(", ")}${under}`;
  }
  const line = !exact && known(library.def_line) ? library.def_line : library.line;
  const where = library.file === file ? `line ${line ?? "?"}` : `${short(library.file)}:${line ?? "?"}`;
  const inner = library.func ? [String(library.func)] : [];
  const candidates = library.candidates || [];
  if (!exact && candidates.length > 0 && candidates.length <= LIBRARY_CANDIDATES_SHOWN) inner.push(`candidate lines ${candidates.join(", ")}`);
  // The library code the site's fix is about, where it is above a helper two sites share.
  return `synced in ${where}${exact ? "" : "*"}${inner.length ? ` (${inner.join("; ")})` : ""}${under}`;
}

/**
 * The library code a site key names after its `@` (`aggregate.key_library`): the last `@`,
 * then the last `:` after it; null without. Only for a site with a `library`, whose key
 * ends so (a key without that part may hold an `@` in its user's path).
 * @param {string | null | undefined} key
 * @returns {{file: string, func: string} | null}
 */
export function keyLibrary(key) {
  const text = String(key || "");
  const at = text.lastIndexOf("@");
  if (at < 0) return null;
  const tail = text.slice(at + 1);
  const colon = tail.lastIndexOf(":");
  return colon > 0 ? { file: tail.slice(0, colon), func: tail.slice(colon + 1) } : null;
}

/** At most this many of a site's calling lines are named (the CLI's `CALLERS_SHOWN`). */
const CALLERS_SHOWN = 4;

/**
 * "called from line 16 (4), line 17 (4)": the user's lines that called a site's function
 * (`callers`), where there are two or more, as the CLI says it; null where fewer. Where the
 * callers' `%` tests differ, each that has one says it (one line reached every step and
 * every N steps read "line 59 (75), line 59 (13)").
 * @param {any} site
 * @param {(path: string) => string} [short]
 * @returns {string | null}
 */
export function callersText(site, short = (p) => p) {
  const callers = (site.callers || []).filter(Boolean);
  if (callers.length < 2) return null;
  const guards = new Set(callers.map((/** @type {any} */ c) => c.periodic_guard ?? null));
  const named = callers.slice(0, CALLERS_SHOWN).map((/** @type {any} */ c) => {
    const where = c.file === site.file ? `line ${c.line ?? "?"}` : `${short(c.file)}:${c.line ?? "?"}`;
    const under = guards.size > 1 && c.periodic_guard ? `, ${guardPhrase(c.periodic_guard, "\`")}` : "";
    return `${where}${c.line_exact ? "" : "*"} (${c.count}${under})`;
  });
  const more = callers.length - CALLERS_SHOWN;
  const rest = callers.slice(CALLERS_SHOWN).reduce((/** @type {number} */ n, /** @type {any} */ c) => n + (c.count || 0), 0);
  return `called from ${named.join(", ")}${more > 0 ? `, and ${more} more line${more === 1 ? "" : "s"} (${rest})` : ""}`;
}

/**
 * A site's place as the sites table shows it, and what the CLI says under it: its
 * `file:line`, marked `*` when the line is not the exact call line (`line_exact` false) with
 * why in `title`, and the notes under it: the candidate lines of an inexact line, that a
 * site is a line's backward pass and which line ran it, and for a job's site which late
 * peer its syncs waited for (`waiting_for`).
 * @param {any} site a `/sites` item
 * @param {(path: string) => string} [short] how the file is shortened
 * @returns {{text: string, inexact: boolean, title: string, notes: {id: string, text: string}[]}}
 */
export function siteWhere(site, short = (p) => p) {
  const inexact = !!site.file && site.line !== null && site.line !== undefined && site.line_exact === false;
  // A Jupyter cell's code: its notebook and cell, not ipykernel's name for it.
  const place = cellPlace(site.cell, short) ?? (site.file ? short(site.file) : "");
  const text = site.file ? `${place}:${site.line ?? "?"}${inexact ? "*" : ""}` : "";
  let title = site.file ? `${site.file}:${site.line ?? ""}` : "";
  if (site.file && site.cell?.notebook) title = `${site.cell.notebook}, ${cellName(site.cell)}, line ${site.line ?? "?"}\n(run as ${site.file})`;
  if ((site.cell?.copies ?? 1) > 1) title += `\n${site.cell.copies} notebook cells under the source roots hold this code; the first of them is named`;
  if (inexact) {
    const why = inexactWhy(site);
    title += `\n* ${why}`;
  }
  /** @type {{id: string, text: string}[]} */
  const notes = [];
  // No stack: the annotations it ran in tell it from the other sites of its operator.
  const annotations = (site.annotations || []).filter(Boolean);
  if (!site.file && annotations.length) notes.push({ id: "annotations", text: `in ${annotations.join(", ")}` });
  const candidates = site.candidates || [];
  if (inexact && candidates.length) notes.push({ id: "candidates", text: `candidate lines ${candidates.join(", ")}` });
  // A line's forward and backward syncs are two sites of one line: say which this is.
  if (site.backward) {
    const runBy = site.run_by && site.run_by.line !== null && site.run_by.line !== undefined ? site.run_by : null;
    const by = runBy ? `, run by line ${runBy.line}${runBy.func ? ` (${runBy.func})` : ""}` : "";
    notes.push({ id: "backward", text: `backward of this line${by}` });
  }
  // Inside a library the line called (`trainer.train()`): the library's code that read,
  // which is what the fix below is about; as the CLI says it.
  if (site.library && site.library.file) notes.push({ id: "library", text: libraryText(site.library, site.file, short, keyLibrary(site.key), site.library_lines) });
  if (site.waiting_for) notes.push({ id: "waiting-for", text: String(site.waiting_for) });
  // A copy whose direction no record gives: its kind (a copy to the host) is a guess.
  if (site.copy_direction_guessed) notes.push({ id: "copy-direction", text: "no record says which way this copy went (taken as one to the host; an upload from pageable memory looks the same)" });
  // A helper called from several of the user's lines: which of them read how often.
  const callers = callersText(site, short);
  if (callers) notes.push({ id: "callers", text: callers });
  // A CPU trace's read just after an explicit synchronize that did not run there: on a
  // GPU the host waits at the synchronize first (as the CLI says it: `after_sync_text`).
  const after = site.after_sync;
  if (after && after.line !== null && after.line !== undefined) notes.push({ id: "after-sync", text: `after ${after.code} (line ${after.line}, not run here): on a GPU the host waits there first, so this read costs little until that synchronize goes` });
  // Reads right after other reads, nothing queued between: only the first of a run waits.
  const readBefore = afterReadText(site);
  if (readBefore) notes.push({ id: "after-read", text: readBefore });
  // One line syncing in two ways (moving a pipeline's inputs to the device and its outputs
  // back): the fix shown is the most frequent kind's only.
  const others = Object.entries(site.other_kinds || {});
  if (others.length) notes.push({ id: "other-kinds", text: `also ${others.map(([k, n]) => `${n} ${kindLabel(k)}`).join(", ")}, whose fix is not the one shown` });
  return { text, inexact, title, notes };
}

/**
 * The sites with each one's saving without the profiler (the `unprofiled` route's `sites`,
 * by key) as `unprofiled_predicted_saving_per_step_us`, the field the CLI's JSON carries;
 * the sites as they are where there is none.
 * @template {{key: string}} T
 * @param {T[]} items
 * @param {Record<string, number | null> | null | undefined} bySite
 * @returns {T[]}
 */
export function withUnprofiled(items, bySite) {
  if (!bySite) return items;
  return items.map((site) =>
    Object.prototype.hasOwnProperty.call(bySite, site.key) ? { ...site, unprofiled_predicted_saving_per_step_us: bySite[site.key] } : site,
  );
}
