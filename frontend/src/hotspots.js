// @ts-check
/**
 * The Hotspots view: headline cards, teaching banners for empty/partial traces, the
 * per-step chart and the sortable, filterable, keyboard-navigable sites table.
 */
import { getJson } from "./api.js";
import { h, rovingKeys, s } from "./dom.js";
import { isSiteSort, kindDescription, kindLabel, kindRank } from "./catalogue.js";
import { formatCount, formatPct, formatUs, howObtainedText, idleText, IDLE_UNREAD, plural, savingText, shortPath, siteCountText, siteFallbackLabel, unjudgedUploadsText, withMicro } from "./format.js";
import { binSteps, groupSteps, groupWithStep, hasAxisLabel, layoutStepChart, nextBarIndex, stepsPerBar, thinAxisLabels } from "./layout.js";
import { compareRunNames, stepMsProblem, validStepMs } from "./state.js";
import { inlineCode } from "./markup.js";
import { awaitingFirstTrace, nothingReadable, selectionName, selectionWhere } from "./repairs.js";
import { filterSites, nextRowIndex, nextSort, siteWhere, sitesInStep, sortSites, STEP_FIGURES, UNPROFILED_SORT, withUnprofiled } from "./sites.js";

/** The plugin caps `limit` at 500; runs with more sites are fetched page by page. */
const PAGE = 500;
/**
 * A pending focus (`app.pendingFocus`) for the step chart's Tab stop, the bar holding the
 * selected step: the bar itself may be drawn anew, in other bins, by the render.
 */
export const CHART_TAB_STOP = "step-chart-tab-stop";
const MAX_PAGES = 20;

/**
 * All sites of the selection (all pages).
 * @param {Record<string, any>} params
 */
export async function fetchAllSites(params) {
  const first = await getJson("sites", { ...params, offset: 0, limit: PAGE });
  let items = first.items || [];
  for (let page = 1; items.length < first.total && page < MAX_PAGES; page++) {
    const next = await getJson("sites", { ...params, offset: page * PAGE, limit: PAGE });
    if (!next.items?.length) break;
    items = items.concat(next.items);
  }
  return { total: first.total ?? items.length, items };
}

/**
 * Whether to show latent findings: on a trace without GPU activity the real syncs are
 * empty and the latent ones are what the user needs.
 * @param {any} summaryResp
 * @param {{latent: boolean}} state
 */
export function latentMode(summaryResp, state) {
  return state.latent || (summaryResp && summaryResp.has_gpu_activity === false && !summaryResp.has_runtime);
}

/** @param {any} ctx */
export async function renderHotspots(ctx) {
  const { sel, state, app } = ctx;
  const summaryResp = await getJson("summary", sel);
  // Nothing of the selection could be read: its empty report would read as a clean run
  // (no GPU activity, no stacks, zero syncs). Say only that, with each file's reason.
  if (nothingReadable(summaryResp.traces)) return unreadableView(summaryResp.traces, sel, app.workerSpans());
  // No trace analysed yet: only the loading state, no figures or "no GPU/stacks" to misread.
  if (awaitingFirstTrace(summaryResp)) return firstTraceLoadingView(sel, app.workerSpans());
  const latent = latentMode(summaryResp, state);
  ctx.latent = latent; // read by the detail panel
  const siteParams = { ...sel, latent: latent ? 1 : null, step: state.step };
  const [stepsResp, sites] = await Promise.all([getJson("steps", sel), fetchAllSites(siteParams)]);
  if (!ctx.isCurrent()) return null;
  // A step or site the link names that this run does not have: said, and closed, rather
  // than an empty list under "step 99" or a detail of nothing ("unknown (no source line)").
  // Only once the run is read: a trace still loading may hold them.
  const settled = !app.currentRun()?.loading;
  const where = selectionWhere(sel, app.workerSpans());
  // A trace without ProfilerStep markers has one bar for the whole trace, "step 0" in the
  // data, which no sync is in: never a step to filter to (an empty table, then a detail
  // saying to record stacks the trace has).
  const unmarked = unmarkedPaths(summaryResp.traces);
  const knownStep = state.step === null || (stepsResp.steps || []).some((/** @type {any} */ s) => s.step === state.step && !unmarked.has(s.trace));
  if (settled && !knownStep) {
    app.dropMissing(`Step ${state.step}`, where, { step: null, site: null, sync: null, occ: 0 });
    return renderHotspots({ ...ctx, state: app.state });
  }
  // A site not among the step's (or past the pages fetched): asked by its key over the
  // whole selection, so a step bar clicked with a site open never calls it missing.
  if (settled && state.site && !sites.items.some((/** @type {any} */ s) => s.key === state.site)) {
    const ofSite = await getJson("syncs", { ...sel, site: state.site, latent: latent ? 1 : null, offset: 0, limit: 1 });
    if (!ctx.isCurrent()) return null;
    if (!ofSite.total) {
      app.dropMissing(`Site "${state.site}"`, where, { site: null, sync: null, occ: 0 });
      return renderHotspots({ ...ctx, state: app.state });
    }
  }
  const summary = summaryResp.summary || {};
  // The saving without the profiler, for the step time the user measured without it (the
  // form below asks for it): the selection's traces replayed again in the plugin's
  // analysis processes, kept per step time.
  // What the syncs waited for, as the figures name it: an NPU where every trace read is
  // torch_npu's (its tasks' idle time), else a GPU.
  const idleOn = onNpu(summaryResp.traces) ? "NPU" : "GPU";
  ctx.idleOn = idleOn; // read by the detail panel
  // An NPU run is not replayed, but its tasks' work per step bounds the saving in a step
  // timed without the profiler (the CLI's `--unprofiled-step-ms` on it): no figure per site.
  const boundOnly = idleOn === "NPU" && summary.saving_method === "bound" && (summary.busiest_worker_device_busy_per_step_us ?? summary.device_busy_per_step_us ?? 0) > 0;
  // Where there are syncs to remove (none: nothing to save, with the profiler or without).
  const unprofilable = !latent && (summary.saving_method === "replay" || boundOnly) && summary.sync_count > 0;
  // Never awaited here: a large trace takes as long as its analysis, and the view is drawn
  // meanwhile, saying so; its answer draws the view again.
  const unprofiled = unprofilable && state.unprof !== null ? unprofiledAnswer(sel, state.unprof, ctx) : null;
  ctx.unprofiledSites = unprofiled?.sites || null; // read by the detail panel
  const siteItems = withUnprofiled(sites.items, unprofiled?.sites);
  // The column of savings without the profiler: once an answer gives a site a figure, and
  // while the answer the table is sorted by is on its way (its cells say so).
  const unprofiledFigures = hasUnprofiledFigures(unprofiled?.sites);
  const sortedByUnprofiled = state.sort === UNPROFILED_SORT;
  const unprofiledColumn = unprofiledFigures ? "figures" : sortedByUnprofiled && unprofiled?.pending ? "pending" : null;
  // Latent findings have no cost: sorting by a cost column would be arbitrary, use count.
  // The dashboard's own column (fed by the `unprofiled` route, not the plugin's site list)
  // is sorted by while a step time is given, also where this selection has nothing to
  // predict (a worker without syncs: the next one may have), until an answer comes without
  // a figure to sort by (not fitted, or failed): then the order shown is the profiled one,
  // and the link says so.
  const unprofiledSettledEmpty = unprofiled !== null && !unprofiled.pending && !unprofiledFigures;
  const keepsUnprofiledSort = sortedByUnprofiled && state.unprof !== null && !unprofiledSettledEmpty;
  const served = isSiteSort(state.sort) || keepsUnprofiledSort ? state.sort : "predicted_saving_us";
  // A column the plugin does not sort by (a hand-edited link): the address says the order
  // shown, not the one asked for, so "Copy link" does not pass it on.
  if (served !== state.sort) app.noteState({ sort: served, order: "desc" });
  const sortKey = latent && COST_KEYS.has(served) ? "count" : served;
  const view = { ...state, sort: sortKey, order: sortKey === state.sort ? state.order : "desc" };
  // With a step selected, the count, wait and idle of that step (the chart bar's figures).
  const inStep = sitesInStep(siteItems, state.step);
  const shown = sortSites(filterSites(inStep.sites, state), view.sort, view.order);
  const stepInfo = state.step === null ? null : { step: state.step, inStep: inStep.inStep };
  // A filter typed or a kind picked: a screen reader hears how many sites are left.
  if ((state.q || state.kind) && ctx.app?.announce) ctx.app.announce(siteCountText(shown.length, sites.total));
  const hasDetail = !!state.site;
  return h(
    "div",
    { class: "sa-hotspots" },
    teachingBanners(summaryResp, latent, sites.total, app),
    headlineCards(summary, latent, summaryResp.job_ranks || 0, latentOnNpu(summaryResp.traces), unprofiledFigure(state.unprof, unprofiled), idleOn),
    // One line on how the predicted savings were obtained (replay, or the bound and why).
    latent || !summary.saving_how
      ? null
      : h("p", { class: "sa-note sa-how", "data-testid": "saving-how", "data-method": summary.saving_method }, howObtainedText(summary)),
    // Where the profiler's own overhead is a large share of the step: what the prediction
    // is for, and the bound the device's busy time sets without the profiler.
    latent || !summary.profiler_note ? null : h("p", { class: "sa-note sa-profiler", "data-testid": "profiler-note" }, withMicro(summary.profiler_note)),
    unprofilable ? unprofiledForm(state, app, unprofiled, boundOnly) : null,
    // Copies the trace cannot judge (ROCm records no pinned or pageable): said, not passed over.
    unjudgedUploadsText(summaryResp.traces) ? h("p", { class: "sa-note", "data-testid": "unjudged-uploads" }, unjudgedUploadsText(summaryResp.traces)) : null,
    // On a CPU-only trace every step has zero syncs and zero cost: nothing to draw.
    latent ? null : cachedStepChart(stepsResp, summaryResp.traces, sel, state, app, ctx.width),
    h(
      "div",
      { class: `sa-main${hasDetail ? "" : " no-detail"}` },
      h(
        "section",
        { "aria-label": "Hotspots" },
        h(
          "div",
          { class: "sa-section-title" },
          latent ? "Latent sync sites" : "Hotspots",
          h("span", { class: "sa-chip", "data-testid": "site-count" }, siteCountText(shown.length, sites.total)),
          state.step !== null
            ? h(
                "span",
                { class: "sa-chip", "data-testid": "step-filter" },
                `step ${state.step}`,
                h(
                  "button",
                  {
                    "aria-label": "Clear step filter",
                    "data-focus-key": "clear-step",
                    onclick: () => {
                      // Back to the chart (its Tab stop), not to the page's body.
                      app.pendingFocus = CHART_TAB_STOP;
                      app.setState({ step: null });
                    },
                  },
                  "×",
                ),
              )
            : null,
        ),
        filters(state, app, sites.items),
        stepInfo && shown.length ? stepNote(stepInfo) : null,
        sitesTable(shown, view, app, latent, stepInfo, unprofiledColumn, idleOn),
        listedApart(summaryResp.listed_apart),
      ),
      hasDetail
        ? h("aside", {
            class: "sa-detail-slot",
            "aria-label": "Detail",
            // Escape anywhere in the panel closes it, back to the site's row.
            onkeydown: (/** @type {KeyboardEvent} */ e) => {
              if (e.key !== "Escape") return;
              e.preventDefault();
              app.closeDetail();
            },
          })
        : null,
    ),
  );
}

