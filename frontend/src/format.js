// @ts-check
/**
 * Number and label formatting for the dashboard. Pure functions (no DOM) so they run
 * under `node --test`.
 */

/** Minus sign used for negative deltas (U+2212 reads better than a hyphen in tables). */
const MINUS = "\u2212";

/**
 * Format a duration given in microseconds with a unit that keeps 3 significant digits:
 * `850 µs`, `12.3 ms`, `1.25 s`. Null, undefined and NaN render as an en dash.
 * @param {number | null | undefined} us
 * @returns {string}
 */
export function formatUs(us) {
  if (us === null || us === undefined || !Number.isFinite(us)) return "\u2013";
  const sign = us < 0 ? MINUS : "";
  const a = Math.abs(us);
  if (a === 0) return "0 µs";
  if (a < 1) return `${sign}${trim(a.toFixed(2))} µs`;
  // Units are picked on the rounded value: 999.7 µs reads 1.00 ms, not 1000 µs.
  if (a < 999.5) return `${sign}${trim(a < 9.95 ? a.toFixed(1) : a.toFixed(0))} µs`;
  if (a < 999.5e3) return `${sign}${sig3(a / 1000)} ms`;
  return `${sign}${sig3(a / 1e6)} s`;
}

/**
 * A signed duration change: `+1.20 ms`, `−350 µs`, `±0 µs`.
 * @param {number | null | undefined} us
 * @returns {string}
 */
export function formatDeltaUs(us) {
  if (us === null || us === undefined || !Number.isFinite(us)) return "\u2013";
  if (us === 0) return "\u00b10 µs";
  return us > 0 ? `+${formatUs(us)}` : formatUs(us);
}

/**
 * A fraction 0..1 as a percentage: `12.3 %`, `0.4 %`, `<0.1 %` for tiny non-zero shares.
 * @param {number | null | undefined} fraction
 * @returns {string}
 */
export function formatPct(fraction) {
  if (fraction === null || fraction === undefined || !Number.isFinite(fraction)) return "\u2013";
  const p = fraction * 100;
  if (p === 0) return "0 %";
  const a = Math.abs(p);
  const sign = p < 0 ? MINUS : "";
  if (a < 0.1) return `${sign}<0.1 %`;
  if (a < 10) return `${sign}${trim(a.toFixed(1))} %`;
  return `${sign}${a.toFixed(0)} %`;
}

/**
 * Counts: integers with thousands separators; fractional values (syncs per step) with at
 * most 2 decimals.
 * @param {number | null | undefined} n
 * @returns {string}
 */
export function formatCount(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return "\u2013";
  if (Number.isInteger(n)) return groupThousands(String(n));
  const a = Math.abs(n);
  const s = trim(a >= 100 ? a.toFixed(0) : a >= 10 ? a.toFixed(1) : a.toFixed(2));
  return (n < 0 ? MINUS : "") + groupThousands(s);
}

/**
 * Byte sizes: `8 B`, `4.0 KiB`, `12.5 MiB`.
 * @param {number | null | undefined} n
 * @returns {string}
 */
