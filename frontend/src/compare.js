// @ts-check
/**
 * Display logic of the compare view (baseline run vs this run). The classification itself
 * comes from the plugin's `compare` route (`compare.py`); this orders and words it. Pure.
 */
import { cellPlace, formatCount, formatDeltaUs, formatPct, formatUs, plural, shortPath, siteFallbackLabel } from "./format.js";

/** Display order: what got worse or appeared first, then the wins, then the unchanged. */
export const STATUS_ORDER = Object.freeze(["worse", "new", "fixed", "better", "same"]);

export const STATUS_LABELS = Object.freeze({
  fixed: "fixed",
  new: "new",
  better: "better",
  worse: "worse",
  same: "same",
});

/** Whether a status is good news (for colour): fixed/better good, new/worse bad. */
export const STATUS_TONE = Object.freeze({
  fixed: "good",
  better: "good",
  new: "bad",
  worse: "bad",
  same: "neutral",
});

/**
 * Cost of one side of a compared site: host wait + GPU idle per step (`cost_per_step_us`
 * from compare.py: per-step costs compare runs of different lengths fairly); 0 for no side;
 * null when the answer has no per-step figure (from an older version, and none could be
 * computed: `withPerStepCosts`). Never the whole-run totals: the columns say "per step".
 * @param {any} side
 * @returns {number | null}
 */
export function sideCost(side) {
  if (!side) return 0;
  const cost = side.cost_per_step_us;
  return typeof cost === "number" && Number.isFinite(cost) ? cost : null;
}

/**
 * The compared sites with the per-step cost of each side that an older answer lacks
 * computed as compare.py computes it: the side's host wait + GPU idle totals over its run's
 * profiled steps (`step_count` of that run's summary, at least 1). A side whose run summary
 * has no step count is left without (`sideCost` null).
 * @template {{before?: any, after?: any}} T
 * @param {T[]} sites
 * @param {any} base the answer's baseline summary (`base`)
 * @param {any} after the answer's summary of this run (`new`)
 * @returns {T[]}
 */
export function withPerStepCosts(sites, base, after) {
  /** @param {any} side @param {any} summary */
  const fill = (side, summary) => {
    if (!side || sideCost(side) !== null) return side;
    const steps = summary?.step_count;
    if (typeof steps !== "number" || !Number.isFinite(steps)) return side;
    return { ...side, cost_per_step_us: (num(side.host_wait_us) + num(side.gpu_idle_us)) / Math.max(Math.trunc(steps), 1) };
  };
  return sites.map((x) => ({ ...x, before: fill(x.before, base), after: fill(x.after, after) }));
}

/**
 * What a side's cost cell says: its cost per step, "–" with why for a side with no per-step
 * figure (null `title` otherwise).
 * @param {any} side
 * @param {"before" | "after"} which
 * @returns {{text: string, title: string | null}}
 */
export function costCell(side, which) {
  const cost = sideCost(side);
  if (!side) return { text: "–", title: null };
  if (cost === null) return { text: "–", title: noPerStepTitle(which) };
  return { text: formatUs(cost), title: null };
}

/**
 * Why a side shows no cost per step.
 * @param {"before" | "after"} which
 */
export function noPerStepTitle(which) {
  const who = which === "before" ? "The baseline" : "This run";
  return `${who} predates per-step figures (no cost per step and no count of its profiled steps): its whole-run totals are not shown as per-step costs`;
}

/** @param {unknown} v */
function num(v) {
  return typeof v === "number" && Number.isFinite(v) ? v : 0;
}

/**
 * Counts per status, every status present (0 when none).
 * @param {{status: string}[]} sites
 * @returns {Record<string, number>}
 */
export function countByStatus(sites) {
  /** @type {Record<string, number>} */
  const counts = Object.fromEntries(STATUS_ORDER.map((s) => [s, 0]));
  for (const s of sites) counts[s.status] = (counts[s.status] ?? 0) + 1;
  return counts;
}