/**
 * The `unprofiled` answers (or `{error}`) come in by selection and step time: kept here so
 * that the view drawn again when one arrives (and at every later draw) has it at once.
 * @type {Map<string, any>}
 */
const unprofiledAnswers = new Map();
const UNPROFILED_KEPT = 32;

/**
 * The `unprofiled` route's answer for a step time, `{error}` saying why there is none, or
 * `{pending: true}` while it is being made (asked now if it was not: the view is drawn
 * again when it comes, if still the view shown).
 * @param {Record<string, any>} sel
 * @param {number} stepMs
 * @param {any} ctx
 */
function unprofiledAnswer(sel, stepMs, ctx) {
  // The run's generation too: a trace analysed again (changed, edited sources) is asked again.
  const key = JSON.stringify([sel, ctx.app.currentRun()?.generation ?? null, stepMs]);
  const found = unprofiledAnswers.get(key);
  if (found) return found;
  const pending = { pending: true };
  unprofiledAnswers.set(key, pending);
  while (unprofiledAnswers.size > UNPROFILED_KEPT) unprofiledAnswers.delete(unprofiledAnswers.keys().next().value);
  getJson("unprofiled", { ...sel, step_ms: stepMs })
    .catch((e) => ({ error: e instanceof Error ? e.message : String(e) }))
    .then((answer) => {
      // A failed one stays shown until Predict asks again (the plugin keeps only good answers).
      unprofiledAnswers.set(key, answer.error ? { ...answer, retry: true } : answer);
      // Drawn again while the view still asks for it (a poll may have drawn it meanwhile),
      // and said once: the view's nodes are drawn anew at every draw, so a live region in
      // them would be heard at each one, or at none.
      if (ctx.app.state.unprof !== stepMs) return;
      ctx.app.render();
      ctx.app.announce?.(answer.error ? `No prediction without the profiler: ${answer.error}` : withMicro(answer.text || ""));
    });
  return pending;
}

/**
 * What the user typed into the step time field and has not asked for yet, and what was
 * wrong with it: kept across the view's draws (a poll while traces load draws it again).
 * @type {{run: string | null, text: string, problem: string}}
 */
const draft = { run: null, text: "", problem: "" };

/**
 * The step time measured without the profiler, asked for, and what the replay then says
 * fixing every sync saves (the CLI's `--unprofiled-step-ms` and its "unprofiled" line).
 * @param {any} state
 * @param {any} app
 * @param {any} answer the `unprofiled` answer, `{error}`, `{pending}`, or null (no step time given)
 * @param {boolean} [boundOnly] an NPU run: not replayed, the answer is the bound its work sets
 */
function unprofiledForm(state, app, answer, boundOnly = false) {
  const inputId = "sa-unprof-input";
  const problemId = "sa-unprof-problem";
  const given = state.unprof === null ? "" : String(state.unprof);
  const typed = draft.run === state.run ? draft : { text: given, problem: "" };
  // What is wrong with the value typed, and that the answer still shown is another value's
  // (it stayed under the problem as if it were the answer to it).
  const problemText = (/** @type {string} */ wrong) => (wrong && answer !== null ? `${wrong.replace(/\.?$/, ".")} The answer below is still the one for ${state.unprof} ms.` : wrong);
  const problem = h("span", { id: problemId, class: "sa-unprof-problem", "data-testid": "unprofiled-problem" }, problemText(typed.problem));
  const input = /** @type {HTMLInputElement} */ (
    h("input", {
      id: inputId,
      type: "text",
      inputmode: "decimal",
      size: 9,
      autocomplete: "off",
      // No example number: one beside this run's own step time read as a suggested value.
      value: typed.text,
      "aria-describedby": problemId,
      "aria-invalid": typed.problem ? "true" : null,
      "data-testid": "unprofiled-input",
      "data-focus-key": "unprofiled-input",
      oninput: () => {
        Object.assign(draft, { run: state.run, text: input.value, problem: "" });
        // What was wrong with the value before is not said of the one being typed.
        problem.textContent = "";
        input.removeAttribute("aria-invalid");
        result.classList.remove("sa-unprof-stale");
        result.removeAttribute("data-stale");
      },
    })
  );
  // A figure to show: the replay's saving, or on an NPU run (not replayed) its bound.
  const fitted =
    typeof answer?.summary?.unprofiled_predicted_saving_per_step_us === "number" ||
    (boundOnly && typeof answer?.summary?.unprofiled_saving_at_most_per_step_us === "number");
  const result =
    answer === null
      ? h(
          "p",
          { class: "sa-muted" },
          boundOnly
            ? "The profiler slows the host, so the savings above are the profiled program's. Time some steps of the same program without it (the median after warm-up) and give it here: no fix that keeps the NPU's work makes a step shorter than that work, so fixing every sync saves at most that step less it (NPU traces are not replayed: no figure per site)."
            : "The profiler slows the host, so the savings above are the profiled program's. Time some steps of the same program without it (the median after warm-up) and give it here: each trace is replayed again with the profiler's estimated overhead taken out until its typical step takes that time.",
        )
      : answer.pending
        ? h("p", { "data-testid": "unprofiled-pending" }, h("span", { class: "sa-spinner", "aria-hidden": "true" }), boundOnly ? `Bounding the saving for a step of ${state.unprof} ms…` : `Replaying the trace for a step of ${state.unprof} ms… (about as long as its analysis took)`)
        : answer.error
          ? h("p", { class: "sa-unprof-problem", "data-testid": "unprofiled-error" }, answer.error)
          : h(
              "p",
              {
                "data-testid": "unprofiled-text",
                // No figure (not fitted): said as a note, not as a result.
                "data-fitted": String(fitted),
                class: fitted ? null : "sa-unprof-none",
              },
              withMicro(answer.text || ""),
            );
  const markStale = () => {
    if (answer === null) return;
    result.classList.add("sa-unprof-stale");
    result.setAttribute("data-stale", "true");
  };
  if (typed.problem) markStale();
  return h(
    "form",
    {
      class: "sa-note sa-unprof",
      "data-testid": "unprofiled-form",
      onsubmit: (/** @type {Event} */ e) => {
        e.preventDefault();
        const text = input.value.trim();
        const stepMs = text ? validStepMs(text) : null;
        if (text && stepMs === null) {
          Object.assign(draft, { run: state.run, text: input.value, problem: stepMsProblem(text) });
          problem.textContent = problemText(draft.problem);
          input.setAttribute("aria-invalid", "true");
          markStale();
          app.announce?.(problemText(draft.problem));
          return;
        }
        Object.assign(draft, { run: null, text: "", problem: "" });
        // Asked again after a failure: tried again, not the failure shown again.
        for (const [key, kept] of unprofiledAnswers) if (kept.retry) unprofiledAnswers.delete(key);
        // The focus stays where it was (the field, caret and all, or the button): the
        // draw puts it back by its focus key.
        if (stepMs === null && state.unprof !== null) app.announce?.("Prediction without the profiler cleared");
        if (stepMs === state.unprof) app.render();
        else app.setState({ unprof: stepMs });
      },
    },
    h("label", { for: inputId }, "Step time without the profiler (ms) "),
    input,
    h("button", { type: "submit", "data-testid": "unprofiled-predict", "data-focus-key": "unprofiled-predict" }, "Predict"),
    problem,
    result,
  );
}

