// @ts-check
/**
 * The Compare view: a baseline run against the selected run, per site fixed / new /
 * better / worse / same, with the step time change. The before/after loop of profiling.
 */
import { getJson } from "./api.js";
import { h, rovingKeys } from "./dom.js";
import { kindLabel } from "./catalogue.js";
import { formatCount, shortPath } from "./format.js";
import { unreadableFiles } from "./hotspots.js";
import { nothingReadable, runOptionLabel, selectionName } from "./repairs.js";
import { libraryText, nextRowIndex } from "./sites.js";
import {
  changeText,
  compareColumns,
  counterpartOf,
  compareHeadline,
  pickBaseline,
  replacesText,
  rowTone,
  compareBasis,
  compareIdleOn,
  compareLocation,
  COMPARE_INEXACT_TITLE,
  countByStatus,
  costCell,
  countTone,
  noPerStepTitle,
  sideCost,
  sortCompareSites,
  STATUS_LABELS,
  STATUS_ORDER,
  summaryRows,
  UNIT_WORDS,
  withPerStepCosts,
} from "./compare.js";

/** @param {any} ctx */
export async function renderCompare(ctx) {
  const { sel, state, app } = ctx;
  const listed = app.runs?.runs || [];
  const runs = listed.map((/** @type {any} */ r) => r.name);
  const others = listed.filter((/** @type {any} */ r) => r.name !== sel.run);
  // A run is never its own baseline; with none picked, the run named *baseline* (or the
  // only other run) is. One named that is not listed was said and replaced (app.js).
  const { base } = pickBaseline(runs, sel.run, state.base);
  const picker = h(
    "span",
    { class: "sa-field" },
    h("label", { for: "sa-base" }, "Baseline run"),
    h(
      "select",
      {
        id: "sa-base",
        "data-focus-key": "base",
        onchange: (/** @type {Event} */ e) => app.setState({ base: /** @type {HTMLSelectElement} */ (e.target).value || null }, { picked: true }),
      },
      h("option", { value: "", selected: !base }, "Pick a baseline…"),
      others.map((/** @type {any} */ r) => h("option", { value: r.name, selected: r.name === base }, runOptionLabel(r))),
    ),
    h("span", null, " → ", h("b", null, sel.run)),
  );
  if (!base) {
    // Opened on a baseline run: the run after the change is the one to look at, against it.
    const counterpart = counterpartOf(runs, sel.run);
    const offer = counterpart
      ? h(
          "p",
          null,
          h(
            "button",
            {
              type: "button",
              class: "sa-linkish",
              "data-testid": "compare-counterpart",
              // As the run picker: the baseline's site, sync and step are not the other run's.
              onclick: () =>
                app.setState({ run: counterpart, worker: null, span: null, site: null, sync: null, step: null, base: sel.run }),
            },
            `Compare ${counterpart} against this baseline`,
          ),
        )
      : null;
    return h(
      "div",
      { class: "sa-compare" },
      h("div", { class: "sa-compare-head" }, picker),
      h(
        "div",
        { class: "sa-empty", "data-testid": "compare-empty" },
        counterpart
          ? `${sel.run} is a baseline: compare the run after your change against it.`
          : others.length
            ? "Pick the run before your change as the baseline to see which syncs were fixed, which are new, and how much step time changed."
            : "Compare needs a second run: profile again after a change, into a sibling folder of the logdir (e.g. logs/baseline and logs/optimized).",
        offer,
      ),
    );
  }
  // A worker picked for the new run picks the baseline's of that name too (rank1 against
  // rank1): compared against all of the baseline's workers, one rank read as the job's
  // change. Spans are each run's own times: never carried over.
  const baseRun = (app.runs?.runs || []).find((/** @type {any} */ r) => r.name === base);
  const sameWorker = sel.worker !== null && (baseRun?.workers || []).some((/** @type {any} */ w) => w.name === sel.worker);
  const baseWorker = sameWorker ? sel.worker : null;
  const [data, baseSummary, newSummary] = await Promise.all([
    getJson("compare", { run: sel.run, worker: sel.worker, span: sel.span, base, base_worker: baseWorker }).catch((/** @type {unknown} */ e) => ({ failed: e })),
    getJson("summary", { run: base, worker: baseWorker }).catch(() => null),
    getJson("summary", sel).catch(() => null),
  ]);
  // A side none of whose traces could be read has an empty report: compared with it, every
  // site would read fixed (or new). Say only that.
  const unreadable = [
    nothingReadable(baseSummary?.traces) ? unreadableSide(`baseline run "${base}"`, baseSummary.traces, true) : null,
    nothingReadable(newSummary?.traces) ? unreadableSide(selectionName(sel, `run "${sel.run}"`, app.workerSpans()), newSummary.traces, sel.worker !== null) : null,
  ].filter(Boolean);
  if (unreadable.length) {
    return h(
      "div",
      { class: "sa-compare", "data-testid": "compare-unreadable" },
      h("div", { class: "sa-compare-head" }, picker),
      h("div", { class: "sa-empty" }, unreadable, h("p", null, "Nothing to compare until a trace file of each run can be read.")),
    );
  }
  if ("failed" in data) throw data.failed;
  // Some trace files of the baseline could not be read (the run's own are in the banner).
  const baseErrors = (data.unreadable || []).filter((/** @type {any} */ u) => u.side === "base");
  // A CPU-only run measures no wait: its cost rows read "–" (as its hotspots do), never 0.
  const cpuBase = baseSummary?.has_gpu_activity === false && !baseSummary?.has_runtime;
  const cpuNew = newSummary?.has_gpu_activity === false && !newSummary?.has_runtime;
  const idleOn = compareIdleOn(baseSummary, newSummary);
  // CPU-only runs have no real syncs: their latent (would-sync-on-GPU) sites are compared by
  // count per step, as are all sites when only one run is CPU-only (then `note` says so).
  const basis = compareBasis(data);
  const latent = basis.latentOnly;
  const byCount = basis.byCount;
  // An answer from an older version may lack the per-step costs: computed as compare.py does.
  const sites = sortCompareSites(withPerStepCosts(basis.sites, data.base, data.new));
  const counts = countByStatus(sites);
  const b = data.base || {};
  const n = data.new || {};
  const headline = compareHeadline({ latent, mixed: byCount && !latent, npu: data.unmeasured === "npu", npuAndGpu: data.note_kind === "npu_gpu", changeUs: data.wall_step_time_change_us ?? data.step_time_change_us, baseStepUs: b.mean_wall_step_time_us || b.mean_step_time_us, counts });
  // A compared site opens in Hotspots (a fixed one is not in this run: it opens nothing).
  const open = (/** @type {any} */ x) => (x.status === "fixed" ? null : openSite(app, { ...x, latent, mixed: byCount && !latent }));
  return h(
    "div",
    { class: "sa-compare", "data-testid": "compare" },
    h(
      "div",
      { class: "sa-compare-head" },
      picker,
      h("span", { class: `sa-delta ${headline.tone}`, "data-testid": "step-change", "data-tone": headline.tone }, headline.text),
      latent ? h("span", { class: "sa-chip", "data-testid": "compare-latent" }, "latent sites: no GPU activity in these runs") : null,
      h(
        "span",
        { class: "sa-counts" },
        STATUS_ORDER.map((st) =>
          h(
            "span",
            { class: `sa-badge s-${countTone(st, counts[st])}`, "data-status-count": st, "data-tone": countTone(st, counts[st]) },
            `${counts[st]} ${/** @type {any} */ (STATUS_LABELS)[st]}`,
          ),
        ),
      ),
    ),
    headline.note ? h("p", { class: "sa-note", "data-testid": "step-change-note" }, headline.note) : null,
    headline.caveat ? h("p", { class: "sa-muted sa-small", "data-testid": "step-change-caveat" }, headline.caveat) : null,
    basis.note ? h("p", { class: "sa-note", "data-testid": "compare-note" }, basis.note.charAt(0).toUpperCase() + basis.note.slice(1)) : null,
    // Same trace files, or different GPUs: the plugin's word on what the step times mean.
    data.runs_note ? h("p", { class: "sa-note", "data-testid": "runs-note" }, data.runs_note) : null,
    // New rows in place of a function's fixed syncs: why they are no regression.
    data.replacement_note ? h("p", { class: "sa-note", "data-testid": "replacement-note" }, data.replacement_note.charAt(0).toUpperCase() + data.replacement_note.slice(1)) : null,
    sel.worker !== null && !sameWorker
      ? h("p", { class: "sa-note", "data-testid": "base-all-workers" }, `The baseline ${base} has no worker ${sel.worker}: compared against all its workers.`)
      : null,
    baseErrors.length
      ? h(
          "details",
          { class: "sa-note", "data-testid": "base-unreadable" },
          h("summary", null, `${baseErrors.length} trace file${baseErrors.length > 1 ? "s" : ""} of baseline run "${base}" could not be read: compared without ${baseErrors.length > 1 ? "them" : "it"}`),
          unreadableFiles(baseErrors),
        )
      : null,
    h(
      "div",
      { class: "sa-table-wrap sa-summary-wrap", style: { "margin-bottom": "12px" } },
      h(
        "table",
        { class: "sa-table sa-summary", "data-testid": "compare-summary", "aria-label": "The two runs per step and over the whole run" },
        h("thead", null, h("tr", null, h("th", null, ""), h("th", { class: "num" }, base), h("th", { class: "num" }, sel.run))),
        // A group per unit, its heading saying what each row under it is measured over.
        summaryRows({ base: b, new: n, predictedUs: data.predicted_saving_us, measuredUs: data.measured_saving_us, cpuBase, cpuNew, compared: data, idleOn, mixed: byCount && !latent }).map((group) =>
          h(
            "tbody",
            { "data-unit": group.unit },
            h("tr", { class: "sa-rowgroup-head" }, h("th", { scope: "rowgroup", colspan: "3", class: "sa-rowgroup" }, group.title)),
            group.rows.map((r) =>
              h(
                "tr",
                { "data-row": r.id, "data-testid": r.id === "saving" ? "predicted-vs-measured" : null },
                h("th", { scope: "row" }, r.label),
                r.span ? h("td", { colspan: "2" }, r.span) : [h("td", { class: "num" }, r.before), h("td", { class: "num" }, r.after)],
              ),
            ),
          ),
        ),
      ),
    ),
    sites.length
      ? h(
          "div",
          { class: "sa-table-wrap" },
          h(
            "table",
            {
              class: "sa-table",
              "data-testid": "compare-sites",
              "aria-label": "Sites compared with the baseline; arrow keys move, Enter opens the site in Hotspots (a fixed site is not in this run: nothing to open)",
            },
            h(
              "thead",
              null,
              h(
                "tr",
                null,
                // Each figure's unit under its label: whole-run counts beside per-step costs.
                compareColumns(byCount, idleOn).map((c) =>
                  h(
                    "th",
                    { class: c.cls, scope: "col", title: c.title, "data-col": c.id },
                    c.label,
                    c.unit ? [" ", h("span", { class: "sa-th-scope", "data-unit": c.unit }, UNIT_WORDS[c.unit])] : null,
                  ),
                ),
              ),
            ),
            h(
              "tbody",
              // One Tab stop for the table (its first row), arrow keys between rows, Enter or
              // Space acts as a click, as in the sites table: not a Tab stop per row.
              { onkeydown: rovingKeys("tr", nextRowIndex, (i) => open(sites[i])) },
              sites.map((x, i) =>
                h(
                  "tr",
                  {
                    "data-status": x.status,
                    "data-key": x.key,
                    "data-focus-key": `compare-${x.key}`,
                    tabindex: i === 0 ? "0" : "-1",
                    // A fixed site is not in this run: its row says so, and is no link.
                    title: x.status === "fixed" ? FIXED_NOTE : "Open in Hotspots",
                    "aria-description": x.status === "fixed" ? FIXED_NOTE : null,
                    class: x.status === "fixed" ? "no-open" : null,
                    onclick: () => open(x),
                  },
                  h("td", null, h("span", { class: `sa-badge s-${rowTone(x)}`, "data-tone": rowTone(x) }, /** @type {any} */ (STATUS_LABELS)[x.status] || x.status)),
                  h(
                    "td",
                    { class: "loc mono", title: x.line_exact === false && x.file ? `${x.file}\n${COMPARE_INEXACT_TITLE}` : x.file || "" },
                    compareLocation(x),
                    // The operator, as the CLI's row shows it: a line's forward and backward
                    // syncs, or its copy and its item(), read as the same row otherwise.
                    x.ops && x.ops.length ? h("span", { class: "sa-site-note", "data-testid": "compare-op" }, x.ops.length > 1 ? `${x.ops[0]} → … ${x.ops[x.ops.length - 1]}` : x.ops[0]) : null,
                    // One call of the user's running several of a library's reads: which.
                    x.library && x.library.file ? h("span", { class: "sa-site-note", "data-testid": "compare-library" }, libraryText(x.library, x.file, shortPath)) : null,
                    // A new row in place of its function's fixed syncs (not gated): where.
                    replacesText(x, sites) ? h("span", { class: "sa-site-note", "data-testid": "compare-replaces" }, replacesText(x, sites)) : null,
                  ),
                  h("td", { class: "mono col-func" }, x.func || "–"),
                  h("td", { class: "col-kind" }, h("span", { class: `sa-badge k-${x.kind}` }, kindLabel(x.kind))),
                  h("td", { class: "num col-count" }, x.before ? formatCount(x.before.count) : "–"),
                  h("td", { class: "num col-count" }, x.after ? formatCount(x.after.count) : "–"),
                  byCount ? h("td", { class: "num col-cost" }, x.before ? formatCount(x.before.per_step) : "–") : costTd(x.before, "before"),
                  byCount ? h("td", { class: "num col-cost" }, x.after ? formatCount(x.after.per_step) : "–") : costTd(x.after, "after"),
                  h("td", { class: "col-change", title: changeTitle(x, byCount) }, changeText(x, { latent: byCount })),
                ),
              ),
            ),
          ),
        )
      : h("div", { class: "sa-empty" }, "Neither run has sync sites."),
  );
}

