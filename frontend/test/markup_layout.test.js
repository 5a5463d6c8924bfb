import assert from "node:assert/strict";
import { test } from "node:test";
import { inlineCode } from "../src/markup.js";
import { barLabel, groupSteps, layoutStepChart, nextBarIndex, placeBandLabels } from "../src/layout.js";
import { formatUs, plural, siteCountText, spanLabels } from "../src/format.js";
import { traceLocator, traceSelection } from "../src/trace_link.js";

test("backticks in advice become code parts, never literal backticks", () => {
  assert.deepEqual(inlineCode("Use `torch.where` or `x.masked_fill_(m, 0)`."), [
    { code: false, text: "Use " },
    { code: true, text: "torch.where" },
    { code: false, text: " or " },
    { code: true, text: "x.masked_fill_(m, 0)" },
    { code: false, text: "." },
  ]);
  assert.deepEqual(inlineCode("an unpaired ` stays"), [{ code: false, text: "an unpaired ` stays" }]);
  assert.deepEqual(inlineCode(null), []);
});

test("the wait and idle labels share a line only when they do not touch", () => {
  // A 39 µs wait right before a 20 µs bubble, a few pixels each: side by side they overlap.
  const close = placeBandLabels({ wait: { x: 300, w: 6 }, bubble: { x: 306, w: 4 }, width: 520, waitText: "wait 39 µs", idleText: "GPU idle 20 µs" });
  const [wait, idle] = close.labels;
  const right = (/** @type {any} */ l) => (l.anchor === "start" ? l.x + l.text.length * 6 : l.x);
  const left = (/** @type {any} */ l) => (l.anchor === "start" ? l.x : l.x - l.text.length * 6);
  assert.ok(idle.y !== wait.y || left(idle) >= right(wait), JSON.stringify(close));
  for (const l of close.labels) assert.ok(left(l) >= 0 && right(l) <= 520, JSON.stringify(l));
  assert.ok(close.top > Math.max(wait.y, idle.y)); // rows start below the labels
  // Far apart: one line.
  const apart = placeBandLabels({ wait: { x: 100, w: 150 }, bubble: { x: 250, w: 100 }, width: 520, waitText: "wait 1.03 ms", idleText: "GPU idle 130 µs" });
  assert.equal(apart.labels[0].y, apart.labels[1].y);
  // At the right edge the label ends at the edge instead of leaving the drawing.
  const edge = placeBandLabels({ wait: { x: 500, w: 10 }, bubble: null, width: 520, waitText: "wait 1.03 ms", idleText: null });
  assert.deepEqual([edge.labels[0].anchor, edge.labels[0].x], ["end", 520]);
});

test("bar labels drop the namespace before they are cut", () => {
  assert.equal(barLabel("aten::nonzero", 200), "aten::nonzero");
  assert.equal(barLabel("aten::nonzero", 60), "nonzero");
  assert.equal(barLabel("autograd::engine::evaluate_function: IndexBackward0", 100), "IndexBackward0");
  assert.equal(barLabel("aten::_local_scalar_dense", 60), "_local_s\u2026");
  assert.equal(barLabel("aten::item", 20), ""); // no room: no label rather than "a…"
});

test("steps are grouped per trace file, in the summary's order, named by worker", () => {
  const traces = [
    { path: "/l/r/hostA.pt.trace.json", worker: "hostA", span: null },
    { path: "/l/r/hostB.1.pt.trace.json", worker: "hostB", span: "1" },
    { path: "/l/r/hostB.2.pt.trace.json", worker: "hostB", span: "2" },
  ];
  const steps = [
    { step: 550, trace: traces[1].path },
    { step: 2, trace: traces[0].path },
    { step: 3, trace: traces[0].path },
    { step: 7, trace: traces[2].path },
  ];
  const groups = groupSteps(steps, traces);
  assert.deepEqual(groups.map((g) => [g.label, g.worker, g.span, g.steps.map((s) => s.step)]), [
    ["hostA", "hostA", null, [2, 3]],
    ["hostB · 1", "hostB", "1", [550]],
    ["hostB · 2", "hostB", "2", [7]],
  ]);
});

