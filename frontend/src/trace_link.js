// @ts-check
/**
 * Where to find a sync in a trace viewer. The PyTorch Profiler tab (torch-tb-profiler
 * 0.4.3, its last release) keeps its run, view and worker in its own state and reads none of
 * them from the URL, so it can be opened but not on a run, a view or a time: the dashboard
 * opens the tab and says where to look (run, worker, the Trace view, the step and the offset
 * into it, the operator to search for). Pure.
 */

/**
 * @param {any} sync a Sync of the report
 * @param {any} context its timeline context (host items include the enclosing ProfilerStep)
 * @returns {{step: string | null, offsetUs: number | null, search: string | null, thread: string | null}}
 */
export function traceLocator(sync, context) {
  const host = Array.isArray(context?.host) ? context.host : [];
  const ts = typeof sync?.ts_us === "number" ? sync.ts_us : null;
  const step = ts === null
    ? null
    : host.find((/** @type {any} */ e) => /^ProfilerStep#\d+$/.test(e.name) && e.ts_us <= ts && ts <= e.ts_us + (e.dur_us || 0));
  return {
    step: step ? step.name : null,
    offsetUs: step && ts !== null ? ts - step.ts_us : null,
    search: sync?.op || sync?.api || null,
    thread: sync?.thread !== undefined && sync?.thread !== null ? String(sync.thread) : null,
  };
}

/**
 * The worker and span of the trace file a sync was found in, from the summary's traces.
 * @param {string | null | undefined} tracePath
 * @param {{path: string, worker: string, span?: string | null}[] | null | undefined} traces
 * @returns {{worker: string, span: string | null} | null}
 */
export function traceSelection(tracePath, traces) {
  const t = (traces || []).find((x) => x.path === tracePath);
  return t ? { worker: t.worker, span: t.span ?? null } : null;
}