/**
 * A side's cost per step cell ("–" saying why for a side with no per-step figure).
 * @param {any} side
 * @param {"before" | "after"} which
 */
function costTd(side, which) {
  const cell = costCell(side, which);
  return h("td", { class: "num col-cost", title: cell.title }, cell.text);
}

/**
 * Why a change reads "–": a side with no per-step figure (null when both have one).
 * @param {any} x
 * @param {boolean} byCount
 */
function changeTitle(x, byCount) {
  if (byCount) return null;
  if (sideCost(x.before) === null) return noPerStepTitle("before");
  return sideCost(x.after) === null ? noPerStepTitle("after") : null;
}

/**
 * What a side none of whose traces could be read says: its name and, unless the banner above
 * lists them already (the selected run as a whole), each file and why.
 * @param {string} name
 * @param {any[]} traces that side's summary traces, each with its `error`
 * @param {boolean} list whether to list the files here
 */
function unreadableSide(name, traces, list) {
  return [
    h("h2", null, `No trace of ${name} could be read`),
    list ? unreadableFiles(traces) : h("p", null, "Its files and why are listed above."),
  ];
}

/** What a fixed site's row says: it was in the baseline only, so nothing opens. */
const FIXED_NOTE = "Fixed: in the baseline only, not in this run, so there is nothing to open";