/**
 * Sites ordered for display: by status (STATUS_ORDER), then by the larger of the before
 * and after costs, descending, then file:line.
 * @template {{status: string, before?: any, after?: any, file?: string | null, line?: number | null}} T
 * @param {T[]} sites
 * @returns {T[]}
 */
export function sortCompareSites(sites) {
  const rank = (/** @type {string} */ s) => {
    const i = STATUS_ORDER.indexOf(s);
    return i < 0 ? STATUS_ORDER.length : i;
  };
  return [...sites].sort((a, b) => {
    const r = rank(a.status) - rank(b.status);
    if (r) return r;
    const cost = (/** @type {any} */ side) => sideCost(side) ?? 0;
    const c = Math.max(cost(b.before), cost(b.after)) - Math.max(cost(a.before), cost(a.after));
    if (c) return c;
    const f = String(a.file ?? "").localeCompare(String(b.file ?? ""));
    return f || (a.line ?? 0) - (b.line ?? 0);
  });
}

/**
 * A one-line description of the change of a compared site, e.g.
 * "gone: was costing 1.20 ms/step" / "new: costs 300 µs/step" / "−45 %". The figure is the
 * site's cost (host wait + GPU idle per step) that went away or came, not a predicted
 * saving: the run totals and Hotspots' Saves/step are the replay's predictions, which are
 * smaller. Latent sites (CPU-only runs, no cost) are described by their syncs per step.
 * "–" when a side has no cost per step (`sideCost` null).
 * @param {{status: string, before?: any, after?: any}} site
 * @param {{latent?: boolean}} [opts]
 * @returns {string}
 */
export function changeText(site, opts = {}) {
  if (opts.latent) {
    const b = num(site.before?.per_step);
    const a = num(site.after?.per_step);
    if (site.status === "fixed") return `gone: ${plural(b, "fewer sync", "fewer syncs")} per step`;
    if (site.status === "new") return `new: ${plural(a, "sync")} per step`;
    return `${formatCount(b)} → ${formatCount(a)} per step`;
  }
  const before = sideCost(site.before);
  const after = sideCost(site.after);
  // A side with no per-step figure (an older answer): no change per step to tell.
  if (before === null || after === null) return "–";
  switch (site.status) {
    case "fixed": {
      const text = `gone: was costing ${formatDeltaUs(before).replace(/^\+/, "")}/step`;
      // The cost (wait + idle) overstates what the fix saved where other work fills the
      // gap: the baseline's prediction goes beside it, as the Hotspots view's Saves/step.
      const saving = site.before?.predicted_saving_per_step_us;
      if (typeof saving !== "number" || !Number.isFinite(saving)) return text;
      // The NPU's idle time unread: the host wait alone bounds nothing.
      if (site.before?.gpu_idle_measured === false) return `${text}; saving not predicted`;
      const approx = site.before?.saving_method === "replay" ? "~" : "≤";
      return `${text}; saves ${approx}${formatUs(saving)}/step (predicted)`;
    }
    case "new":
      return `new: costs ${formatDeltaUs(after).replace(/^\+/, "")}/step`;
    default: {
      if (before === 0) return after === 0 ? "no cost either side" : formatDeltaUs(after);
      const rel = (after - before) / before;
      return `${formatDeltaUs(after - before)} (${rel > 0 ? "+" : ""}${formatPct(rel)})`;
    }
  }
}

/**
 * The label of a compared site: `…/demo/cnn.py:95,96` when the row merges the sites of one
 * function, operator and kind at several lines (the `lines` of its newer side, as the CLI
 * names it), `file:line` otherwise, the operator or API when there is no source line.
 * @param {{file?: string | null, line?: number | null, line_exact?: boolean, lines?: number[] | null, before?: any, after?: any, ops?: string[] | null, apis?: string[] | null, cell?: any}} site
 * @returns {string}
 */
