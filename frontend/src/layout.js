// @ts-check
/**
 * Geometry of the two SVG drawings (per-step chart, sync timeline). Pure: the DOM layer
 * only turns these numbers into elements, so the maths is unit-tested in node.
 */
import { spanLabels } from "./format.js";

/**
 * @typedef {{step: number, step_time_us?: number, sync_count: number, host_wait_us: number,
 *            gpu_idle_us: number}} StepStat
 */

/**
 * Layout of the per-step chart: one stacked bar per step (host wait at the bottom, GPU idle
 * on top, both on the left axis in µs) and the sync count as a line on the right axis.
 * `groups` (sizes, summing to the number of steps) splits the axis: a gap between groups,
 * a count line per group and a span per group for its label (steps of different workers
 * never share an axis position).
 * @param {StepStat[]} steps
 * @param {{width: number, height: number, pad?: {l: number, r: number, t: number, b: number}, groups?: number[]}} box
 */
export function layoutStepChart(steps, box) {
  const pad = box.pad ?? { l: 56, r: 40, t: 10, b: 24 };
  const plotW = Math.max(10, box.width - pad.l - pad.r);
  const plotH = Math.max(10, box.height - pad.t - pad.b);
  const n = steps.length;
  const groups = box.groups && box.groups.length > 1 ? box.groups : [n];
  // Step i's slot on the axis: one empty slot between groups.
  const slotOf = [];
  let slot = 0;
  groups.forEach((size, g) => {
    if (g) slot += 1;
    for (let k = 0; k < size; k++) slotOf.push(slot++);
  });
  const slots = Math.max(1, slot);
  const maxUs = niceMax(Math.max(0, ...steps.map((s) => (s.host_wait_us || 0) + (s.gpu_idle_us || 0))));
  const maxCount = niceMax(Math.max(0, ...steps.map((s) => s.sync_count || 0)), { integer: true });
  const band = n ? plotW / slots : plotW;
  const barW = Math.max(1, band * (n > 60 ? 0.9 : 0.7));
  const baseY = pad.t + plotH;
  const bars = steps.map((s, i) => {
    const left = pad.l + (slotOf[i] ?? i) * band;
    const x = left + (band - barW) / 2;
    const waitH = maxUs ? ((s.host_wait_us || 0) / maxUs) * plotH : 0;
    const idleH = maxUs ? ((s.gpu_idle_us || 0) / maxUs) * plotH : 0;
    return {
      step: s.step,
      x,
      w: barW,
      band: { x: left, w: band },
      waitY: baseY - waitH,
      waitH,
      idleY: baseY - waitH - idleH,
      idleH,
    };
  });
  const points = steps.map((s, i) => ({
    step: s.step,
    x: pad.l + (slotOf[i] ?? i) * band + band / 2,
    y: maxCount ? baseY - ((s.sync_count || 0) / maxCount) * plotH : baseY,
    count: s.sync_count || 0,
  }));
  const lines = [];
  const spans = [];
  let first = 0;
  for (const size of groups) {
    const part = points.slice(first, first + size);
    lines.push(part.map((p) => `${round(p.x)},${round(p.y)}`).join(" "));
    if (size) spans.push({ x: bars[first].band.x, w: bars[first + size - 1].band.x + band - bars[first].band.x, first, size });
    first += size;
  }
  return {
    pad,
    plotW,
    plotH,
    baseY,
    maxUs,
    maxCount,
    bars,
    points,
    line: lines.join(" "),
    lines,
    spans,
    // Label every k-th step so labels never overlap (about 40 px per label).
    labelEvery: Math.max(1, Math.ceil(slots / Math.max(1, Math.floor(plotW / 40)))),
  };
}

/**
 * Whether bar `i` of a step chart gets an axis label: every `every`-th bar counted from the
 * first bar of its own worker's group (`spans` from `layoutStepChart`), so that each worker's
 * axis starts at its own first step, whatever the size of the groups before it.
 * @param {number} i
 * @param {{first: number, size: number}[]} spans
 * @param {number} every
 */
