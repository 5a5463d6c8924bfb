// @ts-check
/**
 * Detail panel of a site and one of its syncs: source with the line highlighted, operator
 * chain and annotations, the stack (user frames first, library frames folded), a timeline
 * of host and device around the sync, and the advice with before/after code.
 */
import { ApiError, getJson } from "./api.js";
import { h, replace, rovingKeys, s } from "./dom.js";
import { kindDescription, kindLabel, syncSortOrder } from "./catalogue.js";
import { cellPlace, countNames, formatBytes, formatCount, formatPct, formatUs, libraryCodeText, profilerSpanName, savingText, siteFallbackLabel, spanLabels, spreadText, withMicro } from "./format.js";
import { tokenizePython } from "./highlight.js";
import { barLabel, LABEL_CHAR_PX, layoutTimeline, placeBandLabels, scrollToShow } from "./layout.js";
import { inexactLineNote, SOURCE_ROOT_HINT } from "./line_note.js";
import { inlineCode } from "./markup.js";
import { apiUrl } from "./query.js";
import { selectionWhere } from "./repairs.js";
import { frameLines, frameLocation, isOpenable, splitStack, stackToShow, vscodeMessage } from "./stack.js";
import { nextRowIndex, siteWhere, withUnprofiled } from "./sites.js";
import { OCC_SORTS, occPagePatch, occSortWords, occurrencePages, occurrencesParams, validOccSort } from "./state.js";
import { traceLocator, traceSelection } from "./trace_link.js";

/** Lines of source shown either side of the sync's line. */
const SOURCE_CONTEXT = 5;

/**
 * @param {any} ctx render context (app, sel, state, isCurrent)
 * @param {HTMLElement} slot
 */
export async function renderDetail(ctx, slot) {
  const { sel, state, app } = ctx;
  replace(slot, h("div", { class: "sa-detail" }, h("span", { class: "sa-spinner" }), "Loading detail…"));
  try {
    // The hotspots view decided whether this selection shows latent findings.
    const latent = !!ctx.latent;
    // The site's occurrences a page at a time (the page in the view state, `occ`), in the
    // order it names (`osort`: as they ran, or the costliest first).
    const fetchPage = (/** @type {number} */ offset, osort = state.osort) =>
      getJson("syncs", { ...sel, ...occurrencesParams(state, { osort, latent, offset, orderOf: syncSortOrder }) });
    let syncs = await fetchPage(state.occ || 0);
    // Past the end (the list is shorter now) or inside a page (a hand-edited link): the page.
    const at = occurrencePages(syncs.total, state.occ || 0).offset;
    if (at !== (state.occ || 0)) {
      syncs = await fetchPage(at);
      if (!ctx.isCurrent()) return;
      app.noteState({ occ: at });
    }
    if (!ctx.isCurrent()) return;
    const items = syncs.items || [];
    let syncId = items.some((/** @type {any} */ x) => x.id === state.sync) ? state.sync : null;
    /** @type {any} */
    let detail = null;
    let missing = false;
    if (syncId === null && state.sync) {
      // The selected sync is on another page than the one listed: still this site's (and
      // step's) sync, so still the one shown.
      let absent = false;
      const other = await getJson("sync", { ...sel, id: state.sync }).catch((e) => {
        absent = e instanceof ApiError && e.status === 404;
        return null;
      });
      const own = other?.sync && other.sync.site_key === state.site && (state.step === null || other.sync.step === state.step);
      if (own) {
        syncId = state.sync;
        detail = other;
      }
      // Another site's, or not in the run once it is all read (a trace still loading may
      // hold it; a request that failed otherwise says nothing).
      missing = !own && (!!other?.sync || absent) && !app.currentRun()?.loading;
    }
    if (!ctx.isCurrent()) return;
    if (missing) {
      // A link from before the run was profiled again: said, and the URL names the
      // occurrence shown instead.
      const where = selectionWhere(sel, app.workerSpans());
      app.dropMissing(`Sync "${state.sync}"`, where, { sync: null }, "showing its site's first occurrence instead");
    }
    syncId = syncId ?? items[0]?.id ?? null;
    if (!detail && syncId) detail = await getJson("sync", { ...sel, id: syncId });
    if (!ctx.isCurrent()) return;
    const site = detail?.site || null;
    const sync = detail?.sync || null;
    // Which worker's trace the sync is in (the summary is cached: the hotspots asked for it).
    const traces = sync ? (await getJson("summary", sel).catch(() => ({}))).traces : null;
    if (!ctx.isCurrent()) return;
    const panel = h(
      "div",
      { class: "sa-detail", "data-testid": "detail" },
      h(
        "button",
        { class: "close", "aria-label": "Close detail", "data-focus-key": "close-detail", onclick: () => app.closeDetail() },
        "×",
      ),
      header(site, sync, app),
      site ? siteStats(withUnprofiled([site], ctx.unprofiledSites)[0], state.step, ctx.idleOn || "GPU") : null,
      // A site that saves much less alone than with another fixed too: which, and both.
      site?.fix_with_note && !site.latent ? h("p", { class: "sa-note sa-fix-with", "data-testid": "detail-fix-with" }, withMicro(site.fix_with_note)) : null,
      h("h3", null, "Source"),
      h("div", { class: "sa-source-slot" }, h("span", { class: "sa-spinner" })),
      sync ? chainSection(sync, ctx.idleOn || "GPU") : null,
      sync ? stackSection(sync, app) : null,
      // The sync's own trace says its device (a run may hold NPU and CPU-only traces).
      detail?.context ? timelineSection(detail.context, sync, slot.clientWidth - 26, traceOf(sync, traces)?.device === "npu" ? "NPU" : ctx.idleOn || "GPU") : null,
      site?.advice ? adviceSection(site.advice, site) : null,
      sync && !sync.latent ? viewersSection(sync, detail?.context, sel, traceSelection(sync.trace, traces), app, traceOf(sync, traces)?.profiler_tab !== false) : null,
      occurrences(syncs, fetchPage, syncId, app, ctx, latent ? null : validOccSort(state.osort)),
    );
    replace(slot, panel);
    revealSelectedOccurrence(panel);
    const sourceSlot = /** @type {HTMLElement} */ (panel.querySelector(".sa-source-slot"));
    const lineNoteSlot = /** @type {HTMLElement | null} */ (panel.querySelector(".sa-line-note-slot"));
    // The note on an inexact line depends on whether the file could be read: fill it in
    // once the source request has answered.
    renderSource(sourceSlot, site, sync, ctx, !!lineNoteSlot).then((readable) => {
      if (lineNoteSlot && readable !== null && ctx.isCurrent()) replace(lineNoteSlot, lineNote(site, sync, readable));
    });
  } catch (e) {
    if (!ctx.isCurrent()) return;
    replace(
      slot,
      h(
        "div",
        { class: "sa-detail sa-banner error", role: "alert" },
        h("h3", null, "Could not load this site"),
        h("p", null, e instanceof Error ? e.message : String(e)),
      ),
    );
  }
}

