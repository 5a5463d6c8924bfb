// @ts-check
/**
 * The dashboard's view state and its encoding in the iframe's location hash, so a view can
 * be shared or reloaded. Pure functions (no DOM).
 */

/** A sort key as the hash may carry one; whether the plugin sorts by it is checked on use. */
const SORT_KEY = /^[a-z_]{1,40}$/;

export const VIEWS = Object.freeze(["hotspots", "compare"]);

/**
 * @typedef {object} ViewState
 * @property {string | null} run
 * @property {string | null} worker
 * @property {string | null} span
 * @property {string} view        "hotspots" | "compare"
 * @property {string} sort        a site column the plugin sorts by (its catalogue)
 * @property {"asc" | "desc"} order
 * @property {string} kind        kind filter, "" for all
 * @property {string} q           free-text filter
 * @property {number | null} step step filter from the chart
 * @property {string | null} site selected site key
 * @property {string | null} sync selected sync id
 * @property {string} osort      the order of the detail's occurrences list: "" as they ran, else
 *                               a key of `OCC_SORTS` (the costliest first)
 * @property {number} occ        where the detail's occurrences list starts (a page's offset)
 * @property {string | null} base baseline run for compare
 * @property {boolean} latent     show latent (would-sync-on-GPU) findings
 * @property {number | null} unprof the step time in ms the user measured without the profiler,
 *                               for the saving without it (the CLI's --unprofiled-step-ms)
 */

/**
 * What of the `runs` answer, when it changes, means the kept answers may be stale. A
 * run's `generation` counts only once it has loaded: while its traces load one by one the
 * view is not redrawn at every poll (as before the field existed); a run analysed again
 * between two polls (its sources edited, its file rewritten) changes nothing else.
 * @param {{runs?: {loading?: boolean, generation?: number}[]}} runs the `runs` answer
 * @returns {string}
 */
export function runsSignature(runs) {
  const shown = (runs.runs || []).map((r) => (r.loading ? { ...r, generation: null } : r));
  return JSON.stringify({ ...runs, runs: shown });
}

/**
 * Order two run names as TensorBoard orders runs and tags (its `compareTagNames`, vz_sorting):
 * numbers inside names compare by value (run2 before run10, 1e3 and 0.5 read as numbers),
 * `/` and `_` and digits sort before other characters, the rest by code unit.
 * @param {string} a
 * @param {string} b
 * @returns {number}
 */
export function compareRunNames(a, b) {
  let ai = 0;
  let bi = 0;
  for (;;) {
    if (ai === a.length) return bi === b.length ? 0 : -1;
    if (bi === b.length) return 1;
    if (isDigit(a[ai]) && isDigit(b[bi])) {
      const aStart = ai;
      const bStart = bi;
      ai = consumeNumber(a, ai + 1);
      bi = consumeNumber(b, bi + 1);
      const an = parseFloat(a.slice(aStart, ai));
      const bn = parseFloat(b.slice(bStart, bi));
      if (an < bn) return -1;
      if (an > bn) return 1;
      continue;
    }
    if (isBreak(a[ai])) {
      if (!isBreak(b[bi])) return -1;
    } else if (isBreak(b[bi])) {
      return 1;
    } else if (a[ai] < b[bi]) {
      return -1;
    } else if (a[ai] > b[bi]) {
      return 1;
    }
    ai++;
    bi++;
  }
}

/** @param {string} c */
function isDigit(c) {
  return "0" <= c && c <= "9";
}

/** @param {string} c */
function isBreak(c) {
  return c === "/" || c === "_" || isDigit(c);
}

/**
 * The end of the number starting before `i` (digits, a fraction, an exponent).
 * @param {string} s
 * @param {number} i
 */
function consumeNumber(s, i) {
  let state = "natural";
  for (; i < s.length; i++) {
    const c = s[i];
    if (state === "natural") {
      if (c === ".") state = "real";
      else if (c === "e" || c === "E") state = "sign";
      else if (!isDigit(c)) break;
    } else if (state === "real") {
      if (c === "e" || c === "E") state = "sign";
      else if (!isDigit(c)) break;
    } else if (state === "sign") {
      if (isDigit(c) || c === "+" || c === "-") state = "exponent";
      else break;
    } else if (!isDigit(c)) {
      break;
    }
  }
  return i;
}