/**
 * The view of a selection still being analysed, none of its traces analysed yet.
 * @param {{worker: string | null, span: string | null}} sel
 * @param {string[]} spans the selected worker's spans (to name the span as its selector does)
 */
function firstTraceLoadingView(sel, spans) {
  return h(
    "div",
    { class: "sa-empty", role: "status", "data-testid": "run-first-loading" },
    h("span", { class: "sa-spinner", "aria-hidden": "true" }),
    h("h2", null, `Analysing ${selectionName(sel, undefined, spans)}…`),
    h("p", null, "Its findings appear here as soon as its first trace is analysed."),
  );
}

/**
 * The view of a selection none of whose trace files could be read. For a whole run the
 * banner above lists the files and reasons; for a worker or span of a run whose other
 * traces were read, they are listed here.
 * @param {any[]} traces the summary's traces, each with its `error`
 * @param {{worker: string | null, span: string | null}} sel
 * @param {string[]} spans the selected worker's spans (to name the span as its selector does)
 */
function unreadableView(traces, sel, spans) {
  return h(
    "div",
    { class: "sa-empty", "data-testid": "nothing-read" },
    // A whole run's banner above already says it, with the reasons.
    sel.worker === null ? null : h("h2", null, `No trace of ${selectionName(sel, undefined, spans)} could be read`),
    sel.worker === null
      ? h("p", null, "Nothing to analyse until a trace file of this run can be read: its findings appear here then.")
      : unreadableFiles(traces),
  );
}

/**
 * Trace files that could not be read, each with why.
 * @param {{path: string, error: string}[]} files
 */
export function unreadableFiles(files) {
  return h(
    "ul",
    { class: "sa-errors", style: { "text-align": "left" } },
    files.map((f) => h("li", null, h("code", null, f.path), ": ", f.error)),
  );
}

/**
 * Syncs kept out of the findings and totals, said in a few lines so that a user who sees
 * them in the Trace view knows why they are not ranked.
 * @param {any} apart the summary's listed_apart
 */
function listedApart(apart) {
  const profiler = apart?.profiler_overhead || {};
  const warmup = apart?.warmup_allocator || {};
  const worker = apart?.collective_worker || {};
  if (!profiler.count && !warmup.count && !worker.count) return null;
  const advice = warmup.advice || {};
  return h(
    "div",
    { class: "sa-note sa-apart", "data-testid": "listed-apart" },
    h("b", null, "Listed apart (not in the findings, totals or CI gate)"),
    h(
      "ul",
      null,
      profiler.count
        ? h(
            "li",
            { "data-testid": "apart-profiler" },
            `The profiler's own synchronize (prof.step(), profiler stop): ${plural(profiler.count, "sync")}, ${formatUs(profiler.host_wait_us)} host wait. Its cost, not your program's.`,
          )
        : null,
      warmup.count
        ? h(
            "li",
            { "data-testid": "apart-warmup" },
            `Allocator syncs in warm-up (${(warmup.regions || []).join(", ") || "warm-up"}): ${plural(warmup.count, "sync")}, ${formatUs(warmup.host_wait_us)} host wait, ${formatUs(warmup.gpu_idle_us)} GPU idle. Expected once while the caching allocator and cuDNN's benchmark warm up. `,
            advice.title ? h("span", null, "If they recur after warm-up: ", inlineCode(advice.title).map((part) => (part.code ? h("code", null, part.text) : part.text))) : null,
          )
        : null,
      worker.count
        ? h(
            "li",
            { "data-testid": "apart-collective-worker" },
            `gloo's worker thread waiting for its own device copies: ${plural(worker.count, "sync")}, ${formatUs(worker.host_wait_us)} host wait. It blocks no thread of your program, which waits, if at all, in Work.wait.`,
          )
        : null,
    ),
  );
}

/**
 * Traces without ProfilerStep markers whose top-level record_function spans repeat under
 * one name (the engine's `step_annotation_hint`): the report counts them as steps when
 * asked (`--step-annotation`); the tab says how, as the terminal does.
 * @param {any[]} unmarked the unmarked traces read
 */