export function hasAxisLabel(i, spans, every) {
  const sp = spans.find((x) => i >= x.first && i < x.first + x.size);
  return (i - (sp ? sp.first : 0)) % Math.max(1, every) === 0;
}

/**
 * The steps of a selection grouped per trace file (a worker, or a worker's span): each
 * trace counts its own steps, so steps of different workers must not share an axis.
 * `traces` are the summary's (`path`, `worker`, `span`), in the order to show.
 * @template {{trace?: string | null}} T
 * @param {T[]} steps
 * @param {{path: string, worker: string, span?: string | null}[]} traces
 * @returns {{worker: string | null, span: string | null, label: string, steps: T[]}[]}
 */
export function groupSteps(steps, traces) {
  const order = new Map((traces || []).map((t, i) => [t.path, i]));
  const spansOf = new Map();
  for (const t of traces || []) spansOf.set(t.worker, (spansOf.get(t.worker) || 0) + 1);
  // A span that is an epoch-millisecond time reads as a date-time, as in the span selector.
  const spanNames = spanLabels((traces || []).map((t) => t.span ?? null));
  /** @type {Map<string, T[]>} */
  const byTrace = new Map();
  for (const s of steps) {
    const key = s.trace ?? "";
    if (!byTrace.has(key)) byTrace.set(key, []);
    byTrace.get(key)?.push(s);
  }
  const keys = [...byTrace.keys()].sort((a, b) => (order.get(a) ?? 1e9) - (order.get(b) ?? 1e9));
  return keys.map((key) => {
    const t = (traces || []).find((x) => x.path === key);
    const worker = t ? t.worker : null;
    const span = t && t.span !== undefined ? t.span : null;
    const spanName = span !== null ? spanNames.get(String(span)) ?? span : null;
    const label = worker === null ? key : spansOf.get(worker) > 1 && span !== null ? `${worker} · ${spanName}` : worker;
    return { worker, span, label, steps: byTrace.get(key) || [] };
  });
}

/** About how many steps of a nice size an axis from 0 to its maximum is cut into. */
export const AXIS_STEPS = 10;

/** Slack for floating-point division (0.7 / 0.1 is 6.999…, 0.3 / 0.1 is 2.999…). */
const EPS = 1e-9;

/**
 * A nice step: the smallest of 1, 2, 2.5 or 5 times a power of ten that is >= v (> 0).
 * @param {number} v
 */
export function niceStep(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5]) if (m * p >= v * (1 - EPS)) return m * p;
  return 10 * p;
}

/**
 * A "nice" axis maximum just above v (0 stays 0): the first multiple of a nice step
 * (`niceStep` of about a tenth of v) at or above v, so the tallest bar reaches at least
 * five sixths of the axis (1,010 µs -> 1,200 µs, 5,100 µs -> 6,000 µs), never half of it as
 * rounding v itself up to 1, 2, 2.5 or 5 times a power of ten did (1,010 µs -> 2,000 µs).
 * `integer`: a whole step at least (a count's axis).
 * @param {number} v
 * @param {{integer?: boolean}} [opts]
 */
export function niceMax(v, opts = {}) {
  if (!(v > 0)) return 0;
  let step = niceStep(v / AXIS_STEPS);
  if (opts.integer) step = Math.max(1, step);
  const n = Math.max(1, Math.ceil((v / step) * (1 - EPS)));
  // Rounded so that 7 x 0.1 is 0.7, not 0.7000000000000001.
  return Number((n * step).toPrecision(12));
}

/** @param {number} v */
function round(v) {
  return Math.round(v * 10) / 10;
}

/**
 * @typedef {{window: [number, number], sync: {ts_us: number, end_us: number, idle_end_us?: number | null},
 *   host: {name: string, cat: string, ts_us: number, dur_us: number, depth: number}[],
 *   device: {lane: string, name: string, cat: string, ts_us: number, dur_us: number}[]}} SyncContext
 */