/**
 * @param {any} site
 * @param {any} sync
 * @param {any} app
 */
function header(site, sync, app) {
  const file = site?.file ?? sync?.source?.file ?? null;
  const line = site?.line ?? sync?.source?.line ?? null;
  const func = site?.func ?? sync?.source?.func ?? null;
  const kind = site?.kind ?? sync?.kind;
  const latent = !!(site?.latent || sync?.latent);
  const defLine = site?.def_line ?? sync?.source?.def_line ?? null;
  const cell = site?.cell ?? sync?.source?.cell ?? null;
  return h(
    "div",
    null,
    h("span", { class: `sa-badge k-${kind}${latent ? " latent" : ""}`, title: kindDescription(kind) }, kindLabel(kind), latent ? " (latent)" : ""),
    h(
      "h2",
      null,
      file
        ? // A Jupyter cell's code is asked for by its recorded name: the server reads it from
          // the notebook (resolved_path), which is JSON, not the cell's lines.
          frameButton({ file: (!cell && sync?.source?.resolved_path) || file, line, func: func || "", user: true, cell }, app, `${cellPlace(cell) ?? file}:${line ?? "?"}`)
        : `${siteFallbackLabel(site || { ops: sync?.op_chain, apis: sync?.apis })} (no source line)`,
    ),
    func
      ? h(
          "div",
          { class: "mono sa-where", "data-testid": "where" },
          `in ${func}()`,
          // The header's line is the call that synced; the stack below shows def lines.
          defLine !== null && defLine !== line ? h("span", { class: "sa-muted" }, ` \u00b7 defined at line ${defLine}`) : null,
        )
      : null,
    site && site.line_exact === false && file ? h("div", { class: "sa-line-note-slot" }) : null,
    // As the CLI says under a site: an inexact line's candidates, a job's late peer.
    site ? siteWhere(site).notes.map((n) => h("div", { class: "sa-muted sa-site-note", "data-testid": `detail-${n.id}` }, n.text)) : null,
  );
}

/**
 * The note on a site whose line is not the exact call line (see line_note.js).
 * @param {any} site
 * @param {any} sync
 * @param {boolean} readable whether the plugin could read the source file
 */
function lineNote(site, sync, readable) {
  const note = inexactLineNote({
    line: site.line,
    defLine: site.def_line ?? sync?.source?.def_line ?? null,
    func: site.func ?? sync?.source?.func ?? null,
    readable,
    recordedLine: site.recorded_line ?? sync?.source?.recorded_line ?? null,
    file: site.file ?? sync?.source?.file ?? null,
  });
  return h(
    "div",
    { class: "sa-note", "data-testid": "line-note" },
    h("p", null, note.text),
    note.hint ? h("p", null, note.hint) : null,
  );
}

/**
 * The site's figures: always the whole run's (with a step selected, the table shows the
 * step's; these say so).
 * @param {any} site
 * @param {number | null} step
 * @param {string} idleOn what idled after the syncs: "GPU", or "NPU" for torch_npu's traces
 */
function siteStats(site, step, idleOn) {
  const latent = !!site.latent;
  /** @param {string} label @param {string} value */
  const stat = (label, value) => h("span", null, `${label} `, h("b", null, value));
  return h(
    "div",
    { class: "sa-stats", "data-testid": "site-stats" },
    step !== null && step !== undefined ? h("span", { class: "sa-muted" }, "whole run:") : null,
    stat("count", formatCount(site.count)),
    stat("per step", formatCount(site.per_step)),
    spreadText(site) ? h("span", { "data-testid": "site-spread" }, spreadText(site)) : null,
    latent ? null : stat(site.gpu_idle_measured === false ? "saves per step" : site.saving_method === "replay" ? "saves per step" : "saves per step (bound)", site.gpu_idle_measured === false ? "not predicted" : savingText(site)),
    // What fixing it saves per step once every other site is fixed too (the replay's; null: not replayed so).
    latent || site.predicted_saving_with_others_per_step_us === null || site.predicted_saving_with_others_per_step_us === undefined
      ? null
      : stat("saves per step once the others are fixed", formatUs(site.predicted_saving_with_others_per_step_us)),
    latent || typeof site.unprofiled_predicted_saving_per_step_us !== "number"
      ? null
      : stat("saves per step without the profiler", `~${formatUs(site.unprofiled_predicted_saving_per_step_us)}`),
    latent ? null : stat("host wait", formatUs(site.host_wait_us)),
    latent ? null : stat("mean", formatUs(site.mean_host_wait_us)),
    latent ? null : stat(site.gpu_idle_measured === false ? "NPU idle" : `${idleOn} idle`, site.gpu_idle_measured === false ? "not measured" : formatUs(site.gpu_idle_us)),
    latent ? null : stat("share", formatPct(site.share_of_step)),
  );
}