export function compareLocation(site) {
  if (!site.file) return siteFallbackLabel(site);
  const side = site.after || site.before || {};
  const lines = Array.isArray(side.lines) && side.lines.length ? side.lines : Array.isArray(site.lines) ? site.lines : [];
  const where = lines.length > 1 ? lines.join(",") : String(site.line ?? lines[0] ?? "?");
  // As Hotspots and the CLI mark it: a line that is not the syncing call's own.
  const mark = site.line_exact === false && site.line !== null && site.line !== undefined ? "*" : "";
  // A row merging a function's sites of one kind: its lines before, where the fix removed
  // some of them (the CLI's row says the same).
  const before = site.after && site.before && Array.isArray(site.before.lines) ? site.before.lines : [];
  const was = before.length && before.join(",") !== lines.join(",") ? ` (before: ${before.join(",")})` : "";
  // A Jupyter cell's code: its notebook and cell, as the report's row names it.
  return `${cellPlace(site.cell, shortPath) ?? shortPath(site.file)}:${where}${mark}${was}`;
}

/** The title of a compared site's `*`: why the line may not be the call's. */
export const COMPARE_INEXACT_TITLE =
  "* not the line of the syncing call: the function's line (the source was not found, or its calls could not be told apart); Hotspots says which";

/**
 * What a step time change of profiled runs leaves out: the profiler's own overhead is in
 * both runs' step times, and more of it where more operators or stacks are recorded.
 */
export const PROFILED_STEP_CAVEAT =
  "Profiled step times include the profiler's overhead: time the steps without the profiler when the difference matters.";

/**
 * A step time change smaller than this fraction of the baseline's mean step is within run
 * to run noise: shown, but coloured as neither better nor worse.
 */
export const STEP_NOISE_FRACTION = 0.02;

/**
 * Headline of a compare: the change of the mean step time, worded for a person. A change
 * within noise (`|change| < noiseFraction × baseStepUs`) is neutral, not good or bad news.
 * @param {number | null | undefined} changeUs step_time_change_us (new − base)
 * @param {{baseStepUs?: number | null, noiseFraction?: number}} [opts]
 * @returns {{text: string, tone: "good" | "bad" | "neutral"}}
 */
export function stepTimeChange(changeUs, opts = {}) {
  if (changeUs === null || changeUs === undefined || !Number.isFinite(changeUs)) {
    return { text: "step time change unknown", tone: "neutral" };
  }
  if (changeUs === 0) return { text: "step time unchanged", tone: "neutral" };
  const faster = changeUs < 0;
  const amount = formatDeltaUs(Math.abs(changeUs)).replace(/^\+/, "");
  const base = num(opts.baseStepUs);
  const rel = base > 0 ? changeUs / base : null;
  const relText = rel === null ? "" : ` (${rel > 0 ? "+" : ""}${formatPct(rel)})`;
  const noise = opts.noiseFraction ?? STEP_NOISE_FRACTION;
  if (rel !== null && Math.abs(rel) < noise) {
    return { text: `step time about the same: ${formatDeltaUs(changeUs)}${relText}, within noise`, tone: "neutral" };
  }
  // "profiled": both runs' steps carry the profiler's overhead, which the fix may change
  // too (the demo's CNN: 4.66 ms faster profiled, 2.47 ms without the profiler).
  return { text: `profiled steps ${faster ? "faster" : "slower"} by ${amount}${relText}`, tone: faster ? "good" : "bad" };
}

/**
 * The compare headline. Real (GPU) sites: the step time change (`stepTimeChange`). Latent
 * sites (both runs CPU-only): neutral, with the fixed/new site counts, because a CPU step
 * time does not measure syncs that cost nothing without a GPU; the note says so.
 * One run CPU-only and the other not (`mixed`): neutral too, by site counts. `npu`: the
 * runs are torch_npu traces without AscendCL calls (the answer's `unmeasured`), not CPU runs.
 * `npuAndGpu`: the mixed runs are an NPU's and a GPU's, not a CPU-only one.
 * @param {{latent: boolean, changeUs: number | null | undefined, baseStepUs?: number | null, counts: Record<string, number>, mixed?: boolean, npu?: boolean, npuAndGpu?: boolean}} args
 * @returns {{text: string, tone: "good" | "bad" | "neutral", note: string | null, caveat?: string | null}}
 */