/** The narrowest a GPU bubble is drawn, in px: a thinner one would not show. */
export const MIN_BUBBLE_PX = 3;
/** Below this width (px) a bubble's label gets a leader line down to it. */
export const THIN_BUBBLE_PX = 8;
/** The most host rows the sync timeline draws, however deep the sync's call sits. */
export const MAX_HOST_ROWS = 10;

/**
 * Layout of the sync timeline: host-thread rows by nesting depth, then one row per device
 * lane; the host wait (sync start..end) and the GPU bubble (end..idle_end) as bands.
 * @param {SyncContext | null | undefined} ctx
 * @param {{width: number, labelW?: number, rowH?: number, maxDepth?: number, top?: number, syncApis?: string[]}} box
 *   `top`: where the first row starts (room above it for the band labels); `syncApis`: the
 *   sync's runtime calls (its row is always drawn)
 */
export function layoutTimeline(ctx, box) {
  if (!ctx || !Array.isArray(ctx.window) || !(ctx.window[1] > ctx.window[0])) return null;
  const labelW = box.labelW ?? 120;
  const rowH = box.rowH ?? 16;
  const top = box.top ?? 18;
  const maxDepth = box.maxDepth ?? 4;
  const [t0, t1] = ctx.window;
  const plotW = Math.max(10, box.width - labelW - 8);
  const x = (/** @type {number} */ t) =>
    labelW + ((Math.min(t1, Math.max(t0, t)) - t0) / (t1 - t0)) * plotW;
  /** @param {{ts_us: number, dur_us: number}} e */
  const span = (e) => {
    const a = x(e.ts_us);
    const b = x(e.ts_us + Math.max(0, e.dur_us || 0));
    return { x: a, w: Math.max(1, b - a) };
  };
  const rows = [];
  const host = (ctx.host || []).filter((e) => e.ts_us + (e.dur_us || 0) >= t0 && e.ts_us <= t1);
  // Rows down to `maxDepth`, and always down to the sync's own call (an event of the sync's
  // APIs in its span, else the deepest spanning it): in a trace with stacks the call of
  // `loss.item()` sits 4-6 levels down (step > function > aten::item >
  // _local_scalar_dense > cudaStreamSynchronize), and the rows that matter were cut.
  const s = ctx.sync;
  const apis = box.syncApis || [];
  const end = (/** @type {{ts_us: number, dur_us: number}} */ e) => e.ts_us + (e.dur_us || 0);
  const syncCalls = host.filter((e) => apis.includes(e.name) && e.ts_us <= s.end_us + 1e-3 && end(e) >= s.ts_us - 1e-3);
  const spanning = host.filter((e) => e.ts_us <= s.ts_us + 1e-3 && end(e) >= s.end_us - 1e-3);
  const syncDepth = Math.max(-1, ...(syncCalls.length ? syncCalls : spanning).map((e) => e.depth || 0));
  const deepest = Math.max(0, ...host.map((e) => (e.depth || 0) + 1));
  const depths = Math.min(deepest, Math.max(maxDepth, syncDepth + 1), MAX_HOST_ROWS);
  for (let d = 0; d < depths; d++) {
    rows.push({
      label: d === 0 ? "host thread" : "",
      group: "host",
      items: host.filter((e) => (e.depth || 0) === d).map((e) => ({ ...span(e), name: e.name, cat: e.cat })),
    });
  }
  /** @type {Map<string, any[]>} */
  const lanes = new Map();
  for (const e of ctx.device || []) {
    if (e.ts_us + (e.dur_us || 0) < t0 || e.ts_us > t1) continue;
    // CUPTI's sync records (a stream waiting through the host's whole wait) get a row of
    // their own under their stream's: on it they were drawn over its kernels and copies.
    const lane = e.cat === "cuda_sync" ? `${e.lane} syncs` : e.lane;
    if (!lanes.has(lane)) lanes.set(lane, []);
    lanes.get(lane)?.push({ ...span(e), name: e.name, cat: e.cat });
  }
  for (const lane of [...lanes.keys()].sort((a, b) => a.localeCompare(b, "en", { numeric: true }))) {
    rows.push({ label: lane, group: "device", items: lanes.get(lane) || [] });
  }
  rows.forEach((r, i) => Object.assign(r, { y: top + i * (rowH + 4), h: rowH }));
  const hostRows = rows.filter((r) => r.group === "host").length;
  const wait = { x: x(s.ts_us), w: Math.max(2, x(s.end_us) - x(s.ts_us)) };
  const idleEnd = s.idle_end_us ?? null;
  // The GPU bubble after the sync. Narrower than a few pixels (a short bubble after a long
  // wait) it is drawn at a visible width, kept inside the plot, and marked `thin` (its label
  // gets a leader to it); running past the window it is `clipped`; starting past it, it is
  // not drawn at all (`bubbleBeyond`), and nothing may label it as if it were.
  const right = labelW + plotW;
  /** @type {{x: number, w: number, thin: boolean, clipped: boolean} | null} */
  let bubble = null;
  let bubbleBeyond = false;
  if (idleEnd !== null && idleEnd > s.end_us) {
    if (s.end_us >= t1) {
      bubbleBeyond = true;
    } else {
      const a = x(s.end_us);
      const raw = x(idleEnd) - a;
      const w = Math.max(MIN_BUBBLE_PX, raw);
      bubble = { x: Math.max(labelW, Math.min(a, right - w)), w, thin: raw < THIN_BUBBLE_PX, clipped: idleEnd > t1 };
    }
  }
  return {
    labelW,
    plotW,
    rows,
    hostRows,
    wait,
    bubble,
    bubbleBeyond,
    top,
    height: top + rows.length * (rowH + 4) + 20,
    ticks: [0, 0.25, 0.5, 0.75, 1].map((f) => ({ x: labelW + f * plotW, us: (t1 - t0) * f })),
  };
}