/**
 * Fetch and show the source around the line; a note with the path mapping hint when the
 * plugin cannot read the file (unless `hintElsewhere`: the line note above carries it).
 * Resolves to whether the file could be read, null when there was nothing to ask for or the
 * view has moved on.
 * @param {HTMLElement} slot
 * @param {any} site
 * @param {any} sync
 * @param {any} ctx
 * @param {boolean} hintElsewhere
 * @returns {Promise<boolean | null>}
 */
async function renderSource(slot, site, sync, ctx, hintElsewhere) {
  const recorded = site?.file ?? sync?.source?.file ?? sync?.stack?.find((/** @type {any} */ f) => f.user)?.file;
  // The file the engine read for it, where it read one: of several copies of a script (one
  // beside each run's traces) the server alone could not tell which is this run's.
  // A Jupyter cell's code is read by its recorded name (the server finds its notebook).
  const file = (sync?.source?.file === recorded && !sync?.source?.cell && sync?.source?.resolved_path) || recorded;
  const line = site?.line ?? sync?.source?.line ?? null;
  if (!file || !line) {
    replace(slot, h("div", { class: "sa-note", "data-testid": "source-note" }, "No source line for this finding: the trace has no Python stack for it (profile with with_stack=True)."));
    return null;
  }
  /** Why the file cannot be shown, and how to let the plugin read it. @param {string} why @param {string | null} hint */
  const cannot = (why, hint) => {
    const shown = hintElsewhere ? null : hint || SOURCE_ROOT_HINT;
    replace(
      slot,
      h(
        "div",
        { class: "sa-note", "data-testid": "source-note" },
        h("p", null, `Cannot show ${file}:${line}: ${why}`),
        shown ? h("p", null, shown) : null,
      ),
    );
    return false;
  };
  try {
    // A file that is not there is an expected answer (200, `missing`), not an error that
    // the browser would log; it is asked again next time (it may be there by then).
    const src = await getJson("source", { file, line, context: SOURCE_CONTEXT, missing_ok: 1 }, { keep: (body) => !body?.missing });
    if (!ctx.isCurrent()) return null;
    if (src.missing) return cannot(typeof src.error === "string" ? src.error : "not found", typeof src.hint === "string" ? src.hint : null);
    const start = src.start ?? 1;
    replace(
      slot,
      h(
        "pre",
        { class: "sa-code", "data-testid": "source", title: src.path || src.file },
        (src.lines || []).map((/** @type {string} */ text, /** @type {number} */ i) => {
          const no = start + i;
          return h(
            "span",
            { class: `ln${no === src.line ? " hl" : ""}`, "data-line": no, "aria-current": no === src.line ? "true" : null },
            h("span", { class: "no" }, String(no)),
            hangingLine("span", "src", text, (rest) => tokenizePython(rest).map((t) => (t.type === "txt" ? t.text : h("span", { class: `t-${t.type}` }, t.text)))),
          );
        }),
      ),
    );
    return true;
  } catch (e) {
    if (!ctx.isCurrent()) return null;
    return cannot(e instanceof Error ? e.message : String(e), e instanceof ApiError ? e.hint : null);
  }
}

/**
 * One blocking call of the sync, with its count; where it made several kinds of call, the
 * one the host waited in longest (`api`, what its row in the occurrences names) is marked.
 * @param {{name: string, count: number}} a
 * @param {any} sync
 * @param {string[]} apis
 */
function apiName(a, sync, apis) {
  const code = h("code", null, a.count > 1 ? `${a.name} ×${a.count}` : a.name);
  if (sync.latent || a.name !== sync.api || new Set(apis).size < 2) return code;
  return h("span", null, code, " ", h("span", { class: "sa-tag", title: "the call the host waited in longest: the one each occurrence's row names" }, "longest"));
}

/** @param {any} sync */
function chainSection(sync, idleOn) {
  const chain = sync.op_chain?.length ? sync.op_chain : [sync.op, sync.trigger_op].filter(Boolean);
  const apis = sync.apis?.length ? sync.apis : [sync.api];
  const rows = [
    ["Operators", h("span", { class: "sa-chain" }, chain.length ? interleave(chain.map((/** @type {string} */ o) => h("code", null, o)), " → ") : "(bare API call outside any operator)")],
    [sync.latent ? "Would wait in" : "Waited in", h("span", { class: "sa-chain", "data-testid": "waited-in" }, interleave(countNames(apis).map((a) => apiName(a, sync, apis)), ", "))],
    sync.annotations?.length ? ["Annotations", sync.annotations.join(" / ")] : null,
    sync.module ? ["Module", h("code", null, sync.module)] : null,
    ["Step", sync.step ?? h("span", { class: "sa-muted", title: "in no ProfilerStep span: before the first step or after the last, or a trace profiled without prof.step() (it has none)" }, "none")],
    ["Thread", String(sync.thread ?? "–")],
    sync.latent ? null : ["Host wait", formatUs(sync.host_wait_us)],
    sync.latent ? null : [`${idleOn} idle after`, formatUs(sync.gpu_idle_after_us)],
    sync.bytes ? ["Bytes", formatBytes(sync.bytes)] : null,
    sync.trace ? ["Trace", h("span", { class: "mono" }, sync.trace)] : null,
  ].filter(Boolean);
  return [
    h("h3", null, "This sync"),
    h("dl", { class: "sa-kv", "data-testid": "chain" }, rows.map((r) => [h("dt", null, /** @type {any} */ (r)[0]), h("dd", null, /** @type {any} */ (r)[1])])),
  ];
}