export function compareHeadline({ latent, changeUs, baseStepUs, counts, mixed = false, npu = false, npuAndGpu = false }) {
  if (mixed) {
    // One run on a GPU, the other CPU-only (or on an NPU): their step times measure
    // different machines.
    const change = Number.isFinite(changeUs) && changeUs ? ` (${formatDeltaUs(/** @type {number} */ (changeUs))} here)` : "";
    return {
      text: `${plural(counts.fixed ?? 0, "sync site")} fixed, ${formatCount(counts.new ?? 0)} new`,
      tone: "neutral",
      note: `${npuAndGpu ? "An NPU run and a GPU run" : "A CPU-only run and a GPU run"}: their step times do not compare${change}. The fixed and new sites are what counts.`,
    };
  }
  if (!latent) {
    const change = stepTimeChange(changeUs, { baseStepUs });
    // A profiled step time is not the program's: say so beside a change it would judge.
    return { ...change, note: null, caveat: change.tone === "neutral" && !changeUs ? null : PROFILED_STEP_CAVEAT };
  }
  const fixed = counts.fixed ?? 0;
  const added = counts.new ?? 0;
  const sites = (/** @type {number} */ n) => `${formatCount(n)} latent sync site${n === 1 ? "" : "s"}`;
  const change = Number.isFinite(changeUs) && changeUs ? ` (${formatDeltaUs(/** @type {number} */ (changeUs))} here)` : "";
  return {
    text: `${sites(fixed)} fixed, ${formatCount(added)} new`,
    tone: "neutral",
    note: npu
      ? `These NPU traces recorded no AscendCL call (torch_npu's default profiler level), so no wait was measured: the step time change${change} is not the syncs'. The fixed and new sites are what counts.`
      : `CPU step time does not measure these syncs: without a GPU they cost nothing, so the ` +
        `step time change${change} is CPU timing noise. The fixed and new sites are what counts.`,
  };
}

/**
 * "in place of the syncs at line 122 (...)" for a new row that took the place of its
 * function's fixed or fewer syncs (compare.py's `replaces`: not a regression), else null.
 * As the CLI's `replaces_text`.
 * @param {{replaces?: string[] | null}} site
 * @param {{key?: string, before?: any}[]} rows the compared rows the keys are among
 * @returns {string | null}
 */
export function replacesText(site, rows) {
  const keys = new Set(site.replaces || []);
  if (!keys.size) return null;
  const lines = [...new Set(rows.filter((r) => keys.has(/** @type {string} */ (r.key))).flatMap((r) => (r.before?.lines || []).filter((/** @type {any} */ l) => l !== null && l !== undefined)))].sort((a, b) => a - b);
  const where = lines.length ? ` at line${lines.length !== 1 ? "s" : ""} ${lines.join(", ")}` : "";
  return `in place of the syncs${where} (fewer syncs in this function than before)`;
}

/**
 * A compared row's status tone: a new row in place of its function's fixed syncs is no bad
 * news (compare.py does not gate it).
 * @param {{status: string, replaces?: string[] | null}} site
 * @returns {"good" | "bad" | "neutral"}
 */
export function rowTone(site) {
  if (site.status === "new" && (site.replaces || []).length) return "neutral";
  return /** @type {any} */ (STATUS_TONE)[site.status] ?? "neutral";
}

/**
 * Tone of a status count badge: a status's colour only when there is something to count;
 * "0 worse" is no bad news.
 * @param {string} status
 * @param {number} count
 * @returns {"good" | "bad" | "neutral"}
 */
export function countTone(status, count) {
  if (!count) return "neutral";
  return /** @type {any} */ (STATUS_TONE)[status] ?? "neutral";
}

/**
 * How a compare's sites are measured, from the `compare` route's answer. Both runs CPU-only:
 * only `latent_sites`, by count per step. One run CPU-only (compare.py then sets `note`):
 * both runs' sites are in `sites`, compared by count per step too, because a CPU-only trace
 * measures no wait. Otherwise `sites` by cost per step.
 * @param {any} data
 * @returns {{sites: any[], latentOnly: boolean, byCount: boolean, note: string | null}}
 */