/** Width of a character of the drawings' 10 px labels, a little generous. */
export const LABEL_CHAR_PX = 6;

/** The most characters of a worker's name an axis label shows. */
export const AXIS_LABEL_CHARS = 12;

/**
 * Labels under bars `bandW` px apart that do not collide: every `every`-th bar is labelled,
 * with room for the longest label (at most `AXIS_LABEL_CHARS` characters of it) and a gap.
 * @param {number} bandW the width of one bar's band, px
 * @param {string[]} labels
 * @param {number} [charPx]
 * @returns {{every: number, chars: number}}
 */
export function thinAxisLabels(bandW, labels, charPx = LABEL_CHAR_PX) {
  const longest = labels.reduce((n, l) => Math.max(n, String(l).length), 0);
  const chars = Math.max(3, Math.min(AXIS_LABEL_CHARS, longest));
  const every = Math.max(1, Math.ceil((chars * charPx + 4) / Math.max(0.01, bandW)));
  return { every, chars };
}

/**
 * Where the labels of the wait band and the GPU bubble go: above the drawing, each near its
 * band, never over the other or past the edge; the bubble's label drops to a second line
 * when both do not fit on one. Returns the labels and where the rows can start.
 * @param {{wait: {x: number, w: number}, bubble: {x: number, w: number} | null, width: number,
 *          waitText: string, idleText: string | null, charPx?: number}} args
 * @returns {{labels: {text: string, x: number, y: number, anchor: "start" | "end"}[], top: number}}
 */
export function placeBandLabels({ wait, bubble, width, waitText, idleText, charPx = LABEL_CHAR_PX }) {
  const line = 12;
  /** @param {string} text @param {number} x */
  const span = (text, x) => {
    const w = text.length * charPx;
    return x + w <= width ? { x, anchor: /** @type {const} */ ("start"), a: x, b: x + w } : { x: width, anchor: /** @type {const} */ ("end"), a: width - w, b: width };
  };
  const first = span(waitText, Math.max(0, wait.x));
  const labels = [{ text: waitText, x: first.x, y: line - 2, anchor: first.anchor }];
  if (!bubble || !idleText) return { labels, top: line + 6 };
  const second = span(idleText, Math.max(bubble.x, first.b + charPx));
  // On the wait label's line only when it neither touches it nor drifts away from its band.
  const clash = second.a < first.b + charPx || second.a > bubble.x + bubble.w + 8 * charPx;
  if (!clash) {
    labels.push({ text: idleText, x: second.x, y: line - 2, anchor: second.anchor });
    return { labels, top: line + 6 };
  }
  const own = span(idleText, Math.max(0, bubble.x));
  labels.push({ text: idleText, x: own.x, y: 2 * line - 2, anchor: own.anchor });
  return { labels, top: 2 * line + 6 };
}