/**
 * @param {any[]} items
 * @param {string} sep
 */
function interleave(items, sep) {
  return items.flatMap((x, i) => (i ? [sep, x] : [x]));
}

/**
 * The sync's Python stack; for a backward-pass sync recorded without one (autograd's
 * backward thread), its forward operator's stack, labelled as such; and the line that ran
 * the backward pass (see stack.js `stackToShow`).
 * @param {any} sync
 * @param {any} app
 */
function stackSection(sync, app) {
  const shown = stackToShow(sync);
  const forward = shown.from === "forward";
  const { user, library } = splitStack(frameLines(shown.frames, sync.source));
  const runBy = shown.runBy ? runByLine(shown.runBy, app) : null;
  if (!user.length && !library.length) {
    return [
      h("h3", null, "Python stack"),
      runBy,
      runBy
        ? h("div", { class: "sa-note", "data-testid": "stack-note" }, "No Python stack recorded for this backward operator or its forward operator.")
        : h("div", { class: "sa-note", "data-testid": "no-stack" }, "No Python stack recorded. Profile with ", h("code", null, "with_stack=True"), " to see the call path and source line."),
    ];
  }
  const callTag = (/** @type {number} */ line) =>
    forward
      ? h("span", { class: "sa-tag call", title: "the line that called the forward operator whose backward made the sync (found in the source)" }, `forward call at line ${line}`)
      : h("span", { class: "sa-tag call", title: "the line that made the sync (found in the source)" }, `sync at line ${line}`);
  const item = (/** @type {any} */ f, /** @type {string} */ cls) =>
    h(
      "li",
      { class: cls },
      frameButton(f, app, null),
      f.role === "def" ? h("span", { class: "sa-tag", title: "the line where this function is defined (the trace records no call lines)" }, "def") : null,
      f.role === "running" ? h("span", { class: "sa-tag", title: "the line this function was at when profiling started (it was already running): the trace records no later line" }, "at start") : null,
      f.call !== null ? callTag(f.call) : null,
    );
  const defs = user.some((f) => f.role !== null);
  return [
    h("h3", null, forward ? "Python stack of the forward call" : "Python stack"),
    forward
      ? h(
          "p",
          { class: "sa-muted sa-small", "data-testid": "forward-stack-note" },
          "The backward operator",
          shown.backwardOp ? [" ", h("code", null, shown.backwardOp)] : null,
          " ran in autograd's backward thread and was recorded without a Python stack. Shown instead: the stack of the forward operator",
          shown.forwardOp ? [" ", h("code", null, shown.forwardOp)] : null,
          " it is the gradient of.",
        )
      : null,
    runBy,
    defs
      ? h(
          "p",
          { class: "sa-muted sa-small", "data-testid": "stack-note" },
          "Innermost first. The trace records where each function is defined, not the line that called the next one (a function already running when profiling started shows the line it was at); the sync's own line is in the header.",
        )
      : null,
    h("ul", { class: "sa-frames", "data-testid": "user-frames", "data-stack": shown.from }, user.map((f) => item(f, "user"))),
    library.length
      ? h(
          "details",
          { "data-testid": "library-frames" },
          h("summary", null, `${library.length} library frame${library.length > 1 ? "s" : ""} (torch, site-packages, built-ins)`),
          h("ul", { class: "sa-frames" }, library.map((f) => item(f, "lib"))),
        )
      : null,
  ];
}

/**
 * "Backward pass run by file:line": the line that ran the backward pass the sync is in
 * (`loss.backward()`), as a frame button like the header's.
 * @param {{file: string, line: number | null, func: string, resolved_path?: string | null}} runBy
 * @param {any} app
 */
function runByLine(runBy, app) {
  return h(
    "div",
    { class: "sa-where", "data-testid": "run-by" },
    "backward pass run by ",
    frameButton({ file: runBy.resolved_path || runBy.file, line: runBy.line, func: runBy.func || "", user: true }, app, `${runBy.file}:${runBy.line ?? "?"}`),
    runBy.func ? h("span", { class: "sa-muted" }, " in ", h("span", { class: "mono" }, `${runBy.func}()`)) : null,
  );
}

/**
 * A frame as a button: opens it in VS Code, or copies `path:line`.
 * @param {{file: string, line: number | null, func: string, cell?: any}} frame
 * @param {any} app
 * @param {string | null} label
 */
function frameButton(frame, app, label) {
  // A Jupyter cell's frame by its notebook cell: ipykernel's file for it never exists.
  const loc = frameLocation(frame);
  if (!isOpenable(frame)) return h("span", { class: "mono" }, label ?? `${frame.func} ${loc}`);
  return h(
    "button",
    {
      class: "sa-frame mono",
      "data-frame": loc,
      title: app.inVsCode ? `Open ${loc} in VS Code` : `Copy ${loc}`,
      onclick: () => app.openFrame(frame, { vscodeMessage, frameLocation }),
    },
    label ?? [h("span", { class: "fn" }, frame.func || "?"), "  ", loc],
  );
}