export function compareBasis(data) {
  const sites = Array.isArray(data?.sites) ? data.sites : [];
  const latentSites = Array.isArray(data?.latent_sites) ? data.latent_sites : [];
  const latentOnly = sites.length === 0 && latentSites.length > 0;
  const note = typeof data?.note === "string" && data.note.trim() ? data.note.trim() : null;
  return { sites: latentOnly ? latentSites : sites, latentOnly, byCount: latentOnly || note !== null, note };
}

/** Words in a run name that say which side of a change it is, left out to pair runs. */
const SIDE_WORDS = /(^|[-_. /])(baseline|base|before|old|optimi[sz]ed|opt|after|new|fixed)(?=$|[-_. /])/gi;

/**
 * A run's name without its side words: the runs of one change share it. A run of
 * `tensorboard_trace_handler`'s layout (`seg_baseline/plugins/profile/2026_11_26_01_14_11`)
 * is named by its folder: each run's profile folder has its own time.
 * @param {string} run
 */
const stem = (run) =>
  run
    .replace(/\/plugins\/profile\/[^/]*$/, "")
    .replace(SIDE_WORDS, "$1")
    .replace(/[-_. ]+$/, "")
    .toLowerCase();

/** @param {string} run */
const isBaseline = (run) => /baseline/i.test(run);

/**
 * The run to compare `current` with when the user has not picked one: a run named
 * `*baseline*` (the one whose name matches best once the side words are left out: the
 * baseline of `seg_optimized` is `seg_baseline`, not `cnn_baseline`), else the only other
 * run, else the only run with the same name apart from its side word; null when none is
 * clear, or when `current` is itself the baseline. Never `current`.
 * @param {string[]} runs
 * @param {string | null} current
 * @returns {string | null}
 */
export function defaultBaseline(runs, current) {
  const others = runs.filter((r) => r !== current);
  if (!others.length) return null;
  const mine = stem(current || "");
  const sameStem = others.filter((r) => stem(r) === mine);
  if (current && isBaseline(current)) return null;
  const baselines = others.filter(isBaseline);
  const pick = baselines.filter((r) => stem(r) === mine);
  if (pick.length) return pick[0];
  if (baselines.length === 1 && !sameStem.length) return baselines[0];
  if (others.length === 1) return others[0];
  return sameStem.length === 1 ? sameStem[0] : null;
}

/**
 * The run to compare with `current` when `current` is itself a baseline: the only other
 * run of the same name apart from its side word (`gpu_cnn_optimized` for
 * `gpu_cnn_baseline`), which is not a baseline; null when there is not exactly one. The
 * compare view opened on a baseline offers it, instead of only "Pick a baseline…".
 * @param {string[]} runs
 * @param {string | null} current
 * @returns {string | null}
 */
export function counterpartOf(runs, current) {
  if (!current || !isBaseline(current)) return null;
  const mine = stem(current);
  const found = runs.filter((r) => r !== current && !isBaseline(r) && stem(r) === mine);
  return found.length === 1 ? found[0] : null;
}

/**
 * The baseline the compare view of run `run` uses: the one the view names when it is
 * another listed run, else the default (`defaultBaseline`, null when there is none to
 * guess). `missing` is the named baseline when the runs list holds runs but not that one
 * (renamed, removed, a typo in a link), `self` the named baseline when it is `run` itself
 * (picked as the run while it was the baseline, or a link naming both): a run compared with
 * itself shows nothing. Either is said by the view, and its URL names the baseline used
 * instead (none when there is no default), never the one not used.
 * @param {string[]} runs the listed run names
 * @param {string | null} run the run compared
 * @param {string | null} named the baseline the view state names
 * @param {string | null} [shown] the baseline compared until now (the default when none is
 *   named): picked as the run, it is said as a named one is
 * @returns {{base: string | null, missing: string | null, self: string | null}}
 */