/**
 * The `runs` answer's runs in TensorBoard's order (the plugin lists them as it found them:
 * a run added while TensorBoard runs would come last).
 * @template {{name: string}} R
 * @param {R[]} runs
 * @returns {R[]}
 */
export function sortRuns(runs) {
  return [...runs].sort((a, b) => compareRunNames(a.name, b.name));
}

/**
 * A run's workers as the Worker picker lists them: by name, numbers by value as runs are
 * (rank2 before rank10), not in the order the plugin found their traces.
 * @template {{name: string}} W
 * @param {W[]} workers
 * @returns {W[]}
 */
export function sortWorkers(workers) {
  return [...workers].sort((a, b) => compareRunNames(a.name, b.name));
}

/**
 * The run a view shows: the one it names, else the first run with device activity (a
 * CPU-only run can only list what would synchronize), else the first run with findings
 * (of a logdir of CPU runs, not an empty optimized one), else the first run.
 * @template {{name: string, device_activity?: boolean | null, findings?: boolean | null}} R
 * @param {R[]} runs the `runs` answer's runs, in its order
 * @param {string | null} name the run the view state names
 * @returns {R | null}
 */
export function pickRun(runs, name) {
  return (
    runs.find((r) => r.name === name) ||
    runs.find((r) => r.device_activity === true) ||
    runs.find((r) => r.findings === true) ||
    runs[0] ||
    null
  );
}

/**
 * What to do when the view names a run that the `runs` answer does not hold (a typo, a
 * renamed run, a folder deleted while the page is open): null when there is nothing to
 * change (no run named, the run is there, or no run is listed yet); otherwise the name that
 * is missing and the state that shows the run the dashboard opens on instead, with nothing
 * of the missing run's selection (worker, span, step, site, sync) carried over to it.
 * @template {{name: string, device_activity?: boolean | null}} R
 * @param {R[]} runs the `runs` answer's runs
 * @param {{run: string | null}} state
 * @returns {{missing: string, patch: Partial<ViewState>} | null}
 */
export function reconcileRun(runs, state) {
  if (state.run === null || !runs.length || runs.some((r) => r.name === state.run)) return null;
  const shown = pickRun(runs, null);
  return {
    missing: state.run,
    patch: { run: shown ? shown.name : null, worker: null, span: null, step: null, site: null, sync: null, occ: 0, unprof: null },
  };
}

/**
 * A worker, or a span of the worker, that the view names and the run does not have (a link
 * from before the run was profiled again): what to say and what to drop. The view showed
 * the whole run (or worker) and kept the name in the URL, which "Copy link" passed on.
 * @param {{name: string, workers?: {name: string, spans?: (string | null)[]}[]}} run
 * @param {string | null} worker
 * @param {string | null} span
 * @returns {{what: string, where: string, outcome: string, patch: Partial<ViewState>} | null}
 */
export function missingWorkerOrSpan(run, worker, span) {
  const whole = "showing the whole run";
  if (worker === null) {
    // A span is only chosen under a worker: without one it selects nothing.
    return span === null ? null : { what: `Span "${span}"`, where: `run "${run.name}"`, outcome: whole, patch: { span: null } };
  }
  const found = (run.workers || []).find((w) => w.name === worker);
  if (!found) return { what: `Worker "${worker}"`, where: `run "${run.name}"`, outcome: whole, patch: { worker: null, span: null } };
  if (span === null || (found.spans || []).includes(span)) return null;
  return { what: `Span "${span}"`, where: `worker ${worker} of run "${run.name}"`, outcome: `showing all of worker ${worker}`, patch: { span: null } };
}

/** @returns {ViewState} */
export function defaultState() {
  return {
    run: null,
    worker: null,
    span: null,
    view: "hotspots",
    sort: "predicted_saving_us",
    order: "desc",
    kind: "",
    q: "",
    step: null,
    site: null,
    sync: null,
    osort: "",
    occ: 0,
    base: null,
    latent: false,
    unprof: null,
  };
}