/**
 * The text that fits inside a bar of `widthPx`: the name without its namespace
 * (`aten::nonzero` -> `nonzero`, `autograd::engine::evaluate_function: IndexBackward0` ->
 * `IndexBackward0`), cut with an ellipsis, or "" when fewer than 6 characters would fit.
 * @param {string} name
 * @param {number} widthPx
 * @param {number} [charPx]
 * @returns {string}
 */
export function barLabel(name, widthPx, charPx = LABEL_CHAR_PX) {
  const room = Math.floor((widthPx - 6) / charPx);
  if (!name || room < 6) return "";
  if (name.length <= room) return name;
  const short = name.replace(/^.*:\s+/, "").replace(/^[A-Za-z_][\w.]*::/, "");
  if (short.length <= room) return short;
  return short.slice(0, room - 1) + "\u2026";
}

/**
 * The bar a key moves to in the per-step chart (one Tab stop, arrow keys between bars):
 * right/down the next, left/up the previous, Home/End the ends, PageUp/PageDown ten bars;
 * null for any other key.
 * @param {number} current index of the focused bar
 * @param {string} key KeyboardEvent.key
 * @param {number} length number of bars
 * @returns {number | null}
 */
export function nextBarIndex(current, key, length) {
  if (length <= 0) return null;
  const last = length - 1;
  const at = Math.min(last, Math.max(0, current));
  switch (key) {
    case "ArrowRight":
    case "ArrowDown":
      return Math.min(last, at + 1);
    case "ArrowLeft":
    case "ArrowUp":
      return Math.max(0, at - 1);
    case "Home":
      return 0;
    case "End":
      return last;
    case "PageDown":
      return Math.min(last, at + 10);
    case "PageUp":
      return Math.max(0, at - 10);
    default:
      return null;
  }
}

/** The narrowest band a bar of the per-step chart gets, in px: more steps than bars of this
 * width fit in the plot are drawn in bins of consecutive steps. */
export const MIN_BAR_PX = 4;

/**
 * How many consecutive steps one bar of the per-step chart holds: 1 while a bar per step
 * (and an empty slot between groups) fits at `minPx` or wider, else the fewest that make
 * every bar fit, each group's last bin possibly short. So the chart never draws more than
 * `plotW / minPx` bars, whatever the number of steps.
 * @param {number} steps the number of steps, all groups together
 * @param {number} plotW the plot's width, px
 * @param {number} [groups] the number of groups (workers) drawn side by side
 * @param {number} [minPx]
 * @returns {number}
 */
export function stepsPerBar(steps, plotW, groups = 1, minPx = MIN_BAR_PX) {
  const slots = Math.max(1, Math.floor(plotW / minPx));
  const gaps = Math.max(0, groups - 1);
  if (steps + gaps <= slots) return 1;
  // Each group's last bin can be short: room for one more bar per group.
  return Math.ceil(steps / Math.max(1, slots - gaps - groups));
}

/**
 * @template {StepStat} T
 * @typedef {{step: number, first: number, last: number, steps: number[], size: number, peak: T,
 *   host_wait_us: number, gpu_idle_us: number, sync_count: number, step_time_us?: number,
 *   mean: {host_wait_us: number, gpu_idle_us: number, sync_count: number, step_time_us: number}}} StepBin
 */

/**
 * What a step costs in the chart: its host wait plus its GPU idle after syncs.
 * @param {StepStat} s
 */
export function stepCost(s) {
  return (s.host_wait_us || 0) + (s.gpu_idle_us || 0);
}