export function pickBaseline(runs, run, named, shown = null) {
  if (named && named !== run && runs.includes(named)) return { base: named, missing: null, self: null };
  const missing = named !== null && runs.length > 0 && !runs.includes(named) ? named : null;
  // The baseline compared (named, or the default shown when none is named) picked as the run.
  const was = named ?? shown;
  const self = was !== null && was === run && runs.includes(was) ? was : null;
  return { base: defaultBaseline(runs, run), missing, self };
}

/**
 * What the compare view says when the run compared is named as its own baseline
 * (`pickBaseline`'s `self`), and what it compares instead (`base`, null for nothing).
 * @param {string} run
 * @param {string | null} base
 * @returns {string}
 */
export function selfBaselineText(run, base) {
  const why = `Run "${run}" cannot be its own baseline: a run compared with itself shows nothing.`;
  return base ? `${why} Comparing with run "${base}" instead: pick another run as baseline to change it.` : `${why} Pick another run as baseline.`;
}

/**
 * The compare view's summary of the two runs, in two groups whose heading gives the unit of
 * every row under it, so that no row reads as per step when it is a total: the means per
 * profiled step, then the totals over the whole profiled run (they grow with the number of
 * steps profiled, which is the group's first row). A CPU-only side measures no wait: its
 * cost rows read "–", never 0. The saving row (the baseline's predicted saving per step
 * beside the one measured) only when both are known and both runs are on a GPU.
 * @param {{base: any, new: any, predictedUs?: number | null, measuredUs?: number | null, cpuBase?: boolean, cpuNew?: boolean, compared?: any, idleOn?: string, mixed?: boolean}} args
 *   `base`, `new`: the `compare` answer's summaries; `predictedUs`, `measuredUs`: its
 *   `predicted_saving_us` and `measured_saving_us`; `compared`: the whole answer (what
 *   was fixed, for the saving row's words); `idleOn`: as `compareIdleOn` says it; `mixed`:
 *   runs whose step times do not compare (sites by count), with no saving row
 * @returns {{unit: "step" | "run", title: string, rows: {id: string, label: string, before: string, after: string}[]}[]}
 */
export function summaryRows({ base, new: after, predictedUs = null, measuredUs = null, cpuBase = false, cpuNew = false, compared = null, idleOn = "GPU", mixed = false }) {
  const b = base || {};
  const n = after || {};
  /** A figure of each side, "–" for a CPU-only side where `cost` (it measures no wait). */
  const pair = (/** @type {(s: any) => string} */ f, cost = true) => ({ before: cost && cpuBase ? "–" : f(b), after: cost && cpuNew ? "–" : f(n) });
  const stepTime = (/** @type {any} */ s) => formatUs(s.mean_wall_step_time_us || s.mean_step_time_us);
  const perStep = [
    { id: "step-time", label: "step time", ...pair(stepTime, false) },
    predictedUs != null && measuredUs != null && !cpuBase && !cpuNew && !mixed
      ? {
          id: "saving",
          label: "saving",
          // One statement across both columns: under them, "predicted" and "measured" read
          // as each run's own saving (a job review).
          ...savingTexts(b, predictedUs, measuredUs, compared),
        }
      : null,
    { id: "syncs", label: "syncs", ...pair((s) => formatCount(s.syncs_per_step)) },
    b.latent_count || n.latent_count || cpuBase || cpuNew ? { id: "latent", label: "latent syncs", ...pair((s) => formatCount(latentPerStep(s)), false) } : null,
  ];
  const wholeRun = [
    { id: "steps", label: "steps profiled", ...pair((s) => formatCount(s.step_count), false) },
    { id: "host-wait", label: "host wait", ...pair((s) => formatUs(s.host_wait_us)) },
    { id: "gpu-idle", label: `${idleOn} idle after syncs`, ...pair((s) => (s.gpu_idle_measured === false ? "not measured" : formatUs(s.gpu_idle_us))) },
    { id: "share", label: "share of step time (wait + idle)", ...pair((s) => formatPct(s.share_of_step)) },
  ];
  return [
    { unit: "step", title: "Per step (mean of the profiled steps)", rows: perStep.filter((r) => r !== null) },
    { unit: "run", title: "Whole run (all profiled steps)", rows: wholeRun },
  ];
}