/** The occurrences of a site the detail lists at a time (the plugin allows up to 500). */
export const OCC_PAGE = 200;

/**
 * The orders the detail's occurrences list offers: as they ran (the plugin's order, no
 * `sort`; the default, `osort` absent from the URL), or by a cost, the plugin's `syncs`
 * route sorting by that field (`query.SYNC_SORTS`) in the direction the catalogue's
 * `sync_sorts` gives it. `label`: the option; `range`: how the pager's range says it.
 */
export const OCC_SORTS = Object.freeze([
  { key: "", label: "as they ran", range: "in the order they ran" },
  { key: "predicted_saving_us", label: "largest saving", range: "largest saving first" },
  { key: "host_wait_us", label: "longest host wait", range: "longest host wait first" },
  { key: "gpu_idle_after_us", label: "longest GPU idle after", range: "longest GPU idle after first" },
]);

/**
 * How the occurrences list says an order (`OCC_SORTS`' key; unknown: as they ran), on the
 * run's own device: `OCC_SORTS` says GPU, and a torch_npu run's is an NPU.
 * @param {string} key
 * @param {string} [idleOn] "GPU" or "NPU"
 * @returns {{label: string, range: string}}
 */
export function occSortWords(key, idleOn = "GPU") {
  const order = OCC_SORTS.find((o) => o.key === key) ?? OCC_SORTS[0];
  return { label: order.label.replace("GPU", idleOn), range: order.range.replace("GPU", idleOn) };
}

/**
 * The occurrences order an `osort` value in a URL names: one of `OCC_SORTS`' keys, else ""
 * (as they ran).
 * @param {string} value
 * @returns {string}
 */
export function validOccSort(value) {
  return OCC_SORTS.some((o) => o.key === value) ? value : "";
}

/**
 * The `syncs` request's parameters for a page of the detail's occurrences list, beside the
 * run/worker/span selection: the site's (and step's) syncs, latent or not, from `offset`,
 * in the order `osort` names with its direction from `orderOf` (the catalogue's
 * `sync_sorts`). Latent findings cost nothing where they were seen: always as they ran.
 * @param {{site: string | null, step: number | null}} state
 * @param {{osort: string, latent: boolean, offset: number, orderOf: (key: string) => "asc" | "desc"}} args
 * @returns {{site: string | null, step: number | null, latent: 1 | null, sort: string | null, order: "asc" | "desc" | null, offset: number, limit: number}}
 */
export function occurrencesParams(state, { osort, latent, offset, orderOf }) {
  const sort = latent ? "" : validOccSort(osort);
  return {
    site: state.site,
    step: state.step,
    latent: latent ? 1 : null,
    sort: sort || null,
    order: sort ? orderOf(sort) : null,
    offset,
    limit: OCC_PAGE,
  };
}

/**
 * The view state patch of a page or an order of the detail's occurrences listed, with the
 * occurrence still shown in the detail (`shown`) named too (`sync`) when the URL names
 * another one or none (then a reload would show the first one listed): paging does not make
 * the detail jump, and the URL keeps naming what is on screen.
 * @param {Partial<ViewState>} patch `occ` and maybe `osort`
 * @param {string | null} named the sync the view state names
 * @param {string | null} shown the sync the detail shows
 * @returns {Partial<ViewState>}
 */
export function occPagePatch(patch, named, shown) {
  return shown !== null && shown !== named ? { ...patch, sync: shown } : patch;
}

/**
 * The state after `patch`: as `{...state, ...patch}`, and the detail's occurrences list back
 * at its first page when what it lists changes (another run, worker, span, site, step or
 * latent findings) or its order does, unless the patch says where it starts. The order
 * itself stays from one site to the next, as the sites table's sort does.
 * @param {ViewState} state
 * @param {Partial<ViewState>} patch
 * @returns {ViewState}
 */
export function patchState(state, patch) {
  const next = { ...state, ...patch };
  if (!("occ" in patch) && OCC_SCOPE.some((k) => k in patch && patch[k] !== state[k])) next.occ = 0;
  // A step time measured without the profiler is one program's: not another run's.
  if (!("unprof" in patch) && "run" in patch && patch.run !== state.run) next.unprof = null;
  return next;
}