test("grouped steps get a gap between groups and a count line each", () => {
  const steps = [1, 2, 1, 2].map((step) => ({ step, sync_count: 1, host_wait_us: 10, gpu_idle_us: 0 }));
  const L = layoutStepChart(steps, { width: 500, height: 100, pad: { l: 0, r: 0, t: 0, b: 0 }, groups: [2, 2] });
  assert.equal(L.lines.length, 2);
  assert.equal(L.spans.length, 2);
  assert.ok(Math.abs(L.bars[2].band.x - L.bars[1].band.x - 2 * L.bars[0].band.w) < 1e-9); // one empty slot
  assert.ok(L.spans[0].x + L.spans[0].w < L.spans[1].x);
  const flat = layoutStepChart(steps, { width: 500, height: 100 });
  assert.equal(flat.lines.length, 1);
});

test("counts are singular for one, and the site chip says 'of' only when filtered", () => {
  assert.equal(plural(1, "site"), "1 site");
  assert.equal(plural(2, "site"), "2 sites");
  assert.equal(plural(1200, "step"), "1,200 steps");
  assert.equal(siteCountText(1, 1), "1 site");
  assert.equal(siteCountText(3, 3), "3 sites");
  assert.equal(siteCountText(1, 2), "1 of 2 sites");
});

test("a duration that rounds up to the next unit is written in it", () => {
  assert.equal(formatUs(999.7), "1.00 ms");
  assert.equal(formatUs(99_972), "100 ms");
  assert.equal(formatUs(9.97), "10 µs");
});

test("a sync is located in its step for a trace viewer: offset into ProfilerStep#N", () => {
  const sync = { ts_us: 1_356, op: "aten::_unique2", api: "cudaStreamSynchronize", thread: 672 };
  const context = { host: [
    { name: "ProfilerStep#2", ts_us: 1_000, dur_us: 5_000, depth: 0 },
    { name: "aten::_unique2", ts_us: 1_300, dur_us: 100, depth: 1 },
  ] };
  assert.deepEqual(traceLocator(sync, context), { step: "ProfilerStep#2", offsetUs: 356, search: "aten::_unique2", thread: "672" });
  assert.deepEqual(traceLocator({ ts_us: 9, api: "cudaDeviceSynchronize" }, { host: [] }), { step: null, offsetUs: null, search: "cudaDeviceSynchronize", thread: null });
  assert.deepEqual(traceSelection("/a", [{ path: "/a", worker: "w", span: "s" }]), { worker: "w", span: "s" });
  assert.equal(traceSelection("/b", [{ path: "/a", worker: "w" }]), null);
});

test("a worker's spans that are epoch-ms times are named as date-times in the chart", () => {
  const traces = [
    { path: "/l/r/h.1700000000000.pt.trace.json", worker: "h", span: "1700000000000" },
    { path: "/l/r/h.1700000100000.pt.trace.json", worker: "h", span: "1700000100000" },
  ];
  const groups = groupSteps([{ step: 1, trace: traces[0].path }, { step: 1, trace: traces[1].path }], traces);
  const names = spanLabels(traces.map((t) => t.span));
  assert.deepEqual(groups.map((g) => g.label), traces.map((t) => `h · ${names.get(t.span)}`));
  assert.doesNotMatch(groups[0].label, /1700000000000/);
});

test("arrow keys move between step bars, stopping at the ends", () => {
  assert.equal(nextBarIndex(0, "ArrowRight", 17), 1);
  assert.equal(nextBarIndex(16, "ArrowRight", 17), 16);
  assert.equal(nextBarIndex(0, "ArrowLeft", 17), 0);
  assert.equal(nextBarIndex(5, "ArrowUp", 17), 4);
  assert.equal(nextBarIndex(5, "Home", 17), 0);
  assert.equal(nextBarIndex(5, "End", 17), 16);
  assert.equal(nextBarIndex(12, "PageDown", 17), 16);
  assert.equal(nextBarIndex(3, "Enter", 17), null);
  assert.equal(nextBarIndex(0, "ArrowRight", 0), null);
});

test("worker labels under 318 narrow bars are thinned so they do not collide", async () => {
  const { thinAxisLabels, LABEL_CHAR_PX } = await import("../src/layout.js");
  const labels = Array.from({ length: 318 }, (_, i) => `rank${i}`);
  const { every, chars } = thinAxisLabels(3.5, labels);
  assert.equal(chars, 7);
  // labels every k-th bar leave room for each one
  assert.ok(every * 3.5 >= chars * LABEL_CHAR_PX);
  assert.ok((every - 1) * 3.5 < chars * LABEL_CHAR_PX + 4);
  // wide bars: every one labelled
  assert.equal(thinAxisLabels(100, ["rank0", "rank1"]).every, 1);
});
