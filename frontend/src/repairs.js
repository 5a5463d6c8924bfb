// @ts-check
/**
 * What reading had to repair or skip in each trace of a run (`TraceInfo.repairs` in the
 * `summary` route's `traces`), worded as quiet notices: the trace was analysed, but a
 * finding could be missing where events were damaged. Pure.
 */
import { spanLabels } from "./format.js";

/** More repaired files than this are counted, not listed, so the notice stays short. */
export const MAX_REPAIR_NOTICES = 5;

/**
 * One notice per readable trace whose reading needed repairs, in the order of `traces`;
 * unreadable traces (`error`) are the error banner's, not repeated here.
 * @param {any[] | null | undefined} traces
 * @param {number} [max]
 * @returns {{notices: {path: string, text: string}[], more: number}}
 */
export function repairNotices(traces, max = MAX_REPAIR_NOTICES) {
  const repaired = (Array.isArray(traces) ? traces : []).filter(
    (t) => t && !t.error && Array.isArray(t.repairs) && t.repairs.some((r) => typeof r === "string" && r),
  );
  const notices = repaired.slice(0, max).map((t) => ({
    path: String(t.path ?? "(unnamed trace)"),
    text: `read with repairs: ${t.repairs.filter((/** @type {unknown} */ r) => typeof r === "string" && r).join("; ")}`,
  }));
  return { notices, more: repaired.length - notices.length };
}

/**
 * The unreadable trace files of a run, as the banner says them: when every trace of the run
 * failed there are no "others" analysed, and no conclusion about the run can be drawn, so
 * the title says so and the reasons are shown open.
 * @param {number} traceCount the run's `trace_count` (readable or not)
 * @param {number} errorCount its unreadable files (the `runs` answer's errors of this run)
 * @param {number} [writingCount] of those, the files still being written (`being_written`):
 *   where they are all of the run's, the run is not broken, it is being written (a review:
 *   a red "No trace of this run could be read" over a profile still being saved)
 * @returns {{all: boolean, title: string, open: boolean}}
 */
export function unreadableBanner(traceCount, errorCount, writingCount = 0) {
  const all = runUnreadable({ trace_count: traceCount, error_count: errorCount });
  if (all && errorCount > 0 && writingCount === errorCount) {
    return {
      all,
      title: errorCount > 1 ? `The traces of this run are still being written (${errorCount} files)` : "The trace of this run is still being written",
      open: true,
    };
  }
  if (all) {
    return {
      all,
      title: errorCount > 1 ? `No trace of this run could be read (${errorCount} files)` : "No trace of this run could be read",
      open: true,
    };
  }
  return {
    all,
    title: `${errorCount} trace file${errorCount > 1 ? "s" : ""} of this run could not be read (the others are analysed)`,
    open: false,
  };
}

/**
 * The note about unreadable trace files of runs other than the one shown, naming them (a
 * count alone sent the user looking through every run): `2 trace files of run "broken"
 * could not be read.`
 * @param {{run?: string}[]} errors the `runs` answer's errors of the other runs
 * @returns {string}
 */
export function otherRunsUnreadable(errors) {
  const runs = [...new Set(errors.map((e) => e.run).filter(Boolean))];
  const files = `${errors.length} trace file${errors.length === 1 ? "" : "s"}`;
  const shown = runs.slice(0, 3).map((r) => `"${r}"`);
  const more = runs.length > 3 ? ` and ${runs.length - 3} more` : "";
  const where = runs.length === 1 ? `run ${shown[0]}` : `runs ${shown.join(", ")}${more}`;
  return `${files} of ${where} could not be read: choose the run to see why.`;
}

/**
 * Whether nothing of a selection could be read: it has trace files and every one of them
 * failed (the `summary` route's `traces`, each with its `error`). Its report is then empty,
 * and its zeros, "no GPU activity" and "no Python stacks" would be read as findings.
 * @param {any[] | null | undefined} traces
 * @returns {boolean}
 */
export function nothingReadable(traces) {
  return Array.isArray(traces) && traces.length > 0 && traces.every((t) => t && t.error);
}

/**
 * Whether a selection is still being analysed and none of its traces has been analysed yet
 * (the `summary` route's answer): its report is empty until then, and its zeros, "no GPU
 * activity" and "no Python stacks" would read as conclusions. Only the loading state is shown.
 * @param {any} summary the `summary` route's answer
 * @returns {boolean}
 */
export function awaitingFirstTrace(summary) {
  if (!summary || !summary.loading) return false;
  const traces = Array.isArray(summary.traces) ? summary.traces : [];
  return !traces.some((t) => t && !t.error);
}

/**
 * How many traces of a selection were analysed, from its `summary` traces; null when not
 * known (no summary yet).
 * @param {any[] | null | undefined} traces
 * @returns {number | null}
 */
export function readableCount(traces) {
  return Array.isArray(traces) ? traces.filter((t) => t && !t.error).length : null;
}

/**
 * Whether no trace file of a run could be read: an entry of the `runs` answer whose every
 * trace failed (`error_count` of its `trace_count`).
 * @param {{trace_count?: number, error_count?: number} | null | undefined} run
 * @returns {boolean}
 */
export function runUnreadable(run) {
  const errors = run?.error_count || 0;
  return errors > 0 && errors >= (run?.trace_count || 0);
}

/**
 * How a run picker (the run, the compare view's baseline) names a run of the `runs`
 * answer: still loading, unreadable as a whole, or with its unreadable files counted.
 * @param {{name: string, loading?: boolean, trace_count?: number, error_count?: number}} run
 * @returns {string}
 */
export function runOptionLabel(run) {
  if (run.loading) return `${run.name} (loading…)`;
  if (!run.error_count) return run.name;
  return runUnreadable(run) ? `${run.name} (unreadable)` : `${run.name} (${run.error_count} unreadable)`;
}

/**
 * A selection as a sentence names it: `span S of worker W`, `worker W`, else `whole` (the
 * run itself). A span is named as the span selector names it (`spanLabels`: an epoch-ms span
 * by its date-time), from `spans`, the worker's spans it lists, when given.
 * @param {{worker: string | null, span: string | null}} sel
 * @param {string} [whole]
 * @param {(string | null)[]} [spans] the selected worker's spans
 * @returns {string}
 */
export function selectionName(sel, whole = "this run", spans = []) {
  if (sel.span !== null) {
    const names = spanLabels(spans.includes(sel.span) ? spans : [...spans, sel.span]);
    return `span ${names.get(sel.span) ?? sel.span} of worker ${sel.worker}`;
  }
  return sel.worker !== null ? `worker ${sel.worker}` : whole;
}

/**
 * Where a notice says something is missing: `run "r"`, or the worker (and span) of it.
 * @param {{run: string, worker: string | null, span: string | null}} sel
 * @param {(string | null)[]} [spans] the selected worker's spans
 * @returns {string}
 */
export function selectionWhere(sel, spans = []) {
  return sel.worker !== null ? `${selectionName(sel, "", spans)} of run "${sel.run}"` : `run "${sel.run}"`;
}