/**
 * @param {any} context
 * @param {any} sync
 * @param {number} panelWidth
 * @param {string} idleOn "GPU", or "NPU" for torch_npu's traces
 */
function timelineSection(context, sync, panelWidth, idleOn) {
  const width = Math.round(Math.max(300, Math.min(900, panelWidth || 560)));
  const labelW = width < 420 ? 80 : 110;
  const syncApis = sync?.apis || (sync?.api ? [sync.api] : []);
  const probe = layoutTimeline(context, { width, labelW, rowH: 16, syncApis });
  if (!probe) return null;
  // A latent sync of torch_npu's default level syncs on the NPU, its wait not recorded; a
  // CPU-only run's would on a GPU.
  const latentWait = idleOn === "NPU" ? "syncs here on the NPU (wait not recorded)" : "would sync here on a GPU";
  const waitText = sync?.latent ? latentWait : `wait ${formatUs(sync?.host_wait_us)}`;
  // Only a bubble that is drawn is labelled; one that runs past the window says it goes on.
  const idleText = probe.bubble ? `${idleOn} idle ${formatUs(sync?.gpu_idle_after_us)}${probe.bubble.clipped ? " \u2192" : ""}` : null;
  const placed = placeBandLabels({ wait: probe.wait, bubble: probe.bubble, width, waitText, idleText });
  const L = /** @type {NonNullable<ReturnType<typeof layoutTimeline>>} */ (layoutTimeline(context, { width, labelW, rowH: 16, top: placed.top, syncApis }));
  const isSyncApi = (/** @type {string} */ name) => (sync?.apis || [sync?.api]).includes(name);
  const devClass = (/** @type {string} */ cat, /** @type {string} */ name) =>
    /memcpy|memset/i.test(cat) || /^Memcpy|^Memset/.test(name) ? "ev-memcpy" : "ev-dev";
  const bandTop = placed.top - 6;
  // A thin bubble (a short idle after a long wait) gets a leader from its label down to it.
  const idleLabel = placed.labels[1];
  let leader = null;
  if (L.bubble?.thin && idleLabel) {
    const cx = L.bubble.x + L.bubble.w / 2;
    const w = idleLabel.text.length * LABEL_CHAR_PX;
    const [a, b] = idleLabel.anchor === "end" ? [idleLabel.x - w, idleLabel.x] : [idleLabel.x, idleLabel.x + w];
    leader = s("line", { class: "band-leader", x1: Math.min(b, Math.max(a, cx)), y1: idleLabel.y + 4, x2: cx, y2: bandTop });
  }
  const svg = s(
    "svg",
    { viewBox: `0 0 ${width} ${L.height}`, role: "img", "aria-label": "Host thread and device lanes around the sync" },
    s("rect", { class: "wait-band", x: L.wait.x, y: bandTop, width: L.wait.w, height: L.height - bandTop - 18 }),
    L.bubble
      ? s(
          "rect",
          { class: `bubble-band${L.bubble.thin ? " thin" : ""}`, x: L.bubble.x, y: bandTop, width: L.bubble.w, height: L.height - bandTop - 18 },
          s("title", null, `${idleOn} idle ${formatUs(sync?.gpu_idle_after_us)} after the sync${L.bubble.thin ? " (drawn wider than it is at this scale)" : ""}${L.bubble.clipped ? ", going on past the window" : ""}`),
        )
      : null,
    leader,
    placed.labels.map((l, i) => s("text", { class: i === 0 ? "band-label wait" : "band-label idle", x: l.x, y: l.y, "text-anchor": l.anchor }, l.text)),
    L.rows.map((/** @type {any} */ r) => [
      // A label cut short ("GPU 0 stream 7 sy…") says itself whole on hover.
      s("text", { class: "lane-label", x: 2, y: r.y + r.h - 4 }, truncate(r.label, L.labelW < 100 ? 12 : 18), r.label && r.label.length > (L.labelW < 100 ? 12 : 18) ? s("title", null, r.label) : null),
      r.items.map((/** @type {any} */ it) => {
        const text = barLabel(it.name, it.w);
        return s(
          "g",
          null,
          s(
            "rect",
            {
              class: r.group === "host" ? (isSyncApi(it.name) ? "ev-sync" : "ev-host") : devClass(it.cat, it.name),
              x: it.x,
              y: r.y,
              width: it.w,
              height: r.h,
              rx: 2,
            },
            s("title", null, `${it.name} (${it.cat})`),
          ),
          text ? s("text", { class: "ev-label", x: it.x + 3, y: r.y + r.h - 4 }, text) : null,
        );
      }),
    ]),
    L.ticks.map((t, i) =>
      s("text", { x: t.x, y: L.height - 4, "text-anchor": i === 0 ? "start" : i === L.ticks.length - 1 ? "end" : "middle" }, `+${formatUs(t.us)}`),
    ),
  );
  return [
    h("h3", null, "Timeline around the sync"),
    h(
      "div",
      { class: "sa-timeline", "data-testid": "timeline" },
      svg,
      h(
        "div",
        { class: "sa-legend" },
        // A latent sync blocks nothing on a CPU: its band marks where it would wait.
        h("span", null, h("i", { style: { background: "var(--wait)", opacity: "0.5" } }), sync?.latent ? (idleOn === "NPU" ? "where it waits on the NPU (not recorded)" : "where it would wait on a GPU") : "host blocked"),
        L.bubble ? h("span", null, h("i", { style: { background: "var(--idle)", opacity: "0.6" } }), `${idleOn} bubble after it`) : null,
        L.bubbleBeyond && sync?.gpu_idle_after_us
          ? h("span", { "data-testid": "bubble-beyond" }, `${idleOn} idle ${formatUs(sync.gpu_idle_after_us)} after it, past the right edge of this window`)
          : null,
      ),
    ),
  ];
}

