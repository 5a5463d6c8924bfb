// @ts-check
/**
 * Geometry of the two SVG drawings (per-step chart, sync timeline). Pure: the DOM layer
 * only turns these numbers into elements, so the maths is unit-tested in node.
 */

/**
 * @typedef {{step: number, step_time_us?: number, sync_count: number, host_wait_us: number,
 *            gpu_idle_us: number}} StepStat
 */

/**
 * Layout of the per-step chart: one stacked bar per step (host wait at the bottom, GPU idle
 * on top, both on the left axis in µs) and the sync count as a line on the right axis.
 * @param {StepStat[]} steps
 * @param {{width: number, height: number, pad?: {l: number, r: number, t: number, b: number}}} box
 */
export function layoutStepChart(steps, box) {
  const pad = box.pad ?? { l: 56, r: 40, t: 10, b: 24 };
  const plotW = Math.max(10, box.width - pad.l - pad.r);
  const plotH = Math.max(10, box.height - pad.t - pad.b);
  const n = steps.length;
  const maxUs = niceMax(Math.max(0, ...steps.map((s) => (s.host_wait_us || 0) + (s.gpu_idle_us || 0))));
  const maxCount = niceMax(Math.max(0, ...steps.map((s) => s.sync_count || 0)));
  const band = n ? plotW / n : plotW;
  const barW = Math.max(1, band * (n > 60 ? 0.9 : 0.7));
  const baseY = pad.t + plotH;
  const bars = steps.map((s, i) => {
    const x = pad.l + i * band + (band - barW) / 2;
    const waitH = maxUs ? ((s.host_wait_us || 0) / maxUs) * plotH : 0;
    const idleH = maxUs ? ((s.gpu_idle_us || 0) / maxUs) * plotH : 0;
    return {
      step: s.step,
      x,
      w: barW,
      band: { x: pad.l + i * band, w: band },
      waitY: baseY - waitH,
      waitH,
      idleY: baseY - waitH - idleH,
      idleH,
    };
  });
  const points = steps.map((s, i) => ({
    step: s.step,
    x: pad.l + i * band + band / 2,
    y: maxCount ? baseY - ((s.sync_count || 0) / maxCount) * plotH : baseY,
    count: s.sync_count || 0,
  }));
  return {
    pad,
    plotW,
    plotH,
    baseY,
    maxUs,
    maxCount,
    bars,
    points,
    line: points.map((p) => `${round(p.x)},${round(p.y)}`).join(" "),
    // Label every k-th step so labels never overlap (about 40 px per label).
    labelEvery: Math.max(1, Math.ceil(n / Math.max(1, Math.floor(plotW / 40)))),
  };
}

/**
 * A "nice" axis maximum >= v: 1, 2, 2.5 or 5 times a power of ten (0 stays 0).
 * @param {number} v
 */
export function niceMax(v) {
  if (!(v > 0)) return 0;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
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

/**
 * Layout of the sync timeline: host-thread rows by nesting depth, then one row per device
 * lane; the host wait (sync start..end) and the GPU bubble (end..idle_end) as bands.
 * @param {SyncContext | null | undefined} ctx
 * @param {{width: number, labelW?: number, rowH?: number, maxDepth?: number}} box
 */
export function layoutTimeline(ctx, box) {
  if (!ctx || !Array.isArray(ctx.window) || !(ctx.window[1] > ctx.window[0])) return null;
  const labelW = box.labelW ?? 120;
  const rowH = box.rowH ?? 16;
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
  const depths = Math.min(maxDepth, Math.max(0, ...host.map((e) => (e.depth || 0) + 1)));
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
    if (!lanes.has(e.lane)) lanes.set(e.lane, []);
    lanes.get(e.lane)?.push({ ...span(e), name: e.name, cat: e.cat });
  }
  for (const lane of [...lanes.keys()].sort((a, b) => a.localeCompare(b, "en", { numeric: true }))) {
    rows.push({ label: lane, group: "device", items: lanes.get(lane) || [] });
  }
  rows.forEach((r, i) => Object.assign(r, { y: 18 + i * (rowH + 4), h: rowH }));
  const hostRows = rows.filter((r) => r.group === "host").length;
  const s = ctx.sync;
  const wait = { x: x(s.ts_us), w: Math.max(2, x(s.end_us) - x(s.ts_us)) };
  const idleEnd = s.idle_end_us ?? null;
  const bubble =
    idleEnd !== null && idleEnd > s.end_us
      ? { x: x(s.end_us), w: Math.max(2, x(idleEnd) - x(s.end_us)) }
      : null;
  return {
    labelW,
    plotW,
    rows,
    hostRows,
    wait,
    bubble,
    height: 18 + rows.length * (rowH + 4) + 20,
    ticks: [0, 0.25, 0.5, 0.75, 1].map((f) => ({ x: labelW + f * plotW, us: (t1 - t0) * f })),
  };
}