/**
 * Consecutive steps (of one worker) in bins of `size`, in order. A bin is drawn as its
 * costliest step (the most host wait + GPU idle; on a tie the longest step, then the first):
 * its bar's height and its host-wait and GPU-idle parts are that step's, so a spike never
 * averages away, and `step` (what a click selects) is that step. `sync_count` is the most
 * syncs of a step of the bin (the count line's peak); `mean` the bin's means per step.
 * @template {StepStat} T
 * @param {T[]} steps
 * @param {number} size
 * @returns {StepBin<T>[]}
 */
export function binSteps(steps, size) {
  const k = Math.max(1, Math.floor(size));
  /** @type {StepBin<T>[]} */
  const bins = [];
  for (let i = 0; i < steps.length; i += k) {
    const part = steps.slice(i, i + k);
    let peak = part[0];
    let maxCount = 0;
    const sum = { host_wait_us: 0, gpu_idle_us: 0, sync_count: 0, step_time_us: 0 };
    for (const s of part) {
      const c = stepCost(s);
      const p = stepCost(peak);
      if (c > p || (c === p && (s.step_time_us || 0) > (peak.step_time_us || 0))) peak = s;
      maxCount = Math.max(maxCount, s.sync_count || 0);
      sum.host_wait_us += s.host_wait_us || 0;
      sum.gpu_idle_us += s.gpu_idle_us || 0;
      sum.sync_count += s.sync_count || 0;
      sum.step_time_us += s.step_time_us || 0;
    }
    const n = part.length;
    bins.push({
      step: peak.step,
      first: part[0].step,
      last: part[n - 1].step,
      steps: part.map((s) => s.step),
      size: n,
      peak,
      host_wait_us: peak.host_wait_us || 0,
      gpu_idle_us: peak.gpu_idle_us || 0,
      sync_count: maxCount,
      step_time_us: peak.step_time_us,
      mean: {
        host_wait_us: sum.host_wait_us / n,
        gpu_idle_us: sum.gpu_idle_us / n,
        sync_count: sum.sync_count / n,
        step_time_us: sum.step_time_us / n,
      },
    });
  }
  return bins;
}

/**
 * Which group holds step `step` for "Go to step": the selected worker's (and span's) group
 * when it has that step, else that worker's other span's, else the first group that has it; -1 when none has it.
 * @param {{worker: string | null, span: string | null, steps: {step: number}[]}[]} groups
 * @param {number} step
 * @param {{worker: string | null, span?: string | null}} [sel]
 * @returns {number}
 */
export function groupWithStep(groups, step, sel) {
  const has = (/** @type {{steps: {step: number}[]}} */ g) => g.steps.some((s) => s.step === step);
  if (sel && sel.worker !== null) {
    const own = groups.findIndex((g) => g.worker === sel.worker && (g.span ?? null) === (sel.span ?? null) && has(g));
    if (own >= 0) return own;
    const worker = groups.findIndex((g) => g.worker === sel.worker && has(g));
    if (worker >= 0) return worker;
  }
  return groups.findIndex(has);
}

/**
 * Where to scroll a list that scrolls on its own (its `scrollTop`) so that one of its rows
 * shows: null when the row is wholly in view already (below the list's sticky header, which
 * covers its top `header` px), else the row centred in the rest of the view, within what
 * the list can scroll. Rows and the view in px from the top of the list's content.
 * @param {{top: number, height: number}} row
 * @param {{scrollTop: number, clientHeight: number, scrollHeight: number, header?: number}} view
 * @returns {number | null}
 */
export function scrollToShow(row, view) {
  const header = Math.max(0, view.header ?? 0);
  const from = view.scrollTop + header;
  const to = view.scrollTop + view.clientHeight;
  if (row.top >= from - 0.5 && row.top + row.height <= to + 0.5) return null;
  const room = Math.max(0, view.clientHeight - header);
  const top = row.top - header - Math.max(0, (room - row.height) / 2);
  return Math.round(Math.max(0, Math.min(view.scrollHeight - view.clientHeight, top)));
}