/** @param {string} text @param {number} n */
function truncate(text, n) {
  return text && text.length > n ? text.slice(0, n - 1) + "…" : text || "";
}

/**
 * @param {any} advice
 * @param {any} [site]
 */
function adviceSection(advice, site = null) {
  return [
    h("h3", null, "How to fix"),
    h(
      "div",
      { class: "sa-advice", "data-testid": "advice" },
      advice.title ? h("b", null, withCode(advice.title)) : null,
      advice.text ? h("p", null, withCode(advice.text)) : null,
      advice.removes ? h("p", { class: "sa-note" }, `Removes: ${advice.removes}`) : null,
      libraryCodeText(advice, site)
        ? h("p", { class: "sa-note", "data-testid": "library-code" }, libraryCodeText(advice, site))
        : null,
      // Read in torch.compile'd code: what the fix means there (a graph break, or a read
      // captured in the graph).
      advice.compiled ? h("p", { class: "sa-note", "data-testid": "compiled-code" }, withCode(advice.compiled)) : null,
      advice.before || advice.after
        ? h(
            "div",
            { class: "ba" },
            h("div", null, h("span", null, "Before"), h("pre", null, codeLines(advice.before || ""))),
            h("div", null, h("span", null, "After"), h("pre", null, codeLines(advice.after || ""))),
          )
        : null,
    ),
  ];
}

/**
 * Text with `code` spans as <code> elements.
 * @param {string} text
 */
function withCode(text) {
  return inlineCode(text).map((part) => (part.code ? h("code", null, part.text) : part.text));
}

/**
 * The summary's entry of the trace a sync is in (null without one).
 * @param {any} sync
 * @param {any[] | null | undefined} traces the summary's traces
 * @returns {any}
 */
function traceOf(sync, traces) {
  return sync ? (traces || []).find((/** @type {any} */ t) => t.path === sync.trace) ?? null : null;
}

/**
 * Where to see this sync in a full trace viewer: the PyTorch Profiler tab (opened, with
 * where to look: it takes no run, view or time from a link) and the trace with a Sync
 * Advisor track, for Perfetto.
 * @param {any} sync
 * @param {any} context
 * @param {{run: string, worker: string | null, span: string | null}} sel
 * @param {{worker: string, span: string | null} | null} where the sync's trace
 * @param {any} app
 * @param {boolean} [listed] whether the PyTorch Profiler tab lists the sync's trace (the
 *   summary's `profiler_tab`; absent from an older plugin's answer: taken as listed)
 */
function viewersSection(sync, context, sel, where, app, listed = true) {
  const at = traceLocator(sync, context);
  const worker = where?.worker ?? sel.worker;
  const span = where?.span ?? null;
  const place = [
    at.step ? `${formatUs(at.offsetUs)} into ${at.step}` : null,
    at.thread ? `thread ${at.thread}` : null,
  ].filter(Boolean).join(", ");
  // The tab numbers a worker's spans 1, 2, ... (the span's own name, an epoch time, is in
  // no list there); it does not list a trace its loader does not take (torch_npu's
  // `*_ascend_pt/.../trace_view.json`).
  const workerSpans = (app.currentRun?.()?.workers || []).find((/** @type {any} */ w) => w.name === worker)?.spans || [];
  const spanThere = span ? profilerSpanName(workerSpans, span) : null;
  const spanLabel = span ? spanLabels(workerSpans).get(String(span)) ?? span : null;
  const profiler = app.profilerTab && listed
    ? h(
        "li",
        { "data-testid": "profiler-link" },
        h(
          "button",
          {
            class: "sa-linkish",
            title: "Open TensorBoard's PyTorch Profiler tab (it cannot be opened on a run or a time: it says where to look)",
            onclick: () => app.openProfilerTab(at.search),
          },
          "PyTorch Profiler tab",
        ),
        // It opens on whatever run it last showed: what to pick there is said as such.
        ", then pick Runs ",
        h("b", null, sel.run),
        worker ? [", Workers ", h("b", null, worker)] : null,
        span ? [", Spans ", h("b", null, spanThere ?? span), spanThere ? ` (${spanLabel})` : null] : null,
        ", Views ",
        h("b", null, "Trace"),
        place ? `; ${place}` : "",
        at.search ? ["; search ", h("code", null, at.search), " (copied when you open the tab)"] : null,
        ".",
      )
    : null;
  const perfetto = worker
    ? h(
        "li",
        { "data-testid": "perfetto-link" },
        h("a", { href: apiUrl("export", { run: sel.run, worker, span, format: "trace" }), download: "" }, "Trace with a Sync Advisor track"),
        ": open it in ",
        h("a", { href: "https://ui.perfetto.dev", target: "_blank", rel: "noopener noreferrer" }, "Perfetto"),
        " or chrome://tracing; this sync is the slice ",
        h("code", null, `${sync.kind}: ${sync.op || sync.api || "sync"}`),
        place ? ` (${place})` : "",
        ".",
      )
    : null;
  if (!profiler && !perfetto) return null;
  return [h("h3", null, "In a trace viewer"), h("ul", { class: "sa-viewers", "data-testid": "viewers" }, profiler, perfetto)];
}