/**
 * The saving row's words, as the CLI's "saving" line: the baseline's prediction for what
 * the new run fixed (the all-syncs figure only where every site was fixed: beside a fix of
 * one site of several it read as a prediction the fix missed), and the measured change,
 * with the median steps' where a few profiled steps' mean and median disagree.
 * @param {any} b the baseline's summary
 * @param {number} predictedUs `predicted_saving_us`: fixing every sync
 * @param {number} measuredUs `measured_saving_us`
 * @param {{predicted_saving_of_fixed_us?: number | null, every_site_fixed?: boolean, measured_saving_median_us?: number | null, counts?: any} | null} compared
 *   the rest of the `compare` answer (an older server's has none of these: the all-syncs figure)
 * @returns {{span: string, before: string, after: string}}
 */
export function savingTexts(b, predictedUs, measuredUs, compared) {
  const approx = b.saving_method === "replay" ? "~" : "≤";
  const every = `${approx}${formatUs(predictedUs)}`;
  const rows = compared?.sites || [];
  const what = fixedWhat(rows);
  const units = rows.filter((/** @type {any} */ r) => r.status === "fixed").length + rows.reduce((/** @type {number} */ n, /** @type {any} */ r) => n + linesLost(r), 0);
  const ofFixed = compared?.predicted_saving_of_fixed_us;
  let predicted = `predicted ${every} by the baseline's replay`;
  let before = `predicted ${every}`;
  if (compared && "every_site_fixed" in compared) {
    if (!rows.some((/** @type {any} */ r) => r.before)) {
      predicted = "the baseline had no sync to fix";
      before = "nothing to fix";
    } else if (compared.every_site_fixed) {
      predicted = `predicted ${every} by the baseline's replay (every baseline site fixed)`;
    } else if (what && ofFixed !== null && ofFixed !== undefined) {
      const own = units === 1 ? "its own prediction" : "each one's own prediction, summed";
      predicted = `predicted ${approx}${formatUs(ofFixed)} by the baseline's replay for what was fixed (${what}; ${own}; every baseline sync: ${every})`;
      before = `predicted ${approx}${formatUs(ofFixed)} for what was fixed`;
    } else if (what) {
      // Fixed, but a report without per-site predictions: only the all-syncs figure.
      predicted = `${what} fixed, without a prediction of its own (every baseline sync: ${every})`;
      before = "no prediction of its own";
    } else {
      predicted = `no site fixed (every baseline sync fixed: predicted ${every})`;
      before = "no site fixed";
    }
  }
  if (b.gpu_idle_measured === false) {
    // As the CLI: no prediction set beside the measure where the NPU's idle is unread.
    predicted = "not predicted (no task of the NPU's own in the trace)";
    before = "not predicted";
  }
  const median = compared?.measured_saving_median_us;
  const n = compared?.new || {};
  const step = Math.max(b.mean_wall_step_time_us || b.mean_step_time_us || 0, n.mean_wall_step_time_us || n.mean_step_time_us || 0);
  // As the CLI's rule (`_mean_and_median_disagree`): by a quarter of the larger and a
  // fiftieth of the longer of the two runs' steps, the same whichever is the baseline.
  const gap = median !== null && median !== undefined ? Math.abs(median - measuredUs) : 0;
  const disagree = gap > 0.25 * Math.max(Math.abs(measuredUs), Math.abs(median ?? 0)) && gap > 0.02 * step;
  const medianText = disagree ? ` (mean steps; from the median steps ${formatUs(/** @type {number} */ (median))})` : "";
  return { span: `${predicted}; measured ${formatUs(measuredUs)} between the runs${medianText}`, before, after: `measured ${formatUs(measuredUs)}${medianText}` };
}

/**
 * How many lines a compared row on both sides lost (`lines_fixed_count`; an answer without
 * it: the lines it names).
 * @param {any} row
 * @returns {number}
 */