/** What the occurrences list lists, and in which order, depends on these keys. */
const OCC_SCOPE = /** @type {const} */ (["run", "worker", "span", "site", "step", "latent", "osort"]);

/**
 * The pages of a list of `total` occurrences shown `size` at a time, from `offset` (rounded
 * down to a page's start, and to the last page past the end): the rows shown (1-based,
 * `from` to `to`), the page's number and the offsets of the first, previous, next and last
 * pages (null where there is none to go to).
 * @param {number} total
 * @param {number} offset
 * @param {number} [size]
 */
export function occurrencePages(total, offset, size = OCC_PAGE) {
  const n = Math.max(0, Math.floor(total || 0));
  const pages = Math.max(1, Math.ceil(n / size));
  const page = Math.min(pages - 1, Math.max(0, Math.floor((offset || 0) / size)));
  const at = page * size;
  return {
    offset: at,
    from: n ? at + 1 : 0,
    to: Math.min(n, at + size),
    total: n,
    page: page + 1,
    pages,
    first: page > 0 ? 0 : null,
    prev: page > 0 ? at - size : null,
    next: page < pages - 1 ? at + size : null,
    last: page < pages - 1 ? (pages - 1) * size : null,
  };
}

/** Hash key order: fixed so the same state always gives the same URL. */
const KEYS = /** @type {const} */ ([
  "run",
  "worker",
  "span",
  "view",
  "base",
  "step",
  "kind",
  "q",
  "latent",
  "unprof",
  "sort",
  "order",
  "site",
  "sync",
  "osort",
  "occ",
]);

/**
 * Encode a state as a location hash (`#run=a&site=...`); defaults are left out.
 * @param {Partial<ViewState>} state
 * @returns {string}
 */
export function encodeState(state) {
  const def = /** @type {Record<string, unknown>} */ (defaultState());
  const s = /** @type {Record<string, unknown>} */ ({ ...defaultState(), ...state });
  const parts = [];
  for (const key of KEYS) {
    const value = s[key];
    if (value === def[key] || value === null || value === undefined || value === "") continue;
    const text = typeof value === "boolean" ? (value ? "1" : "0") : String(value);
    parts.push(`${key}=${encodeURIComponent(text)}`);
  }
  return parts.length ? "#" + parts.join("&") : "";
}

/**
 * Decode a location hash into a full, validated state: unknown keys are ignored and
 * invalid values fall back to defaults, so a hand-edited URL never breaks the view.
 * @param {string | null | undefined} hash
 * @returns {ViewState}
 */
export function decodeState(hash) {
  const state = defaultState();
  if (!hash) return state;
  const body = hash.startsWith("#") ? hash.slice(1) : hash;
  for (const part of body.split("&")) {
    if (!part) continue;
    const eq = part.indexOf("=");
    const key = eq < 0 ? part : part.slice(0, eq);
    let value;
    try {
      value = eq < 0 ? "" : decodeURIComponent(part.slice(eq + 1).replace(/\+/g, " "));
    } catch {
      continue; // malformed percent-encoding: ignore this key only
    }
    switch (key) {
      case "run":
      case "worker":
      case "span":
      case "site":
      case "sync":
      case "base":
        state[key] = value || null;
        break;
      case "q":
      case "kind":
        state[key] = value;
        break;
      case "view":
        if (VIEWS.includes(value)) state.view = value;
        break;
      case "sort":
        if (SORT_KEY.test(value)) state.sort = value;
        break;
      case "order":
        if (value === "asc" || value === "desc") state.order = value;
        break;
      case "step": {
        const n = Number(value);
        state.step = value !== "" && Number.isInteger(n) ? n : null;
        break;
      }
      case "latent":
        state.latent = value === "1" || value === "true";
        break;
      case "occ":
        state.occ = validOcc(value);
        break;
      case "unprof":
        state.unprof = validStepMs(value);
        break;
      case "osort":
        state.osort = validOccSort(value);
        break;
      default:
        break;
    }
  }
  // The occurrences list is a site's: without one, where it starts means nothing.
  if (state.site === null) state.occ = 0;
  return state;
}