export function annotationStepsHint(unmarked) {
  const names = new Set(unmarked.map((/** @type {any} */ t) => t.step_annotation_hint ?? null));
  if (!unmarked.length || names.size !== 1 || names.has(null)) return null;
  const name = String([...names][0]);
  const count = unmarked.reduce((/** @type {number} */ n, /** @type {any} */ t) => n + (t.step_annotation_hint_count || 0), 0);
  const quoted = name.replace(/'/g, "'\\''");
  return h(
    "p",
    { "data-testid": "step-annotation-hint" },
    `Or count its ${formatCount(count)} `,
    h("code", null, `record_function("${name}")`),
    " spans as the steps: start TensorBoard with ",
    h("code", null, `--sync_advisor_step_annotation '${quoted}'`),
    ", or run ",
    h("code", null, `tb-syncfinder report LOGDIR --step-annotation '${quoted}'`),
    ".",
  );
}

/**
 * Traces whose steps are spans of a record_function (TensorBoard started with
 * `--sync_advisor_step_annotation`): said, as the terminal says it, with the names a
 * pattern took where it took several (each span of each counted as a step).
 * @param {any[]} traces the traces read
 */
export function annotationStepsNote(traces) {
  const annotated = traces.filter((/** @type {any} */ t) => t.steps_from_annotation);
  if (!annotated.length) return null;
  const asked = [...new Set(annotated.map((/** @type {any} */ t) => String(t.steps_from_annotation)))];
  const several = annotated.some((/** @type {any} */ t) => (t.step_annotation_names || []).length > 1);
  const names = [...new Set(annotated.flatMap((/** @type {any} */ t) => t.step_annotation_names || []))];
  return h(
    "div",
    { class: several ? "sa-banner" : "sa-banner info", "data-testid": "steps-from-annotation" },
    h(
      "p",
      null,
      "Steps: the spans of ",
      asked.map((name, i) => [i ? ", " : "", h("code", null, `record_function("${name}")`)]),
      ` (--sync_advisor_step_annotation), each to the next one's start, in ${plural(annotated.length, "trace")} without ProfilerStep markers.`,
      several
        ? ` It matched ${formatCount(names.length)} names (${names.join(", ")}), and each span of each is counted as a step: give the one that spans a training step.`
        : "",
    ),
  );
}

/**
 * The per-step figures average the steps of workers that are not ranks of one job
 * (Lightning's training and validation traces in one folder): said, with a button per
 * worker to see its own figures (the engine's `summary.steps_note`, `steps_by_worker`).
 * @param {any} summary
 * @param {any} app
 */
export function stepsNoteBanner(summary, app) {
  const note = summary.steps_note;
  const workers = Object.entries(summary.steps_by_worker || {});
  if (!note || workers.length < 2) return null;
  // Across runs the names are "run/worker": the Worker menu picks within one run.
  const pickable = app && workers.every(([name]) => !name.includes("/"));
  return h(
    "div",
    { class: "sa-banner", "data-testid": "steps-note" },
    h("h3", null, `Per-step figures average ${plural(workers.length, "worker")}' steps`),
    h("p", null, note.charAt(0).toUpperCase() + note.slice(1) + "."),
    pickable
      ? h(
          "p",
          { class: "sa-worker-picks" },
          workers.map(([name, steps]) =>
            h(
              "button",
              {
                type: "button",
                class: "sa-linkish",
                "data-testid": "steps-note-worker",
                "data-worker": name,
                onclick: () => app.setState({ worker: name, span: null, step: null, site: null, sync: null }),
              },
              `${name} (${plural(steps, "step")})`,
            ),
          ),
        )
      : null,
  );
}

/**
 * @param {any} resp summary response
 * @param {boolean} latent
 * @param {number} siteTotal
 * @param {any} [app] the app (its setState), for the banners that pick a worker
 */
function teachingBanners(resp, latent, siteTotal, app = null) {
  const summary = resp.summary || {};
  const out = [];
  const mixed = stepsNoteBanner(summary, app);
  if (mixed) out.push(mixed);
  if (resp.loading) {
    out.push(
      h(
        "div",
        { class: "sa-banner info", role: "status", "data-testid": "run-loading" },
        h("span", { class: "sa-spinner", "aria-hidden": "true" }),
        "Some traces of this run are still being analysed: the figures below grow as they finish.",
      ),
    );
  }
  // A torch_npu trace at its default profiler level: NPU work, but no AscendCL call
  // recorded, so no wait can be seen (neither a CPU-only trace nor a clean one).
  const npuUnrecorded =
    resp.has_gpu_activity === false &&
    (resp.traces || []).some((/** @type {any} */ t) => !t.error && t.device === "npu" && t.has_runtime === false);
  if (npuUnrecorded) {
    out.push(
      h(
        "div",
        { class: "sa-banner", "data-testid": "npu-unrecorded" },
        h("h3", null, "No wait for the NPU is recorded in this trace"),
        h(
          "p",
          null,
          "torch_npu's default profiler level (Level0) records no AscendCL call. To see the syncs, profile with ",
          h("code", null, "profiler_level=torch_npu.profiler.ProfilerLevel.Level1"),
          " in ",
          h("code", null, "torch_npu.profiler._ExperimentalConfig"),
          ".",
          summary.latent_count ? ` Listed below, without timings: the ${formatCount(summary.latent_count)} operator calls that synchronize the host with the NPU.` : "",
        ),
        // What that list leaves out (the terminal's words): it read as every sync there is.
        resp.latent_not_listed ? h("p", { "data-testid": "not-listed" }, resp.latent_not_listed) : null,
      ),
    );
  } else if (resp.has_gpu_activity === false && !resp.has_runtime) {
    out.push(
      h(
        "div",
        { class: "sa-banner info", "data-testid": "no-gpu" },
        h("h3", null, "No GPU activity in this trace", resp.device ? ` (device: ${resp.device})` : ""),
        summary.latent_count
          ? h(
              "p",
              null,
              `These ${formatCount(summary.latent_count)} operator calls would synchronize the host with a GPU if this code ran on one (CUDA or ROCm). `,
              "They cost nothing here, so they are listed without timings: fix them before moving to a GPU.",
            )
          : resp.library_copies
            ? // Not none at all: each library copy waits where its tensor lives on a GPU.
              h("p", null, "None is listed: only libraries' own copies to the host (below), each a wait on a GPU where its tensor lives there.")
            : h("p", null, "No operator in it would synchronize on a GPU either."),
        resp.latent_not_listed ? h("p", { "data-testid": "not-listed" }, resp.latent_not_listed) : null,
        // Copies to the host a library made in its own code: counted, not listed.
        resp.library_copies ? h("p", { "data-testid": "library-copies" }, resp.library_copies) : null,
        // Explicit synchronizes in the functions that ran: none ran here, each would there.
        resp.unrun_syncs ? h("p", { "data-testid": "unrun-syncs" }, resp.unrun_syncs) : null,
      ),
    );
  }
  // Of the traces read, those counted as one step each: not an unreadable file, nor one
  // that recorded nothing (no step at all), which "1 of 5 trace files" had counted.
  const traces = readTraces(resp.traces);
  const fromAnnotation = annotationStepsNote(traces);
  if (fromAnnotation) out.push(fromAnnotation);
  const unmarkedTraces = traces.filter((/** @type {any} */ t) => t.step_markers === false && t.steps > 0);
  const unmarked = unmarkedTraces.length;
  // Beside files with steps, which ones: the run's figures per step mix whole traces in.
  const some = unmarked < traces.length;
  const named = unmarkedTraces.slice(0, 3).map((/** @type {any} */ t) => t.worker || String(t.path || "").split(/[\\/]/).pop());
  const more = unmarked > 3 ? ` and ${formatCount(unmarked - 3)} more` : "";
  if (unmarked) {
    out.push(
      h(
        "div",
        { class: "sa-banner", "data-testid": "no-step-markers" },
        h("h3", null, traces.length > 1 ? `${unmarked} of ${plural(traces.length, "trace file")} without ProfilerStep markers` : "No ProfilerStep markers in this trace"),
        h(
          "p",
          null,
          some
            ? `${named.join(", ")}${more} ${unmarked > 1 ? "are each" : "is"} counted as one step beside the other files' steps, so the run's figures per step mix whole traces with steps. Profile with a schedule and call `
            : `${unmarked > 1 ? "Each is" : "It is"} counted as one step, so the per-step figures are per trace file. Profile with a schedule and call `,
          h("code", null, "prof.step()"),
          " at the end of each training step to see them per step.",
        ),
        annotationStepsHint(unmarkedTraces),
      ),
    );
  }
  if (resp.has_stacks === false) {
    out.push(
      h(
        "div",
        { class: "sa-banner", "data-testid": "no-stacks" },
        h("h3", null, "No Python stacks in this trace"),
        h("p", null, "Without stacks the Sync Advisor can name the operator but not your source line. Profile with with_stack=True:"),
        // torch_npu's snippet where an NPU trace lacks stacks (a run may also hold others).
        h(
          "pre",
          { class: "sa-code" },
          withStackSnippet(
            (resp.traces || []).some((/** @type {any} */ t) => !t.error && t.device === "npu" && !t.has_stacks) ? "npu" : resp.device,
            readTraces(resp.traces).some((/** @type {any} */ t) => LIGHTNING_TRACE.test(String(t.path || ""))),
          ),
        ),
      ),
    );
  }
  if (!latent && (resp.has_gpu_activity !== false || resp.has_runtime) && (summary.sync_count || 0) === 0 && siteTotal === 0) {
    const checked = summary.checked || [];
    out.push(
      h(
        "div",
        { class: "sa-banner info", "data-testid": "no-syncs" },
        h("h3", null, "No host-device synchronization found"),
        h(
          "p",
          null,
          `Checked ${plural(summary.step_count || 0, "step")}`,
          // The files read: unreadable ones are in their own banner, checked for nothing.
          // Files that recorded nothing of the program ([] or metadata only) were not checked.
          checkedTraces(resp.traces).length ? ` in ${plural(checkedTraces(resp.traces).length, "trace file")}` : "",
          checked.length ? " for:" : ".",
        ),
        checked.length ? h("ul", null, checked.map((/** @type {string} */ c) => h("li", null, c))) : null,
      ),
    );
  }
  return out;
}

/**
 * The trace files of an answer that were read (no `error`).
 * @param {any[] | undefined} traces
 * @returns {any[]}
 */
function readTraces(traces) {
  return (traces || []).filter((/** @type {any} */ t) => t && !t.error);
}

/**
 * Whether a trace recorded nothing of the program: no event at all, or (as Kineto writes a
 * file stopped before any step) only metadata and the profiler's own span, on no device.
 * The text report's ``outputs.text.recorded_nothing``, to the letter.
 * @param {any} trace a `traces[]` entry of an answer
 */
export function recordedNothing(trace) {
  const nothing = trace.event_count === 0 || (trace.step_markers === false && trace.host_events_per_step === 0);
  return nothing && (trace.device == null || trace.device === "cpu") && !trace.has_gpu_activity && !trace.has_runtime;
}

/**
 * The trace files of an answer that were read and recorded something: those a "no sync
 * found" was checked in.
 * @param {any[] | undefined} traces
 */
export function checkedTraces(traces) {
  return readTraces(traces).filter((/** @type {any} */ t) => !recordedNothing(t));
}

/** The file names Lightning's PyTorchProfiler writes (`fit-prof-[Strategy]SingleDeviceStrategy.training_step.<ns>.pt.trace.json`). */
const LIGHTNING_TRACE = /\[(?:Strategy|LightningModule)\][^/\\]*\.pt\.trace\.json(?:\.gz)?$/;

/**
 * How to profile with Python stacks on the run's device: torch_npu's own profiler on an
 * NPU (at Level1, whose AscendCL calls show the waits), the CPU alone on a CPU-only run,
 * else CUDA's activity (ROCm's too); Lightning's profiler for traces it wrote (it passes
 * `with_stack` on to torch's).
 * @param {string | undefined} device the selection's device (`summary` answer's `device`)
 * @param {boolean} [lightning] the traces are Lightning's `PyTorchProfiler`'s
 * @returns {string}
 */
export function withStackSnippet(device, lightning = false) {
  if (lightning && device !== "npu") {
    return [
      "from lightning.pytorch.profilers import PyTorchProfiler",
      "",
      "trainer = Trainer(profiler=PyTorchProfiler(",
      "    with_stack=True,      # Python stacks -> exact source lines",
      "))",
    ].join("\n");
  }
  if (device === "npu") {
    return [
      "import torch_npu",
      "with torch_npu.profiler.profile(",
      "    activities=[torch_npu.profiler.ProfilerActivity.CPU,",
      "                torch_npu.profiler.ProfilerActivity.NPU],",
      "    with_stack=True,      # Python stacks -> exact source lines",
      "    with_modules=True,    # nn.Module path of each finding",
      "    experimental_config=torch_npu.profiler._ExperimentalConfig(",
      "        profiler_level=torch_npu.profiler.ProfilerLevel.Level1),  # the waits",
      '    on_trace_ready=torch_npu.profiler.tensorboard_trace_handler("./logs/run"),',
      ") as prof:",
      "    ...",
    ].join("\n");
  }
  const activities = device === "cpu" ? "[ProfilerActivity.CPU]" : "[ProfilerActivity.CPU, ProfilerActivity.CUDA]";
  return [
    "with torch.profiler.profile(",
    `    activities=${activities},`,
    "    with_stack=True,      # Python stacks -> exact source lines",
    "    with_modules=True,    # nn.Module path of each finding",
    '    on_trace_ready=torch.profiler.tensorboard_trace_handler("./logs/run"),',
    ") as prof:",
    "    ...",
  ].join("\n");
}

/**
 * Whether every trace read is torch_npu's (measured or not): its figures are an NPU's.
 * @param {any[] | undefined} traces
 */
function onNpu(traces) {
  const read = readTraces(traces);
  return read.length > 0 && read.every((/** @type {any} */ t) => t.device === "npu");
}

/**
 * Whether the latent syncs are an NPU's: every trace read is torch_npu's without AscendCL
 * calls (its default profiler level), none CPU-only.
 * @param {any[] | undefined} traces
 */
function latentOnNpu(traces) {
  const read = readTraces(traces);
  return read.length > 0 && read.every((/** @type {any} */ t) => t.device === "npu" && t.has_runtime === false);
}

/**
 * The step time given without the profiler and what fixing every sync saves there, where
 * the `unprofiled` answer has that figure (fitted); else null.
 * @param {number | null} stepMs
 * @param {any} answer
 * @returns {{stepMs: number, savingUs: number} | null}
 */
function unprofiledFigure(stepMs, answer) {
  const savingUs = answer?.summary?.unprofiled_predicted_saving_per_step_us;
  return stepMs !== null && typeof savingUs === "number" ? { stepMs, savingUs } : null;
}

/**
 * @param {any} summary
 * @param {boolean} latent
 * @param {number} [ranks] the job's ranks these traces are (`job_ranks`; 0: not a job)
 * @param {boolean} [npu] the latent syncs are an NPU's (`latentOnNpu`)
 * @param {{stepMs: number, savingUs: number} | null} [unprofiled] the saving without the
 *   profiler for the step time given (the form's answer), shown beside the profiled one
 */
function headlineCards(summary, latent, ranks = 0, npu = false, unprofiled = null, idleOn = "GPU") {
  const steps = summary.step_count || 0;
  // A job's steps add up over its ranks: "16 steps" of a 2-rank job of 8 read as the job's.
  const ofRanks = ranks > 1 ? ` of ${formatCount(ranks)} ranks` : "";
  const perStep = (/** @type {number} */ v) => (steps ? v / steps : v);
  // Every "step" a whole trace without ProfilerStep markers: said per trace, as it is.
  const wholeTraces = steps > 0 && (summary.traces_without_step_markers || 0) === steps;
  const unit = wholeTraces ? "trace" : "step";
  const stepsText = wholeTraces ? `${plural(steps, "trace file")} (no step markers)` : plural(steps, "step");
  /** @param {string} label @param {string} value @param {string} sub @param {string} id @param {string | null} [title] */
  const card = (label, value, sub, id, title = null, more = null) =>
    h("div", { class: "sa-card", "data-testid": `card-${id}`, title }, h("div", { class: "label" }, label), h("div", { class: "value" }, value), h("div", { class: "sub" }, sub), more);
  if (latent) {
    return h(
      "div",
      { class: "sa-cards" },
      card("Latent syncs", formatCount(summary.latent_count || 0), `would block on ${npu ? "the NPU" : "a GPU"}`, "latent"),
      card(wholeTraces ? "Traces (no step markers)" : "Steps", formatCount(steps), `mean ${formatUs(summary.mean_step_time_us)}`, "steps"),
    );
  }
  return h(
    "div",
    { class: "sa-cards" },
    card(`Syncs per ${unit}`, formatCount(summary.syncs_per_step ?? 0), `${formatCount(summary.sync_count || 0)} in ${stepsText}${ofRanks}`, "syncs"),
    card(`Host wait per ${unit}`, formatUs(perStep(summary.host_wait_us || 0)), `${formatUs(summary.host_wait_us)} in total`, "wait"),
    // The bubbles after the syncs (each sync's end to the device's next work, shared ones
    // counted once), not the idle the syncs cause: that is on the step-time card (worded as
    // the CLI words it, "GPU idle caused by syncs").
    summary.gpu_idle_measured === false
      ? card("NPU idle after syncs", "not measured", "the trace holds no task of the NPU's own", "idle", IDLE_UNREAD)
      : card(
          `${idleOn} idle after syncs`,
          formatUs(perStep(summary.gpu_idle_us || 0)),
          `per step, ${formatUs(summary.gpu_idle_us)} in total`,
          "idle",
          `${idleOn} idle after syncs: from each sync's end until the ${idleOn} is busy again, a gap shared by back-to-back syncs counted once. Some of it would remain without the syncs; the step-time card gives the part that goes away with them.`,
        ),
    card("Share of step time", formatPct(summary.share_of_step ?? 0), shareBasis(summary, idleOn), "share"),
    summary.gpu_idle_measured === false
      ? card("Step time if removed", "not predicted", `now ${formatUs(summary.mean_wall_step_time_us || summary.mean_step_time_us)}; only the host wait is known, and it is no bound`, "estimate", summary.saving_how || null)
      : card(
          "Step time if removed",
          formatUs(summary.saving_how ? summary.predicted_step_time_us : summary.estimated_step_time_us),
          `now ${formatUs(summary.mean_wall_step_time_us || summary.mean_step_time_us)}, ${summary.saving_method === "replay" ? "~" : "≤"}${formatUs(summary.predicted_saving_per_step_us ?? 0)} saved per step${summary.saving_method !== "bound" ? `; ${idleOn} idle caused by syncs (after them and later) ${formatPct(summary.sync_idle_share ?? 0)}` : ""}`,
          "estimate",
          null,
          // The figures above are the profiled program's: given the step time without the
          // profiler, the card says that program's too, not only the form below.
          unprofiled
            ? h(
                "div",
                { class: "sub sa-card-unprof", "data-testid": "card-estimate-unprofiled" },
                `without the profiler: ${unprofiled.stepMs} ms → ~${formatUs(Math.max(unprofiled.stepMs * 1000 - unprofiled.savingUs, 0))}, ~${formatUs(unprofiled.savingUs)} saved per step`,
              )
            : null,
        ),
  );
}

/**
 * What the share of step time is a share of: the host's steps, which the step-time card's
 * "now" exceeds where the device ran on after the host (as the CLI says).
 * @param {any} summary
 * @param {string} [idleOn] what idled: "GPU", or "NPU" for torch_npu's traces
 */
export function shareBasis(summary, idleOn = "GPU") {
  const host = summary.mean_step_time_us || 0;
  const wall = summary.mean_wall_step_time_us || 0;
  if (host > 0 && wall > host * 1.05) return `host wait + ${idleOn} idle, of the host's ${formatUs(host)} step (the device's is longer)`;
  return `host wait + ${idleOn} idle`;
}

/** @param {any} site */
function savingTitle(site, idleOn = "GPU") {
  if (site.gpu_idle_measured === false) return IDLE_UNREAD;
  if (site.saving_method === "replay") return "predicted by replaying the profiled steps without this site's syncs";
  return `upper bound (host wait + ${idleOn} bubble)${site.saving_note ? `: ${site.saving_note}` : ""}`;
}

/** Above this many workers in one selection, the chart shows one bar per worker. */
const MAX_STEP_GROUPS = 8;

/**
 * The step chart last drawn, kept while its data (the `steps` and `summary` answers, which
 * the API cache hands back as the same objects) and its width stay the same: sorting,
 * filtering, picking a step or opening a detail only update which bar is selected.
 * @type {{steps: any, traces: any, width: number, el: HTMLElement, view: {sel: any, state: any}, update: () => void} | null}
 */
let chartCache = null;

/**
 * The paths of the traces without ProfilerStep markers (each one step, the whole trace).
 * @param {any[] | null | undefined} traces
 * @returns {Set<string>}
 */
export function unmarkedPaths(traces) {
  return new Set((traces || []).filter((t) => t.step_markers === false).map((t) => t.path));
}

/**
 * The per-step chart, drawn again only when its data or width changed (see `chartCache`).
 * @param {any} stepsResp the `steps` answer
 * @param {any[] | undefined} traces the summary's traces
 * @param {{run: string, worker: string | null, span: string | null}} sel
 * @param {any} state
 * @param {any} app
 * @param {number} viewWidth
 * @returns {HTMLElement | null}
 */
function cachedStepChart(stepsResp, traces, sel, state, app, viewWidth) {
  const c = chartCache;
  if (c && c.steps === stepsResp && c.traces === traces && c.width === viewWidth) {
    c.view.sel = sel;
    c.view.state = state;
    c.update();
    return c.el;
  }
  const view = { sel, state };
  const drawn = stepChart(stepsResp.steps || [], traces || [], view, app, viewWidth);
  chartCache = drawn ? { steps: stepsResp, traces, width: viewWidth, el: drawn.el, view, update: drawn.update } : null;
  return drawn ? drawn.el : null;
}

/**
 * The per-step chart. Each trace file counts its own steps, so the steps of different
 * workers (or spans) are drawn in groups of their own, never on one axis. A click (or Enter)
 * on a step filters the view to it, in its worker; again clears. With many workers, one bar
 * per worker (its mean per step); a click selects the worker. With more steps than bars of
 * `MIN_BAR_PX` fit, each bar is a bin of consecutive steps drawn as its costliest step
 * (`binSteps`): a click selects that step, and "Go to step" any step. The DOM stays a few
 * hundred bars whatever the number of steps.
 * @param {any[]} steps
 * @param {any[]} traces the summary's traces (path -> worker, span)
 * @param {{sel: {run: string, worker: string | null, span: string | null}, state: any}} view
 *   the selection and view state, read when drawn, clicked and updated
 * @param {any} app
 * @param {number} viewWidth
 * @returns {{el: HTMLElement, update: () => void} | null}
 */
function stepChart(steps, traces, view, app, viewWidth) {
  if (!steps.length) return null;
  const idleOn = onNpu(traces) ? "NPU" : "GPU"; // what idled after the syncs
  // Workers in rank order (rank2 before rank10), as the Worker picker lists them; a
  // worker's spans keep their order (the sort is stable).
  let groups = groupSteps(steps, traces).sort((a, b) => compareRunNames(a.worker ?? a.label, b.worker ?? b.label));
  let perWorker = false;
  /** @type {any[]} */
  let shown = groups.flatMap((g) => g.steps);
  if (groups.length > MAX_STEP_GROUPS) {
    perWorker = true;
    shown = groups.map((g, i) => {
      const n = g.steps.length || 1;
      const sum = (/** @type {string} */ k) => g.steps.reduce((a, x) => a + (x[k] || 0), 0);
      return { step: i, sync_count: sum("sync_count") / n, host_wait_us: sum("host_wait_us") / n, gpu_idle_us: sum("gpu_idle_us") / n, step_time_us: sum("step_time_us") / n };
    });
  }
  const grouped = !perWorker && groups.length > 1;
  const unmarked = unmarkedPaths(traces);
  // Whether bar `i` is a whole trace without step markers: no step to filter to.
  const wholeTrace = (/** @type {number} */ i) => !perWorker && !!shown[i] && unmarked.has(shown[i].trace ?? shown[i].peak?.trace);
  // Laid out at the real width so text stays 10 px in a narrow VS Code panel too.
  const width = Math.round(Math.max(300, Math.min(1600, viewWidth || 960)));
  const height = (width < 600 ? 140 : 170) + (grouped ? 14 : 0);
  const pad = { l: 56, r: 30, t: 10, b: grouped ? 38 : 24 };
  // More steps than bars fit: each bar a bin of consecutive steps of one worker.
  const perBar = perWorker ? 1 : stepsPerBar(shown.length, width - pad.l - pad.r, grouped ? groups.length : 1);
  const binned = perBar > 1;
  /** @type {any[] | null} */
  const bins = binned ? groups.map((g) => binSteps(g.steps, perBar)) : null;
  if (bins) shown = bins.flat();
  const sizes = bins ? bins.map((b) => b.length) : groups.map((g) => g.steps.length);
  const L = layoutStepChart(shown, { width, height, pad, groups: grouped ? sizes : undefined });
  const groupOf = (/** @type {number} */ i) => (perWorker ? groups[i] : groups[L.spans.findIndex((sp) => i >= sp.first && i < sp.first + sp.size)] ?? groups[0]);
  /** Whether bar `i` is (or holds) the selected step (of the selected worker and span when grouped). */
  const isSelected = (/** @type {number} */ i) => {
    if (perWorker) return false;
    const { sel, state } = view;
    const g = groupOf(i);
    const inSel = !grouped || (sel.worker === g.worker && (sel.span ?? null) === (g.span ?? null));
    if (!inSel || state.step === null) return false;
    return binned ? shown[i].steps.includes(state.step) : state.step === shown[i].step;
  };
  /** @param {number} i */
  const pick = (i) => {
    const g = groupOf(i);
    // A pick may draw the chart again (for one worker, in other bins): the focus goes to its
    // Tab stop, the bar holding the selected step.
    app.pendingFocus = CHART_TAB_STOP;
    if (perWorker) {
      app.setState({ worker: g.worker, span: null, step: null, site: null, sync: null });
      return;
    }
    // Step numbers are per worker: filtering to a step of one worker selects that worker.
    const where = grouped ? { worker: g.worker, span: g.span } : {};
    if (wholeTrace(i)) {
      // The whole trace, not a step: its worker (where there are several), no step filter.
      if (grouped) app.setState({ ...where, step: null, sync: null });
      return;
    }
    // Picking the selected step (or its bin) again clears the filter; a bin picks its
    // costliest step.
    app.setState({ ...where, step: isSelected(i) ? null : shown[i].step, sync: null });
  };
  const empty = L.maxUs === 0;
  // Worker names under the bars: every k-th where they would collide.
  const workerAxis = thinAxisLabels(L.bars[0]?.band.w ?? 0, perWorker ? groups.map((g) => g.label) : []);
  const label = (/** @type {number} */ i) => (perWorker ? groups[i].label : wholeTrace(i) ? "all" : String(binned ? shown[i].first : shown[i].step));
  // What a bar says: a step's figures; a bin's costliest step's, and its means per step.
  const figures = (/** @type {number} */ i, /** @type {boolean} */ long, selected = false) => {
    const x = shown[i];
    const own = `${formatCount(x.sync_count)} syncs, ${long ? "host wait" : "wait"} ${formatUs(x.host_wait_us)}, ${long ? `${idleOn} idle` : "idle"} ${formatUs(x.gpu_idle_us)}`;
    if (!binned || wholeTrace(i)) return long ? own : `${own}, ${wholeTrace(i) ? "trace" : "step"} ${formatUs((binned ? x.peak : x).step_time_us)}`;
    const p = x.peak;
    return (
      `steps ${x.first}\u2013${x.last} (${formatCount(x.size)}), bar = costliest step ${p.step}: ${formatCount(p.sync_count)} syncs, host wait ${formatUs(p.host_wait_us)}, ${idleOn} idle ${formatUs(p.gpu_idle_us)}` +
      `; mean per step: host wait ${formatUs(x.mean.host_wait_us)}, ${idleOn} idle ${formatUs(x.mean.gpu_idle_us)}` +
      // On the bin holding the selected step, Enter (or a click) clears the step filter.
      (selected ? `; ${long ? "Enter" : "click"} clears the step filter` : long ? `; Enter selects step ${p.step}` : `; click selects step ${p.step}`)
    );
  };
  const selMark = s("rect", { class: "sel-mark", "data-testid": "selected-mark", x: 0, y: L.baseY + 1, width: 0, height: 4, display: "none" });
  const barEls = L.bars.map((b, i) => {
    const g = groupOf(i);
    const where = grouped || perWorker ? `${g.label}, ` : "";
    const what = perWorker ? "per step: " : wholeTrace(i) ? "the whole trace (no ProfilerStep markers: profile with a schedule and call prof.step() to see its steps): " : binned ? "" : `step ${b.step}: `;
    return s(
      "g",
      {
        class: "step",
        tabindex: "-1",
        role: "button",
        "data-step": perWorker ? null : b.step,
        "data-whole-trace": wholeTrace(i) ? "true" : null,
        "data-first": binned ? shown[i].first : null,
        "data-last": binned ? shown[i].last : null,
        "data-worker": grouped || perWorker ? g.worker : null,
        "data-focus-key": perWorker ? `worker-${g.worker}` : binned ? `bin-${g.worker ?? ""}-${g.span ?? ""}-${shown[i].first}` : `step-${g.worker ?? ""}-${b.step}`,
        "aria-pressed": "false",
        "aria-label": `${where}${what}${figures(i, true)}`,
        onclick: () => pick(i),
      },
      s("rect", { class: "band", x: b.band.x, y: L.pad.t, width: b.band.w, height: L.plotH }),
      s("rect", { class: "bar-wait", x: b.x, y: b.waitY, width: b.w, height: b.waitH }),
      s("rect", { class: "bar-idle", x: b.x, y: b.idleY, width: b.w, height: b.idleH }),
      s("title", null, `${where}${perWorker ? "mean per step: " : what}${figures(i, false)}`),
      (perWorker ? i % workerAxis.every === 0 : hasAxisLabel(i, L.spans, L.labelEvery)) ? s("text", { x: b.band.x + b.band.w / 2, y: L.baseY + 14, "text-anchor": "middle" }, perWorker ? truncateText(label(i), workerAxis.chars) : label(i)) : null,
    );
  });
  // One Tab stop for the whole chart (the selected step's bar, else the first), arrow keys
  // between bars, as in the sites table.
  const onKey = rovingKeys("g.step", nextBarIndex, pick);
  const svg = s(
    "svg",
    {
      viewBox: `0 0 ${width} ${height}`,
      role: "group",
      "aria-label": `${perWorker ? `Host wait, ${idleOn} idle and syncs per step, per worker` : binned ? `Host wait, ${idleOn} idle and sync count per step, ${perBar} steps per bar, each bar its costliest step` : `Host wait, ${idleOn} idle and sync count per step`}; arrow keys move between bars, Enter selects`,
      onkeydown: onKey,
    },
    s("line", { class: "axis", x1: L.pad.l, x2: L.pad.l + L.plotW, y1: L.baseY, y2: L.baseY }),
    // An empty chart has no scale to label: say what it shows instead of a "0 µs" top.
    empty ? s("text", { class: "empty", x: L.pad.l + L.plotW / 2, y: L.pad.t + L.plotH / 2, "text-anchor": "middle" }, `no host wait or ${idleOn} idle after a sync in these steps`) : s("text", { x: L.pad.l - 4, y: L.pad.t + 8, "text-anchor": "end" }, formatUs(L.maxUs)),
    empty ? null : s("text", { x: L.pad.l - 4, y: L.baseY, "text-anchor": "end" }, "0"),
    L.maxCount ? s("text", { x: L.pad.l + L.plotW + 4, y: L.pad.t + 8 }, `${formatCount(L.maxCount)}`) : null,
    barEls,
    // The selected bar's mark under the axis, in the accent colour (the band alone is too
    // faint to find among hundreds of bars): moved by `update`.
    selMark,
    grouped
      ? L.spans.map((sp, gi) =>
          s(
            "g",
            { class: "group", "data-group": groups[gi].label },
            s("line", { class: "group-rule", x1: sp.x + 2, x2: sp.x + sp.w - 2, y1: L.baseY + 20, y2: L.baseY + 20 }),
            s("text", { class: "group-label", x: sp.x + sp.w / 2, y: L.baseY + 32, "text-anchor": "middle" }, groupLabelText(groups[gi].label, Math.max(3, Math.floor(sp.w / 6)))),
            s("title", null, groups[gi].label),
          ),
        )
      : null,
    (perWorker ? [L.line] : L.lines).map((points) => s("polyline", { class: "count-line", points })),
    L.points.length <= 80 ? L.points.map((p) => s("circle", { class: "count-dot", cx: p.x, cy: p.y, r: 2.5 })) : null,
  );
  const total = groups.reduce((a, g) => a + g.steps.length, 0);
  const goto = binned ? goToStep(groups, view, app) : null;
  const el = h(
    "section",
    { class: "sa-chart", "aria-label": "Per-step chart", "data-testid": "step-chart", "data-groups": String(perWorker ? 0 : groups.length), "data-steps-per-bar": String(perBar) },
    h(
      "div",
      { class: "sa-section-title" },
      perWorker ? `Per worker (${formatCount(groups.length)})` : grouped ? `Per step, per worker (${formatCount(groups.length)})` : "Per step",
      binned ? h("span", { class: "sa-chip", "data-testid": "steps-per-bar", title: `More steps than the chart has room for: each bar holds consecutive steps and is drawn as the costliest of them (most host wait + ${idleOn} idle)` }, `${formatCount(total)} steps, ${formatCount(perBar)} per bar`) : null,
      h(
        "span",
        { class: "sa-legend" },
        h("span", null, h("i", { style: { background: "var(--wait)" } }), "host wait"),
        h("span", null, h("i", { style: { background: "var(--idle)" } }), `${idleOn} idle after sync`),
        h("span", null, h("i", { style: { background: "var(--line)", height: "2px" } }), binned ? "most syncs in a step (right axis)" : "sync count (right axis)"),
        h(
          "span",
          null,
          perWorker
            ? "mean per step; click a worker to see its steps"
            : binned
              ? "each bar: its costliest step; click selects that step"
              : grouped
                ? "each worker counts its own steps; click a step to filter"
                : "click a step to filter",
        ),
      ),
      goto ? goto.el : null,
    ),
    svg,
  );
  /** Mark the selected bar and make it the Tab stop (else keep the Tab stop where it is). */
  let shownStep = view.state.step;
  const update = () => {
    // Another step selected (a bar, the chip's ×, a row): Go to step's note and number are stale.
    if (goto && view.state.step !== shownStep) goto.reset(view.state.step);
    shownStep = view.state.step;
    let anchor = -1;
    barEls.forEach((g, i) => {
      const selected = isSelected(i);
      if (selected && anchor < 0) anchor = i;
      const was = g.getAttribute("aria-pressed") === "true";
      g.setAttribute("aria-pressed", String(selected));
      g.firstElementChild?.setAttribute("class", `band${selected ? " selected" : ""}`);
      // A bin's label says what Enter does: select its step, or clear the filter.
      if (binned && was !== selected) {
        const where = grouped ? `${groupOf(i).label}, ` : "";
        g.setAttribute("aria-label", `${where}${figures(i, true, selected)}`);
        const title = g.querySelector("title");
        if (title) title.textContent = `${where}${figures(i, false, selected)}`;
      }
    });
    const mark = L.bars[anchor];
    if (mark) {
      const w = Math.max(mark.band.w, 6);
      selMark.setAttribute("x", String(mark.band.x + mark.band.w / 2 - w / 2));
      selMark.setAttribute("width", String(w));
      selMark.removeAttribute("display");
    } else selMark.setAttribute("display", "none");
    if (anchor < 0) anchor = Math.max(0, barEls.findIndex((g) => g.getAttribute("tabindex") === "0"));
    barEls.forEach((g, i) => g.setAttribute("tabindex", i === anchor ? "0" : "-1"));
  };
  update();
  return { el, update };
}

/**
 * "Go to step N": on a chart of bins, the way to any one step from the keyboard or by
 * number. The step is looked for in the selected worker first (each worker counts its own).
 * @param {{worker: string | null, span: string | null, label: string, steps: any[]}[]} groups
 * @param {{sel: any, state: any}} view
 * @param {any} app
 * @returns {{el: HTMLElement, reset: (step: number | null) => void}}
 */
function goToStep(groups, view, app) {
  const all = groups.flatMap((g) => g.steps.map((/** @type {any} */ x) => x.step));
  const lo = all.reduce((a, b) => Math.min(a, b), Infinity);
  const hi = all.reduce((a, b) => Math.max(a, b), -Infinity);
  const note = h("span", { class: "sa-goto-note", role: "status", "data-testid": "goto-note" });
  const input = /** @type {HTMLInputElement} */ (
    h("input", { id: "sa-goto", type: "number", inputmode: "numeric", min: lo, max: hi, step: 1, placeholder: `${lo}\u2013${hi}`, "data-focus-key": "goto-step", "data-testid": "goto-step" })
  );
  const el = h(
    "form",
    {
      class: "sa-goto",
      "data-testid": "goto",
      // Our own message for a step that is not there (the browser's bubble says only the range).
      novalidate: true,
      onsubmit: (/** @type {Event} */ e) => {
        e.preventDefault();
        const n = Number(input.value);
        const gi = input.value.trim() !== "" && Number.isInteger(n) ? groupWithStep(groups, n, view.sel) : -1;
        if (gi < 0) {
          note.textContent = input.value.trim() === "" ? `Type a step number (${lo}\u2013${hi})` : `No step ${input.value.trim()} in these traces`;
          return;
        }
        note.textContent = "";
        const g = groups[gi];
        const where = groups.length > 1 ? { worker: g.worker, span: g.span } : {};
        app.setState({ ...where, step: n, sync: null });
      },
    },
    h("label", { for: "sa-goto" }, "Go to step"),
    input,
    h("button", { type: "submit", "data-focus-key": "goto-go" }, "Go"),
    note,
  );
  /** The selected step changed: no stale note, nor a number that is not the step selected. */
  const reset = (/** @type {number | null} */ step) => {
    note.textContent = "";
    if (input.value !== String(step)) input.value = "";
  };
  return { el, reset };
}

/** @param {string} text @param {number} n */
function truncateText(text, n) {
  return text.length > n ? text.slice(0, Math.max(1, n - 1)) + "\u2026" : text;
}

/**
 * A step chart group's label in `n` characters: a worker's span (`hostA · 2025-11-26
 * 00:54:11`) cut in its middle, keeping the end that tells the spans apart (cut at the
 * end, two spans of a worker read the same at 600 px); another label cut at its end.
 * @param {string} label
 * @param {number} n
 */
export function groupLabelText(label, n) {
  const at = label.indexOf(" \u00b7 ");
  if (label.length <= n || at < 0) return truncateText(label, n);
  const tail = n - 1 - Math.min(at, Math.max(1, Math.floor(n / 3)));
  if (tail < 3) return truncateText(label, n);
  return label.slice(0, n - 1 - tail) + "\u2026" + label.slice(label.length - tail);
}

/**
 * @param {any} state
 * @param {any} app
 * @param {any[]} items
 */
function filters(state, app, items) {
  const kinds = [...new Set(items.map((x) => x.kind))].sort((a, b) => kindRank(a) - kindRank(b));
  if (state.kind && !kinds.includes(state.kind)) kinds.push(state.kind);
  return h(
    "div",
    { class: "sa-filters", role: "search" },
    h("label", { class: "visually-hidden", for: "sa-kind" }, "Kind"),
    h(
      "select",
      {
        id: "sa-kind",
        "data-focus-key": "kind",
        onchange: (/** @type {Event} */ e) => app.setState({ kind: /** @type {HTMLSelectElement} */ (e.target).value }),
      },
      h("option", { value: "" }, "All kinds"),
      kinds.map((k) => h("option", { value: k, selected: k === state.kind }, kindLabel(k))),
    ),
    h("label", { class: "visually-hidden", for: "sa-q" }, "Filter"),
    h("input", {
      id: "sa-q",
      type: "search",
      placeholder: "Filter: file, function, operator…",
      value: state.q,
      "data-focus-key": "q",
      oninput: (/** @type {Event} */ e) => app.setState({ q: /** @type {HTMLInputElement} */ (e.target).value }),
    }),
  );
}

/**
 * Which figures of the table are the selected step's and which the whole run's.
 * @param {{step: number, inStep: boolean}} info
 */
function stepNote(info) {
  // Named by the marks under the headers, not by column: with the detail open, or on a
  // narrow screen, some of the step's columns are hidden and a note naming them misled.
  const split = `Figures under a “step ${info.step}” header are this step's; under “whole run”, every profiled step's.`;
  return h(
    "p",
    { class: "sa-note sa-step-note", "data-testid": "step-note", "data-in-step": String(info.inStep) },
    h("b", null, `Sites that synced in step ${info.step}. `),
    info.inStep ? split : "Their figures are the whole run's.",
  );
}

/**
 * The line under a column header that says whose figure it is: with a step selected, the
 * step's or the whole run's; without, "whole run" under the totals.
 * @param {string} key
 * @param {{step: number, inStep: boolean} | null} stepInfo
 */
function columnScope(key, stepInfo) {
  // Without a step the count, the wait and the idle are totals beside per-step columns
  // (a 43 ms "Host wait" next to an 8.9 ms per-step card read as a contradiction).
  if (!stepInfo) return STEP_FIGURES.includes(key) ? h("span", { class: "sa-th-scope" }, "whole run") : null;
  if (["file", "func", "ops", "kind"].includes(key)) return null;
  const own = stepInfo.inStep && STEP_FIGURES.includes(key);
  return h("span", { class: `sa-th-scope${own ? " step" : ""}` }, own ? `step ${stepInfo.step}` : "whole run");
}

/** Cost columns, left out for latent findings (they cost nothing where they were seen). */
const COST_KEYS = new Set(["predicted_saving_us", "host_wait_us", "gpu_idle_us", "share_of_step", UNPROFILED_SORT]);

const UNPROFILED_CELL_TITLE = "What fixing this site alone saves per step without the profiler, at the step time given above (– where the replay gives it no figure)";

/**
 * Whether an `unprofiled` answer's sites carry a figure (none when the traces were not
 * fitted to the step time: the note above says why, and a column of dashes would not).
 * @param {Record<string, number | null> | null | undefined} bySite
 */
function hasUnprofiledFigures(bySite) {
  return !!bySite && Object.values(bySite).some((us) => typeof us === "number");
}

const COLUMNS = [
  { key: "file", label: "Location", cls: "col-loc", title: "The line of your code that synced (* where the exact call line is not known), or the operator where the trace has no Python stack" },
  { key: "func", label: "Function", cls: "col-func", title: "The function around that line" },
  { key: "ops", label: "Operators", cls: "col-ops", title: "The operators from your call down to the one that waited" },
  { key: "kind", label: "Kind", cls: "col-kind", title: "What made the host wait" },
  { key: "count", label: "Count", cls: "col-count num", title: "Syncs at this site over the profiled steps" },
  { key: "per_step", label: "Per step", cls: "col-perstep num", title: "Syncs at this site per profiled step" },
  { key: "predicted_saving_us", label: "Saves/step", cls: "col-save num", title: "Step time saved per step by fixing this site alone. Sites that wait for the same GPU work save more fixed together: the saving with every sync removed is on the step-time card, and what each site saves once the others are fixed in its detail and under its figure" },
  { key: UNPROFILED_SORT, label: "Unprofiled", cls: "col-unprof num", title: "Step time saved per step by fixing this site alone in a run without the profiler: the replay fitted to the step time given above", unprofiled: true },
  { key: "host_wait_us", label: "Host wait", cls: "col-wait num", title: "Time the host waited in this site's syncs, over the profiled steps (the card gives it per step)" },
  { key: "gpu_idle_us", label: "GPU idle", cls: "col-idle num", title: "Time the GPU idled after this site's syncs, over the profiled steps" },
  { key: "share_of_step", label: "Share", cls: "col-share num", title: "Host wait + GPU idle of this site over the profiled steps' time: what its syncs cost, not what fixing them saves (the saving column)" },
];

/**
 * @param {any[]} sites
 * @param {any} state
 * @param {any} app
 * @param {boolean} latent
 * @param {{step: number, inStep: boolean} | null} stepInfo with a step selected: its
 *   number, and whether the count, wait and idle are the step's (else the whole run's)
 * @param {"figures" | "pending" | null} unprofiledColumn the column of savings without the
 *   profiler: shown with the answer's figures, or while the answer it is sorted by comes
 */
function sitesTable(sites, state, app, latent, stepInfo, unprofiledColumn, idleOn = "GPU") {
  if (!sites.length) {
    return h("div", { class: "sa-empty", "data-testid": "no-sites" }, state.q || state.kind || state.step !== null ? "No site matches the filters." : latent ? "No latent sync sites." : "No sync sites.");
  }
  const select = (/** @type {any} */ site) => {
    app.revealDetail = "row"; // below the table, or its top at the window's foot: into view
    app.setState({ site: site.key, sync: null });
  };
  const selectedIndex = sites.findIndex((x) => x.key === state.site);
  const rows = sites.map((site, i) =>
    h(
      "tr",
      {
        tabindex: i === (selectedIndex < 0 ? 0 : selectedIndex) ? "0" : "-1",
        "aria-current": site.key === state.site ? "true" : null,
        "data-site": site.key,
        "data-focus-key": `site-${site.key}`,
        onclick: () => select(site),
      },
      h(
        "td",
        { class: "loc col-loc", title: siteWhere(site, shortPath).title },
        site.file
          ? h("span", { class: "mono where", "data-inexact": siteWhere(site).inexact ? "true" : null }, siteWhere(site, shortPath).text)
          : h("span", { class: "mono where nosrc", title: "no Python stack: profile with with_stack=True" }, siteFallbackLabel(site)),
        // Under the site, as the CLI: an inexact line's candidates, a job's late peer.
        siteWhere(site).notes.map((n) => h("span", { class: "sa-site-note", "data-testid": `row-${n.id}` }, n.text)),
        // The one-line fix, so the table says what to do without opening the detail.
        site.advice?.title ? h("span", { class: "fix", "data-testid": "row-fix" }, inlineCode(site.advice.title).map((part) => (part.code ? h("code", null, part.text) : part.text))) : null,
      ),
      h("td", { class: "col-func mono" }, site.func || "–"),
      h(
        "td",
        { class: "ops col-ops mono" },
        // A runtime call made with no operator around it (cudaDeviceSynchronize from
        // torch.cuda.synchronize()): said, as the CLI does, not left blank.
        (site.ops || []).length ? null : h("span", { class: "muted" }, "(no operator)"),
        // A long name breaks after its "::" (aten::_index_put_impl_), never mid-word.
        (site.ops || []).flatMap((/** @type {string} */ op, /** @type {number} */ i) => [
          i ? " → " : null,
          h("span", { class: "op" }, op.split("::").flatMap((part, k) => (k ? ["::", h("wbr"), part] : [part]))),
        ]),
      ),
      h("td", { class: "col-kind" }, h("span", { class: `sa-badge k-${site.kind}${latent ? " latent" : ""}`, title: kindDescription(site.kind) }, kindLabel(site.kind))),
      h("td", { class: "num col-count", title: site.whole ? `whole run: ${formatCount(site.whole.count)}` : null }, formatCount(site.count)),
      h("td", { class: "num col-perstep" }, formatCount(site.per_step)),
      latent
        ? null
        : h(
            "td",
            { class: "num col-save", title: savingTitle(site, idleOn), "data-method": site.saving_method || "bound" },
            savingText(site),
            // Sites waiting for the same GPU work save little alone and much together (the
            // card's saving): said in the row, as the terminal does, not only in the detail.
            site.fix_with_note && typeof site.predicted_saving_with_others_per_step_us === "number"
              ? h("div", { class: "sa-muted sa-with-others", "data-testid": "row-with-others", title: withMicro(site.fix_with_note) }, `after the others: ${formatUs(site.predicted_saving_with_others_per_step_us)}`)
              : null,
          ),
      // Given the step time without the profiler: the site's saving there too.
      unprofiledColumn
        ? h(
            "td",
            { class: "num col-unprof", "data-testid": "row-unprofiled", title: unprofiledColumn === "pending" ? "replaying the trace for the step time given above" : UNPROFILED_CELL_TITLE },
            typeof site.unprofiled_predicted_saving_per_step_us === "number" ? `~${formatUs(site.unprofiled_predicted_saving_per_step_us)}` : unprofiledColumn === "pending" ? "…" : "–",
          )
        : null,
      latent ? null : h("td", { class: "num col-wait", title: site.whole ? `whole run: ${formatUs(site.whole.host_wait_us)}` : null }, formatUs(site.host_wait_us)),
      latent ? null : h("td", { class: "num col-idle", title: site.gpu_idle_measured === false ? IDLE_UNREAD : site.whole ? `whole run: ${formatUs(site.whole.gpu_idle_us)}` : null }, idleText(site)),
      latent ? null : h("td", { class: "num col-share" }, formatPct(site.share_of_step)),
    ),
  );
  // One Tab stop for the table (the selected site's row, else the first), arrow keys between
  // rows, Enter or Space opens a row's detail, Escape closes it.
  const rowKeys = rovingKeys("tr", nextRowIndex, (i) => select(sites[i]));
  const tbody = h("tbody", {
    onkeydown: (/** @type {KeyboardEvent} */ e) => {
      if (e.key === "Escape" && state.site) {
        app.closeDetail();
        return;
      }
      rowKeys(e);
    },
  }, rows);
  const columns = COLUMNS.filter((c) => !(latent && COST_KEYS.has(c.key)) && (unprofiledColumn || !c.unprofiled));
  const head = h(
    "tr",
    null,
    columns.map((c) =>
      h(
        "th",
        {
          class: c.cls,
          scope: "col",
          "aria-sort": state.sort === c.key ? (state.order === "asc" ? "ascending" : "descending") : "none",
        },
        h(
          "button",
          {
            "data-sort": c.key,
            "data-focus-key": `sort-${c.key}`,
            title: c.title.replace(/\bGPU\b/g, idleOn),
            onclick: () => app.setState(nextSort(state, c.key)),
          },
          c.label.replace(/\bGPU\b/g, idleOn),
        ),
        columnScope(c.key, stepInfo),
      ),
    ),
  );
  return h(
    "div",
    { class: "sa-table-wrap" },
    h(
      "table",
      { class: "sa-table", "data-testid": "sites", "aria-label": "Sync sites; arrow keys move, Enter opens the detail" },
      h("thead", null, head),
      tbody,
    ),
  );
}