/**
 * Jump from a compared site to its detail in the Hotspots view of this run. The compare
 * key matches by file basename + function + op + kind, so look the site up by those.
 * @param {any} app
 * @param {any} x
 */
async function openSite(app, x) {
  const sel = app.selection();
  try {
    const base = (/** @type {string | null} */ f) => (f || "").split(/[\\/]/).pop();
    const find = async (/** @type {boolean} */ latent) => {
      const sites = await getJson("sites", { ...sel, kind: x.kind, latent: latent ? 1 : null, limit: 500 });
      return (sites.items || []).find(
        (/** @type {any} */ s) => base(s.file) === base(x.file) && s.func === x.func && (s.ops || [])[0] === (x.ops || [])[0],
      );
    };
    // Against a run of the other kind (GPU vs CPU-only) this run's site may be a real or a
    // latent one: look in both.
    const match = (await find(!!x.latent)) || (x.mixed ? await find(!x.latent) : undefined);
    // The focus goes to the site's row in Hotspots (else the search box, filtered to it).
    app.pendingFocus = match ? `site-${match.key}` : "q";
    app.setState({ view: "hotspots", site: match ? match.key : null, sync: null, step: null, kind: "", q: match ? "" : x.func || "" });
  } catch {
    app.setState({ view: "hotspots" });
  }
}