/** The step times (ms) the plugin's `unprofiled` route takes: a microsecond to an hour. */
export const STEP_MS_MIN = 0.001;
export const STEP_MS_MAX = 3.6e6;

/**
 * A step time in ms as typed or in a URL: a plain decimal number (`46.97`, `12`, `4.7e1`),
 * with a decimal comma (`14,51`) or its unit (`14.5 ms`) as people write it, within what
 * the plugin takes, else null (`abc`, `-5`, `0`, `Infinity`, `0x10`, `1,234.5`, `14 s`).
 * @param {string} value
 * @returns {number | null}
 */
export function validStepMs(value) {
  const n = typedMs(value);
  return n !== null && n >= STEP_MS_MIN && n <= STEP_MS_MAX ? n : null;
}

/**
 * What is wrong with a step time as typed (`validStepMs` null for it): no number of ms, or
 * one outside what the plugin takes (said with the range, not as "not a step time").
 * @param {string} value
 * @returns {string}
 */
export function stepMsProblem(value) {
  const text = String(value ?? "").trim();
  const n = typedMs(value);
  if (n !== null && n > 0) return `"${text}" ms is outside the step times the replay takes: from ${STEP_MS_MIN} to ${STEP_MS_MAX} ms`;
  return `"${text}" is not a step time: give it in milliseconds, e.g. 46.97`;
}

/**
 * The number of ms a text holds as people write one (`14.51`, `14,51`, `14.5 ms`, `4.7e1`),
 * whatever its size; null for any other text.
 * @param {string} value
 * @returns {number | null}
 */
function typedMs(value) {
  let text = String(value ?? "").trim().replace(/\s*ms$/i, "");
  if (!text.includes(".") && (text.match(/,/g) || []).length === 1) text = text.replace(",", ".");
  if (!/^(\d+\.?\d*|\.\d+)([eE][-+]?\d{1,3})?$/.test(text)) return null;
  const n = Number(text);
  return Number.isFinite(n) ? n : null;
}

/** The largest offset the plugin's `syncs` route takes. */
export const MAX_OCC = 1e9;

/**
 * The occurrences list's start that an `occ` value in a URL names: the start of the page it
 * falls in, 0 for anything but plain digits (`abc`, `-5`, `1e3`, `0x10`); a start past the
 * end of the list is known only once it is listed (`occurrencePages`).
 * @param {string} value
 * @returns {number}
 */
function validOcc(value) {
  if (!/^\d+$/.test(value)) return 0;
  const n = Math.min(Number(value), MAX_OCC);
  return n - (n % OCC_PAGE);
}

/**
 * The values of a key (`occ`, `osort`) a location hash holds as they are written there: the
 * frame's own hash (`#run=…&occ=…`), or TensorBoard's with the plugin's keys prefixed
 * (`prefix` = TB_PREFIX).
 * @param {string | null | undefined} hash
 * @param {string} name
 * @param {string} [prefix]
 * @returns {string[]}
 */