function linesLost(row) {
  return Number(row.lines_fixed_count || (row.lines_fixed || []).length || 0);
}

/**
 * What a comparison fixed, in words, as the CLI says it: `1 site`, `2 lines of a site still
 * there`, `1 site and 1 line of a site still there`; "" when nothing.
 * @param {any[]} rows the `compare` answer's sites
 * @returns {string}
 */
export function fixedWhat(rows) {
  const sites = rows.filter((r) => r.status === "fixed").length;
  const merged = rows.filter((r) => linesLost(r));
  const lines = merged.reduce((n, r) => n + linesLost(r), 0);
  const parts = [];
  if (sites) parts.push(`${sites} site${sites === 1 ? "" : "s"}`);
  if (lines) parts.push(`${lines} line${lines === 1 ? "" : "s"} of ${merged.length === 1 ? "a site" : "sites"} still there`);
  return parts.join(" and ");
}

/**
 * What idled after the syncs of two compared runs, in their own word: "NPU" when both are
 * torch_npu's, "device" when one is, else "GPU".
 * @param {any} baseSummary the baseline's `summary` answer
 * @param {any} newSummary this run's
 * @returns {string}
 */
export function compareIdleOn(baseSummary, newSummary) {
  const npu = [baseSummary, newSummary].filter((s) => s?.device === "npu").length;
  return npu === 2 ? "NPU" : npu === 1 ? "device" : "GPU";
}

/** How a compare table's header says a column's unit (as `summaryRows`' headings do). */
export const UNIT_WORDS = Object.freeze({ step: "per step", run: "whole run" });

/**
 * The compared sites table's columns. Each figure's header says its unit on a line under its
 * label, in the words of the summary's headings (`summaryRows`): the syncs counted over the
 * whole run (they grow with the steps profiled) beside the cost per step (host wait + GPU
 * idle after, the mean of the profiled steps: runs of different lengths compare fairly) and
 * its change, or, sites compared by count (`byCount`: a CPU-only run), the syncs per step.
 * @param {boolean} byCount
 * @param {string} [idleOn] what idled after the syncs: "GPU", "NPU" (both runs torch_npu's) or "device"
 * @returns {{id: string, label: string, unit: "step" | "run" | null, title: string | null, cls: string | null}[]}
 */
export function compareColumns(byCount, idleOn = "GPU") {
  const perStep = byCount ? "syncs per step (mean of the profiled steps)" : `host wait + ${idleOn} idle after the syncs, per step (mean of the profiled steps)`;
  const wholeRun = "syncs over the whole run (all profiled steps)";
  /** @param {string} id @param {string} label @param {string | null} [cls] */
  const plain = (id, label, cls = null) => ({ id, label, unit: null, title: null, cls });
  return [
    plain("status", "Status"),
    plain("location", "Location"),
    plain("func", "Function", "col-func"),
    plain("kind", "Kind", "col-kind"),
    { id: "count-before", label: "Syncs before", unit: "run", title: `Baseline: ${wholeRun}`, cls: "num col-count" },
    { id: "count-after", label: "Syncs after", unit: "run", title: `This run: ${wholeRun}`, cls: "num col-count" },
    { id: "cost-before", label: byCount ? "Syncs before" : "Cost before", unit: "step", title: `Baseline: ${perStep}`, cls: "num col-cost" },
    { id: "cost-after", label: byCount ? "Syncs after" : "Cost after", unit: "step", title: `This run: ${perStep}`, cls: "num col-cost" },
    {
      id: "change",
      label: "Change",
      unit: "step",
      title: byCount ? "syncs per step, baseline → this run" : `the cost per step that went away, came or changed (host wait + ${idleOn} idle after, mean of the profiled steps)`,
      cls: "col-change",
    },
  ];
}

/**
 * Latent syncs per step of one side's summary.
 * @param {any} summary
 */
function latentPerStep(summary) {
  const steps = summary?.step_count || 0;
  const count = summary?.latent_count || 0;
  return steps ? count / steps : count;
}
