// @ts-check
/**
 * What reading had to repair or skip in each trace of a run (`TraceInfo.repairs` in the
 * `summary` route's `traces`), worded as quiet notices: the trace was analysed, but a
 * finding could be missing where events were damaged. Pure.
 */

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