function keyTexts(hash, name, prefix = "") {
  const key = `${prefix}${name}`;
  const texts = [];
  for (const part of (hash || "").replace(/^#/, "").split("&")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    let name = part.slice(0, eq);
    let value = part.slice(eq + 1);
    try {
      name = decodeURIComponent(name);
      value = decodeURIComponent(value.replace(/\+/g, " "));
    } catch {
      // malformed percent-encoding: kept as written, so it reads as not valid
    }
    if (name === key) texts.push(value);
  }
  return texts;
}

/**
 * Whether a location hash names the occurrences list's start otherwise than the view state
 * decoded from it writes it (`occ=abc`, `occ=-5`, a start inside a page, an `occ` without a
 * site, two of them): the address is then written again, so that it holds only a valid
 * `occ`, or none, and a shared link or a reload does not carry the malformed one on.
 * @param {string | null | undefined} hash the frame's location.hash, or TensorBoard's
 * @param {{occ: number}} state the view state decoded from it
 * @param {boolean} [tb] whether `hash` is TensorBoard's (the plugin's keys prefixed)
 * @returns {boolean}
 */
export function occNeedsRewrite(hash, state, tb = false) {
  return writtenOtherwise(keyTexts(hash, "occ", tb ? TB_PREFIX : ""), state.occ ? [String(state.occ)] : []);
}

/**
 * Whether a location hash names the occurrences list's order otherwise than the view state
 * decoded from it writes it (an `osort` that is no order of `OCC_SORTS`, or two of them):
 * the address is then written again without it, as for `occ` (`occNeedsRewrite`).
 * @param {string | null | undefined} hash the frame's location.hash, or TensorBoard's
 * @param {{osort: string}} state the view state decoded from it
 * @param {boolean} [tb] whether `hash` is TensorBoard's (the plugin's keys prefixed)
 * @returns {boolean}
 */
export function osortNeedsRewrite(hash, state, tb = false) {
  return writtenOtherwise(keyTexts(hash, "osort", tb ? TB_PREFIX : ""), state.osort ? [state.osort] : []);
}

/**
 * Whether a location hash is to be written again because a value of it was read otherwise
 * than it is written (`occNeedsRewrite`, `osortNeedsRewrite`).
 * @param {string | null | undefined} hash
 * @param {{occ: number, osort: string, view: string, sort: string, order: string, step: number | null, unprof: number | null}} state the view state decoded from it
 * @param {boolean} [tb]
 * @returns {boolean}
 */
export function hashNeedsRewrite(hash, state, tb = false) {
  return occNeedsRewrite(hash, state, tb) || osortNeedsRewrite(hash, state, tb) || choiceNeedsRewrite(hash, state, tb);
}

/**
 * What is wrong with the step time a link names (`unprof=-5`), which the view drops: said,
 * not dropped without a word (the one who sent the link measured it). Null where the link
 * names none, or one the view took.
 * @param {string | null | undefined} hash
 * @param {{unprof: number | null}} state the view state decoded from it
 * @param {boolean} [tb] a TensorBoard hash (keys prefixed)
 * @returns {string | null}
 */
export function linkStepTimeProblem(hash, state, tb = false) {
  const texts = keyTexts(hash, "unprof", tb ? TB_PREFIX : "");
  if (state.unprof !== null || texts.length === 0) return null;
  if (texts.length > 1) return `the link names ${texts.length} step times ("${texts.join('", "')}")`;
  return texts[0].trim() ? stepMsProblem(texts[0]) : null;
}

/**
 * Whether a location hash names a view, a sort column, an order or a step that the view
 * state decoded from it does not hold (`view=bogus`, `sort=Bad-Key`, `order=sideways`,
 * `step=abc`, `unprof=-3`, or two of one): the view fell back to the default and the address kept the
 * value, which "Copy link" passed on. (A sort column of the right form that the plugin does
 * not sort by is known only with its catalogue: the sites view drops that one.)
 * @param {string | null | undefined} hash
 * @param {{view: string, sort: string, order: string, step: number | null, unprof: number | null}} state
 * @param {boolean} [tb]
 * @returns {boolean}
 */
export function choiceNeedsRewrite(hash, state, tb = false) {
  const prefix = tb ? TB_PREFIX : "";
  return /** @type {const} */ (["view", "sort", "order", "step", "unprof"]).some((key) => {
    const texts = keyTexts(hash, key, prefix);
    const value = state[key];
    return texts.length > 1 || (texts.length === 1 && texts[0] !== (value === null ? "" : String(value)));
  });
}

/**
 * @param {string[]} texts the values written in a hash
 * @param {string[]} want the values the state decoded from it writes
 */
function writtenOtherwise(texts, want) {
  return texts.length !== want.length || texts.some((t, i) => t !== want[i]);
}

/**
 * Whether the dashboard was asked to behave as inside VS Code by a query or hash flag
 * (`?vscode=1`), for hosts whose frame nesting cannot be detected.
 * @param {string} search location.search
 * @param {string} hash location.hash
 * @returns {boolean}
 */
export function vscodeFlag(search, hash) {
  const re = /(?:^|[?&#])vscode=(1|true)(?:&|$)/;
  return re.test(search || "") || re.test(hash || "");
}

/**
 * Whether the frames around this one are VS Code's webview, from their origins
 * (`location.ancestorOrigins`, which VS Code's Electron has): `vscode-webview://` on the
 * desktop, `*.vscode-cdn.net` on vscode.dev. Any other nesting (Jupyter's `%tensorboard`,
 * a dashboard page framing TensorBoard) is not VS Code: its frame buttons copy the path,
 * and no message naming source files goes to the page around it.
 * @param {Iterable<string> | null | undefined} origins nearest first
 * @returns {boolean}
 */
export function vscodeAncestry(origins) {
  if (!origins) return false;
  for (const origin of origins) {
    if (/^vscode-(webview|file|resource):/.test(origin)) return true;
    if (/^https:\/\/[^/]+\.vscode-cdn\.net(:\d+)?$/.test(origin)) return true;
  }
  return false;
}

/**
 * The plugin's keys in TensorBoard's own address (`#sync_advisor&p.sync_advisor.run=…`):
 * TensorBoard keeps its tab and the legacy dashboards' settings in its page's hash as
 * `tab&key=value&…`, a plugin's own keys prefixed `p.<plugin>.` (the What-If Tool's
 * convention), and keeps keys it does not know when it loads, reloads and switches tabs.
 */
export const TB_PREFIX = "p.sync_advisor.";

/**
 * TensorBoard's hash as it reads it (`tf_storage`): the tab (the part without `=`), and the
 * `key=value` parts, decoded, in order.
 * @param {string} hash
 * @returns {{tab: string, params: [string, string][]}}
 */
export function parseTbHash(hash) {
  const body = (hash || "").replace(/^#/, "");
  let tab = "";
  /** @type {[string, string][]} */
  const params = [];
  for (const part of body.split("&")) {
    const bits = part.split("=");
    try {
      if (bits.length === 1) tab = decodeURIComponent(bits[0]);
      else if (bits.length === 2) params.push([decodeURIComponent(bits[0]), decodeURIComponent(bits[1])]);
    } catch {
      // malformed percent-encoding: TensorBoard would throw; skip the part
    }
  }
  return { tab, params };
}

/**
 * The view state kept in TensorBoard's hash, or null when it holds none of the plugin's keys.
 * @param {string} hash TensorBoard's page's location.hash
 * @returns {ViewState | null}
 */
export function stateFromTbHash(hash) {
  const ours = parseTbHash(hash).params.filter(([k]) => k.startsWith(TB_PREFIX));
  if (!ours.length) return null;
  return decodeState("#" + ours.map(([k, v]) => `${k.slice(TB_PREFIX.length)}=${encodeURIComponent(v)}`).join("&"));
}

/**
 * TensorBoard's hash with the view state in the plugin's keys: its tab (`tab` when given,
 * else the hash's own) and every other key kept as they are, in their order; the plugin's
 * keys replaced (none for a default state).
 * @param {string} hash TensorBoard's page's location.hash
 * @param {Partial<ViewState>} state
 * @param {string | null} [tab]
 * @returns {string}
 */
export function tbHashWithState(hash, state, tab = null) {
  const parsed = parseTbHash(hash);
  const keep = parsed.params
    .filter(([k]) => !k.startsWith(TB_PREFIX))
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`);
  const ours = encodeState(state)
    .replace(/^#/, "")
    .split("&")
    .filter(Boolean)
    .map((part) => TB_PREFIX + part);
  return "#" + [encodeURIComponent(tab ?? parsed.tab), ...keep, ...ours].join("&");
}

/**
 * The link that opens exactly this view in a browser tab of its own: the plugin frame's
 * address (TensorBoard's `.../data/plugin_entry.html?name=sync_advisor`, whose `<base>`
 * makes every dashboard URL relative, so it works standalone and under `--path_prefix`)
 * with the state as its hash. Built from the state rather than read back from
 * `location.hash`: a sandboxed frame may have refused the `history.replaceState` write.
 * @param {string} href the frame's location.href
 * @param {Partial<ViewState>} state
 * @returns {string}
 */
export function shareUrl(href, state) {
  const hashAt = href.indexOf("#");
  return (hashAt < 0 ? href : href.slice(0, hashAt)) + encodeState(state);
}