/**
 * Scroll the occurrences list (it scrolls on its own, 180 px high) to the occurrence shown
 * in the detail, when it is on the page listed: a link that names one opens with its row in
 * view, and so does the list in another order or at another page that holds it. Only the
 * list scrolls (not the panel or the page, as `scrollIntoView` would), and the focus stays
 * where it is.
 * @param {HTMLElement} panel the detail, or the part of it that holds the list
 */
function revealSelectedOccurrence(panel) {
  const list = /** @type {HTMLElement | null} */ (panel.querySelector(".sa-occ"));
  const row = list?.querySelector("tbody tr[aria-current='true']");
  if (!list || !row) return;
  const box = list.getBoundingClientRect();
  const at = row.getBoundingClientRect();
  const to = scrollToShow(
    { top: at.top - box.top - list.clientTop + list.scrollTop, height: at.height },
    {
      scrollTop: list.scrollTop,
      clientHeight: list.clientHeight,
      scrollHeight: list.scrollHeight,
      header: list.querySelector("thead")?.getBoundingClientRect().height ?? 0,
    },
  );
  if (to !== null) list.scrollTop = to;
}

/**
 * The site's occurrences, a page of `OCC_PAGE` at a time with first / previous / next / last
 * buttons that reach every one, in the order they ran (as the plugin lists them) or, picked
 * in the Order box, the costliest first (the plugin sorts the whole list, then pages it);
 * the page and the order are kept in the view state (`occ`, `osort`) without drawing the
 * view again, and another order starts at the first page. The detail keeps the occurrence it
 * shows, and the URL names it (`sync`, `occPagePatch`) so that a reload shows it too. The rows are one Tab stop, arrow
 * keys between them, Enter or Space (or a click) shows that occurrence.
 * @param {{total: number, offset?: number, items: any[]}} first the page the view state names
 * @param {(offset: number, osort: string) => Promise<any>} fetchPage
 * @param {string | null} selectedId
 * @param {any} app
 * @param {any} ctx
 * @param {string | null} osort the order listed (`OCC_SORTS`' key); null: latent findings,
 *   which cost nothing where they were seen, listed as they ran with no order to pick
 */