export function formatBytes(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return "\u2013";
  const units = ["B", "KiB", "MiB", "GiB"];
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

/**
 * The last `parts` components of a path, for narrow columns; the full path stays in a title.
 * Handles both `/` and Windows `\` separators.
 * @param {string | null | undefined} path
 * @param {number} [parts]
 * @returns {string}
 */
export function shortPath(path, parts = 2) {
  if (!path) return "";
  const bits = path.split(/[\\/]+/).filter(Boolean);
  if (bits.length <= parts) return path;
  return "\u2026/" + bits.slice(-parts).join("/");
}

/**
 * `file:line`, or just the file when the line is unknown.
 * @param {string | null | undefined} file
 * @param {number | null | undefined} line
 * @returns {string}
 */
/**
 * Where a Jupyter cell's code is, as IPython names it ("Cell In[4], line 6"): the notebook
 * and `In[4]` (the execution count it was saved with), else `cell 3` (its place in the
 * notebook); null when `cell` is none (the file is a file).
 * @param {{notebook?: string | null, index?: number | null, execution_count?: number | null} | null | undefined} cell
 * @param {(path: string) => string} [short] how the notebook's path is shortened
 * @returns {string | null}
 */
export function cellPlace(cell, short = (p) => p) {
  if (!cell || !cell.notebook) return null;
  return `${short(cell.notebook)} ${cellName(cell)}`;
}

/**
 * `In[4]` for a notebook cell saved with its execution count, else `cell 3`.
 * @param {{index?: number | null, execution_count?: number | null}} cell
 * @returns {string}
 */
export function cellName(cell) {
  const count = cell.execution_count;
  return count !== null && count !== undefined ? `In[${count}]` : `cell ${cell.index}`;
}

export function fileLine(file, line) {
  if (!file) return "(no source)";
  return line === null || line === undefined ? file : `${file}:${line}`;
}

/**
 * Collapse repeated names, keeping first-seen order: ["a", "b", "a"] -> a ×2, b ×1.
 * Used for the blocking calls of one finding (an allocator sync can hold dozens).
 * @param {string[] | null | undefined} names
 * @returns {{name: string, count: number}[]}
 */
export function countNames(names) {
  /** @type {Map<string, number>} */
  const counts = new Map();
  for (const n of names || []) counts.set(n, (counts.get(n) || 0) + 1);
  return [...counts].map(([name, count]) => ({ name, count }));
}

/**
 * What identifies a site when its source line is unknown (no stack): its outermost
 * operator, else the API call it waited in.
 * @param {{file?: string | null, ops?: string[] | null, apis?: string[] | null}} site
 * @returns {string}
 */
export function siteFallbackLabel(site) {
  return site.ops?.[0] || site.apis?.[0] || "(unknown)";
}

/** @param {number} x */
function sig3(x) {
  if (x >= 99.95) return x.toFixed(0);
  if (x >= 9.995) return x.toFixed(1);
  return x.toFixed(2);
}

/**
 * A count with its noun, singular for one: `1 site`, `3 sites`.
 * @param {number} n
 * @param {string} word
 * @param {string} [many] the plural when it is not `word + "s"`
 * @returns {string}
 */
export function plural(n, word, many) {
  return `${formatCount(n)} ${n === 1 ? word : many ?? word + "s"}`;
}

/**
 * How many sites the table shows: `3 sites`, or `2 of 3 sites` when filtered.
 * @param {number} shown
 * @param {number} total
 * @returns {string}
 */
export function siteCountText(shown, total) {
  return shown === total ? plural(total, "site") : `${formatCount(shown)} of ${plural(total, "site")}`;
}

/** Drop trailing zeros after a decimal point: "1.50" -> "1.5", "2.0" -> "2". @param {string} s */
function trim(s) {
  return s.includes(".") ? s.replace(/\.?0+$/, "") : s;
}

/** @param {string} s */
function groupThousands(s) {
  const neg = s.startsWith("-");
  const body = neg ? s.slice(1) : s;
  const [int, frac] = body.split(".");
  const grouped = int.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return (neg ? MINUS : "") + grouped + (frac !== undefined ? "." + frac : "");
}

/**
 * A site's predicted saving per step; "≤" marks the upper bound (trace not replayed), "–"
 * none (the device's idle time unread, torch_npu: the host wait alone bounds nothing).
 * @param {any} site
 */
export function savingText(site) {
  if (site.gpu_idle_measured === false) return "–";
  const us = formatUs(site.predicted_saving_per_step_us ?? 0);
  return site.saving_method === "replay" ? us : `≤${us}`;
}

/** Why a figure is not shown where the device's idle time is unread (`gpu_idle_measured`). */
export const IDLE_UNREAD = "not measured: the trace holds no task of the NPU's own (torch_npu's \"Ascend Hardware\" rows), so neither its idle time after a sync nor a saving is known";

/** A site's device idle after its syncs; "–" where not measured. @param {any} site */
export function idleText(site) {
  return site.gpu_idle_measured === false ? "–" : formatUs(site.gpu_idle_us);
}

/**
 * The line on how the predicted savings were obtained: `How obtained: <saving_how> (<note>)`
 * (the profiler's note, `profiler_note`, is a field and a line of its own).
 * @param {any} summary
 * @returns {string}
 */
export function howObtainedText(summary) {
  const note = summary.saving_note || "";
  return `How obtained: ${summary.saving_how}${note ? ` (${note})` : ""}`;
}

/**
 * A note the plugin wrote in plain ASCII (`287 us`) with the dashboard's unit (`287 µs`).
 * @param {string} text
 * @returns {string}
 */
export function withMicro(text) {
  return text.replace(/(\d) us\b/g, "$1 µs");
}

/**
 * A span name that is a time since the epoch, as tensorboard_trace_handler writes it: in
 * milliseconds (torch 1.x), in nanoseconds (`time.time_ns()`, torch 2: 19 digits, shown raw
 * until 2026-11-28), or in microseconds.
 */
const EPOCH_TIME = /^(?:\d{12,14}|\d{16}|\d{19})$/;

/** @param {string} s an `EPOCH_TIME` name @returns {number} its milliseconds */
const epochMs = (s) => Number(s.length > 14 ? s.slice(0, s.length - (s.length === 16 ? 3 : 6)) : s);

/**
 * A span as TensorBoard's PyTorch Profiler tab names it: its place among the worker's
 * spans, in their names' order, from 1 (torch-tb-profiler's loader numbers them so; its
 * "Spans" list is 1, 2, ...); null when the span is not among them.
 * @param {(string | null)[]} spans the worker's spans
 * @param {string} span
 * @returns {string | null}
 */
export function profilerSpanName(spans, span) {
  const sorted = spans.filter((s) => s !== null && s !== undefined).map(String).sort();
  const at = sorted.indexOf(String(span));
  return at < 0 ? null : String(at + 1);
}

/**
 * How the span selector names each span: a span that is a time since the epoch (the file
 * name part tensorboard_trace_handler writes: `1700000000000` ms, `1795867266511259255` ns)
 * as a local date-time,
 * `2023-11-14 22:13:20`, to the millisecond when two spans would read the same; other names
 * as they are. The raw value stays available to the caller (a tooltip).
 * @param {(string | null)[]} spans
 * @returns {Map<string, string>}
 */
export function spanLabels(spans) {
  const named = spans.filter((s) => s !== null && s !== undefined).map(String);
  /** @param {string} s @param {boolean} ms */
  const label = (s, ms) => {
    if (!EPOCH_TIME.test(s)) return s;
    const d = new Date(epochMs(s));
    const p = (/** @type {number} */ n, w = 2) => String(n).padStart(w, "0");
    const time = `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
    return ms ? `${time}.${p(d.getMilliseconds(), 3)}` : time;
  };
  const coarse = named.map((s) => label(s, false));
  const clash = new Set(coarse).size < coarse.length;
  return new Map(named.map((s, i) => [s, clash ? label(s, true) : coarse[i]]));
}

/**
 * The note on host-to-device copies whose records do not say whether the host memory was
 * pinned (ROCm's; the traces' `unjudged_uploads`), as the CLI's "Not judged" line; null
 * where there are none.
 * @param {any[] | undefined} traces
 * @returns {string | null}
 */
export function unjudgedUploadsText(traces) {
  const read = (traces || []).filter((t) => t && !t.error);
  const count = read.reduce((n, t) => n + (t.unjudged_uploads || 0), 0);
  if (!count) return null;
  const hostUs = read.reduce((n, t) => n + (t.unjudged_upload_host_us || 0), 0);
  return `Not judged: ${plural(count, "asynchronous host-to-device copy", "asynchronous host-to-device copies")} (${formatUs(hostUs)} of host time in the calls): ROCm traces do not record whether the host memory was pinned, and from pageable memory such a copy blocks the host. Load into pinned memory (pin_memory=True) to be sure it does not.`;
}

/**
 * What a site's latent reads right after other reads cost (`after_read_count`), as the
 * CLI's `after_read_text`: on a GPU the first read of such a run waits for the device and
 * the next find its queue empty. Null: none of its reads did.
 * @param {any} site
 * @returns {string | null}
 */
export function afterReadText(site) {
  const count = site.after_read_count || 0;
  if (!count) return null;
  const before = site.after_read;
  // After an unrun synchronize too (`after_sync`, said first): what stays once it goes.
  const too = site.after_sync ? " too" : "";
  if (before) {
    const line = before.file === site.file ? `line ${before.line ?? "?"}` : `${before.file}:${before.line ?? "?"}`;
    const where = before.file === site.file && before.line === site.line ? "another read on this line" : `the read at ${line}${before.line_exact ? "" : "*"}`;
    if (too) return `right after ${where}${too}, nothing queued between: it costs little while that one stays`;
    return `right after ${where}, nothing queued between: on a GPU the host waits there first, so this read costs little until that one goes`;
  }
  return `${formatCount(count)} of these ${formatCount(site.count || 0)} reads ${count === 1 ? "comes" : "come"} right after another read${too}, nothing queued between: on a GPU only the first read of each such run waits`;
}

/**
 * How a `periodic_guard` reads in the code, as the CLI's `guard_statement`: `if step % 10
 * == 0:` for a test, the decorator itself for a handler run every N events.
 * @param {string} guard
 */
export function guardStatement(guard) {
  return guard.startsWith("@") || guard.endsWith(":") ? guard : `if ${guard}:`;
}

/**
 * Where a `periodic_guard` puts its line, as the CLI's `guard_phrase`: under its test, or,
 * for a loop's header, once a pass of that loop (an epoch's print after its batches).
 * @param {string} guard
 * @param {string} [quote] around the code (the callers' line has it in backticks)
 */
export function guardPhrase(guard, quote = "") {
  if (guard.endsWith(":")) return `once a pass of ${quote}${guard}${quote}, after its loop that steps the profiler`;
  return `under ${quote}${guardStatement(guard)}${quote}`;
}

/**
 * The `%` test a site's reads run under, and where, as the CLI's `periodic_guard_of`: its
 * own line's, else the one test every line that called its function runs under (a logging
 * helper called under `if step % log_every == 0:`), or a test around a call further out
 * (`periodic_guard_line`: progress.display, two calls above the read).
 * @param {any} site
 * @returns {[string | null, string]}
 */
export function periodicGuardOf(site) {
  if (site.periodic_guard) return [String(site.periodic_guard), ""];
  const callers = (site.callers || []).filter(Boolean);
  const guards = new Set(callers.map((/** @type {any} */ c) => c.periodic_guard ?? null));
  if (!callers.length || guards.size !== 1 || guards.has(null)) {
    // Else the test around the library's line that read (OpenCLIP's log_every_n_steps).
    const libraryGuard = site.library?.periodic_guard;
    return libraryGuard ? [String(libraryGuard), " in the library's code"] : [null, ""];
  }
  const guard = String([...guards][0]);
  if (callers.length > 1) return [guard, ", around its calls"];
  const c = callers[0];
  if (c.periodic_guard_line != null) {
    // A test around a call further out (progress.display, two calls above the read).
    const file = c.periodic_guard_file;
    const outer = file === site.file ? `line ${c.periodic_guard_line}` : `${file}:${c.periodic_guard_line}`;
    return [guard, `, around the call at ${outer} that leads here`];
  }
  const where = c.file === site.file ? `line ${c.line ?? "?"}` : `${c.file}:${c.line ?? "?"}`;
  return [guard, `, around its call at ${where}${c.line_exact ? "" : "*"}`];
}

/** Ranks named one by one in a site's split by rank; past this many, how many more. */
const RANKS_NAMED = 4;

/**
 * Where a job's site does not sync alike on every rank (the engine's `ranks`, `job_ranks`):
 * on which ranks, and how often on each one's own steps ("on rank 0 only, of the 2
 * ranks traced: 1.0 a step there"). Its per-step figure is over every rank's steps. Empty where it
 * is alike on every rank, or the run is no job. As the text report's `ranks_text`.
 * @param {any} site
 */
export function ranksText(site) {
  const jobRanks = site.job_ranks || 0;
  const ranks = site.ranks || [];
  if (jobRanks < 2 || ranks.length === 0) return "";
  /** @param {any} e @returns {[string, string]} */
  const onItsSteps = (e) => {
    const steps = e.steps || 0;
    const count = e.count || 0;
    const withSyncs = e.steps_with_syncs || 0;
    const rate = steps ? `${(count / steps).toFixed(1)} a step` : `${count} in all`;
    const within = withSyncs > 0 && withSyncs < steps ? `, in ${withSyncs} of its ${plural(steps, "step")}` : "";
    return [rate, within];
  };
  const rates = new Set(ranks.map((/** @type {any} */ e) => onItsSteps(e).join("")));
  if (ranks.length >= jobRanks && rates.size === 1) return "";
  if (ranks.length === 1) {
    const [rate, within] = onItsSteps(ranks[0]);
    return `on rank ${ranks[0].rank} only, of the ${jobRanks} ranks traced: ${rate} there${within}`;
  }
  const where = ranks.length < jobRanks
    ? `on ${ranks.length} of the ${jobRanks} ranks traced`
    : `on each of the ${jobRanks} ranks traced, unlike`;
  const parts = ranks.slice(0, RANKS_NAMED).map((/** @type {any} */ e) => {
    const [rate, within] = onItsSteps(e);
    return `rank ${e.rank}: ${rate}${within}`;
  });
  if (ranks.length > RANKS_NAMED) parts.push(`${ranks.length - RANKS_NAMED} more`);
  return `${where}: ${parts.join("; ")}`;
}

/**
 * "in 3 of 6 steps, up to 7 in one" where a site synced in only some of the steps (the
 * engine's `steps_with_syncs`, `max_per_step`): its per-step figure is a mean, and a log
 * every N steps reads several at once. The steps are the site's run's: count / per_step.
 * Empty where it synced in every step, or the trace has no step markers; where its line
 * runs under a test with a remainder (`periodic_guard`), that it is already every N steps.
 * @param {any} site
 */
export function spreadText(site) {
  const [guard, around] = periodicGuardOf(site);
  const already = guard ? `already every N steps (${guardPhrase(guard)}${around})` : "";
  // In a job where it does not sync alike on every rank: by rank, as the steps are every
  // rank's ("in 5 of 10 steps" of a read on one of two ranks read as every second step).
  const byRank = ranksText(site);
  if (byRank) return already ? `${byRank}: ${already}` : byRank;
  const withSyncs = site.steps_with_syncs || 0;
  const perStep = site.per_step || 0;
  const steps = perStep > 0 ? Math.round((site.count || 0) / perStep) : 0;
  // nanoGPT's log_interval = 1: the test lets the read through on every step.
  if (guard && steps > 0 && withSyncs >= steps) {
    // A pass of the loop for each step: the line ran in every one, nothing to say.
    if (guard.endsWith(":")) return "";
    return `under ${guardStatement(guard)}, true in every profiled step`;
  }
  if (!(withSyncs > 0 && withSyncs < steps)) return already;
  const most = site.max_per_step || 0;
  const text = `in ${formatCount(withSyncs)} of ${plural(steps, "step")}${most > 1 ? `, up to ${formatCount(most)} in one` : ""}`;
  return already ? `${text}: ${already}` : text;
}

/**
 * What a fix for a library's own code means (`advice.library_code`, the package the
 * user's line called): the text report's words; "" where the fix is the user's to make.
 * `site`: where the library's line has a test of its own that reads every N steps.
 * @param {any} advice
 * @param {any} [site]
 */
export function libraryCodeText(advice, site = null) {
  const pkg = advice?.library_code;
  if (!pkg) return "";
  const owner = pkg.endsWith("s") ? `${pkg}'` : `${pkg}'s`;
  const guard = site?.library?.periodic_guard;
  if (guard) {
    // Its own test says how often: a setting of the library is likely behind it.
    return `An edit of ${owner} own code, which reads it only under ${guardStatement(guard)} the setting of ${pkg} behind that test reads it less often.`;
  }
  const setting = site?.library?.setting_guard;
  if (setting) {
    // A test of its function's parameter or its object's attribute: the caller's argument,
    // or the object's setting, may turn the read off.
    return `An edit of ${owner} own code, which reads it only where ${setting} holds: the argument or setting of ${pkg} behind that test may avoid it.`;
  }
  return `An edit of ${owner} own code: no setting of it is known to avoid this.`;
}