function occurrences(first, fetchPage, selectedId, app, ctx, osort) {
  const latentList = osort === null;
  const total = first.total ?? (first.items || []).length;
  if (total <= 1 && (first.items || []).length <= 1) return null;
  const box = h("div", { class: "sa-occ-list" });
  let order = osort ?? "";
  // The answer of the last page or order asked for is the one shown (not one overtaken).
  let asked = 0;
  /**
   * The list from `offset` in the order `to`, once the plugin has answered.
   * @param {number} offset
   * @param {string} to
   * @returns {Promise<any | null>} the page; null if it failed or was overtaken
   */
  const load = async (offset, to) => {
    const mine = ++asked;
    let next;
    try {
      next = await fetchPage(offset, to);
    } catch (e) {
      if (mine === asked) app.toast(`Could not load the occurrences: ${e instanceof Error ? e.message : String(e)}`);
      return null;
    }
    return mine === asked && ctx.isCurrent() && box.isConnected ? next : null;
  };
  /**
   * @param {{total: number, offset?: number, items: any[]}} page
   * @param {number} offset
   * @param {string | null} focusKey the pager button pressed, to keep the focus on
   */
  const show = (page, offset, focusKey) => {
    const p = occurrencePages(page.total ?? total, offset);
    const items = page.items || [];
    const select = (/** @type {number} */ i) => app.setState({ sync: items[i].id });
    const anchor = Math.max(0, items.findIndex((x) => x.id === selectedId));
    /** @param {number} to */
    const go = async (to) => {
      const next = await load(to, order);
      if (!next) return;
      app.noteState(occPagePatch({ occ: to }, app.state.sync, selectedId));
      const key = /** @type {HTMLElement | null} */ (document.activeElement)?.dataset?.focusKey ?? null;
      show(next, to, key);
    };
    /** @param {string} label @param {string} key @param {number | null} to @param {string} name */
    const button = (label, key, to, name) =>
      h(
        "button",
        { type: "button", class: "sa-linkish", "data-testid": `occ-${key}`, "data-focus-key": `occ-${key}`, "aria-label": name, disabled: to === null, onclick: () => (to === null ? null : go(to)) },
        label,
      );
    const range = occSortWords(order, ctx.idleOn).range;
    const pager =
      p.pages > 1
        ? h(
            "div",
            { class: "sa-pager", role: "group", "aria-label": "Pages of occurrences" },
            button("\u00ab First", "first", p.first, "First page"),
            button("\u2039 Previous", "prev", p.prev, "Previous page"),
            h("span", { "data-testid": "occ-range", "aria-live": "polite" }, `${formatCount(p.from)}\u2013${formatCount(p.to)} of ${formatCount(p.total)}, ${range}`),
            button("Next \u203a", "next", p.next, "Next page"),
            button("Last \u00bb", "last", p.last, "Last page"),
          )
        : null;
    const rowKeys = rovingKeys("tr", nextRowIndex, select);
    /** A cost column's header, marked as the one the list is sorted by. @param {string} key @param {string} label @param {string | null} title */
    const costHead = (key, label, title) =>
      h("th", { class: "num", scope: "col", title, "aria-sort": order === key ? "descending" : null }, label);
    const table = h(
      "table",
      { class: "sa-table", "data-testid": "occurrences", "data-offset": String(p.offset), "data-order": order || null, "aria-label": "Occurrences; arrow keys move, Enter shows one" },
      h(
        "thead",
        null,
        h(
          "tr",
          null,
          h("th", { scope: "col" }, "Step"),
          // Latent findings cost nothing where they were seen: no columns of dashes.
          h("th", { scope: "col", title: latentList ? null : "the blocking call the host waited in longest" }, latentList ? (ctx.idleOn === "NPU" ? "Syncs in" : "Would wait in") : "Waited in"),
          latentList ? null : costHead("host_wait_us", "Wait", "host wait"),
          latentList ? null : costHead("gpu_idle_after_us", "Idle after", `${ctx.idleOn || "GPU"} idle after the sync`),
          latentList ? null : costHead("predicted_saving_us", "Saves", "what removing this sync alone saves (the what-if replay's figure; \u2264 an upper bound where the trace could not be replayed)"),
        ),
      ),
      h(
        "tbody",
        { onkeydown: rowKeys },
        items.map((x, i) =>
          h(
            "tr",
            {
              tabindex: i === anchor ? "0" : "-1",
              "aria-current": x.id === selectedId ? "true" : null,
              "data-sync": x.id,
              "data-focus-key": `occ-${x.id}`,
              onclick: () => select(i),
            },
            h("td", { title: x.step === null || x.step === undefined ? "in no ProfilerStep span" : null }, x.step ?? "\u2013"),
            h("td", { class: "mono" }, x.api),
            latentList ? null : h("td", { class: "num" }, x.latent ? "\u2013" : formatUs(x.host_wait_us)),
            latentList ? null : h("td", { class: "num" }, x.latent ? "\u2013" : formatUs(x.gpu_idle_after_us)),
            latentList ? null : h("td", { class: "num" }, x.latent ? "\u2013" : `${x.saving_method === "replay" ? "" : "\u2264"}${formatUs(x.predicted_saving_us ?? 0)}`),
          ),
        ),
      ),
    );
    replace(box, pager, h("div", { class: "sa-occ" }, table));
    // Drawn into the detail already (a page, an order picked): the occurrence shown above,
    // when it is on this page, in view in the list.
    if (box.isConnected) revealSelectedOccurrence(box);
    if (focusKey) {
      // The button pressed keeps the focus; one that has nothing more to go to hands it to the rows.
      const pressed = /** @type {HTMLButtonElement | null} */ (box.querySelector(`[data-focus-key="${focusKey}"]`));
      const target = pressed && !pressed.disabled ? pressed : /** @type {HTMLElement | null} */ (box.querySelector("tbody tr[tabindex='0']"));
      target?.focus();
    }
  };
  show(first, first.offset ?? 0, null);
  const heading = h("h3", null, `Occurrences (${formatCount(total)})`);
  if (osort === null) return [heading, box];
  // The order: a labelled select (its own Tab stop, before the pager and the rows); another
  // order lists the first page of it, the focus staying on the select.
  const orderBox = /** @type {HTMLSelectElement} */ (h(
    "select",
    {
      id: "sa-osort",
      "aria-label": "Order of the occurrences",
      "data-testid": "occ-sort",
      "data-focus-key": "occ-sort",
      onchange: async () => {
        const to = orderBox.value;
        const ask = asked + 1;
        const next = await load(0, to);
        if (!next) {
          // It failed (said in a toast): the box says the order still listed.
          if (asked === ask && box.isConnected) orderBox.value = order;
          return;
        }
        order = to;
        app.noteState(occPagePatch({ osort: to, occ: 0 }, app.state.sync, selectedId));
        show(next, 0, null);
      },
    },
    OCC_SORTS.map((o) => h("option", { value: o.key, selected: o.key === order }, occSortWords(o.key, ctx.idleOn).label)),
  ));
  return [
    h("div", { class: "sa-occ-head" }, heading, h("span", { class: "sa-field sa-occ-order" }, h("label", { for: "sa-osort" }, "Order"), orderBox)),
    box,
  ];
}

/**
 * One line of code whose wrapped rows start under its code, not at column 0: its leading
 * indentation in a span that never wraps, and a hanging indent as wide (Python's
 * indentation is its meaning; a narrow panel wrapped an indented line to a row of blanks
 * and then the code at column 0). The text is all still there to copy.
 * @param {string} tag
 * @param {string} cls
 * @param {string} text the line, without its newline
 * @param {(rest: string) => any} body what to draw of the line after its indentation
 */
export function hangingLine(tag, cls, text, body) {
  const lead = /^[ \t]*/.exec(text)?.[0] ?? "";
  const width = [...lead].reduce((n, c) => n + (c === "\t" ? 4 : 1), 0);
  return h(
    tag,
    { class: cls, style: width ? { "padding-left": `${width}ch`, "text-indent": `-${width}ch` } : null },
    lead ? h("span", { class: "ind" }, lead) : null,
    body(text.slice(lead.length)),
  );
}

/**
 * A code sample's lines (the advice's before and after), each wrapping under its own
 * indentation (`hangingLine`).
 * @param {string} code
 */
function codeLines(code) {
  const lines = code.replace(/\n$/, "").split("\n");
  // Each line a block of its own: no newline characters (a copy puts one between blocks).
  return lines.map((line) => hangingLine("span", "cl", line, (rest) => rest));
}
