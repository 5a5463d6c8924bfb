import assert from "node:assert/strict";
import { test } from "node:test";
import { binSteps, groupWithStep, layoutStepChart, MIN_BAR_PX, stepsPerBar } from "../src/layout.js";

/** @param {number} n @param {number} [first] */
function steps(n, first = 1) {
  return Array.from({ length: n }, (_, i) => ({
    step: first + i,
    sync_count: 1 + (i % 3),
    host_wait_us: (i * 37) % 500,
    gpu_idle_us: (i * 11) % 90,
    step_time_us: 10_000 + i,
  }));
}

test("a bar per step while every step fits, bins of steps beyond", () => {
  assert.equal(stepsPerBar(4, 1000), 1);
  assert.equal(stepsPerBar(250, 1000), 1); // 250 bars of 4 px
  assert.ok(stepsPerBar(251, 1000) > 1);
  assert.equal(stepsPerBar(6000, 1000), Math.ceil(6000 / 249));
  // Two groups: a gap slot between them, a short last bin in each.
  assert.equal(stepsPerBar(249, 1000, 2), 1);
  assert.ok(stepsPerBar(250, 1000, 2) > 1);
});

test("the number of bars stays bounded by the plot's width whatever the step count", () => {
  for (const plotW of [244, 1000, 1514]) {
    for (const n of [1, 300, 5988, 10_000, 100_000]) {
      for (const split of [[n], [Math.ceil(n / 3), n - Math.ceil(n / 3)]]) {
        const groups = split.filter((x) => x > 0);
        const per = stepsPerBar(n, plotW, groups.length);
        const binned = groups.map((size) => binSteps(steps(size), per));
        const bars = binned.reduce((a, g) => a + g.length, 0);
        assert.ok(bars + groups.length - 1 <= Math.floor(plotW / MIN_BAR_PX), `${plotW} px, ${n} steps: ${bars} bars`);
        const L = layoutStepChart(binned.flat(), {
          width: plotW + 86,
          height: 170,
          pad: { l: 56, r: 30, t: 10, b: 24 },
          groups: binned.map((g) => g.length),
        });
        assert.equal(L.bars.length, bars);
        assert.ok(L.bars.every((b) => b.band.w >= MIN_BAR_PX - 1e-9), `${plotW} px, ${n} steps`);
      }
    }
  }
});

test("a bin is drawn as its costliest step, with that step's wait and idle parts", () => {
  const s = [
    { step: 10, sync_count: 1, host_wait_us: 100, gpu_idle_us: 10, step_time_us: 1000 },
    { step: 11, sync_count: 5, host_wait_us: 50, gpu_idle_us: 200, step_time_us: 900 },
    { step: 12, sync_count: 2, host_wait_us: 0, gpu_idle_us: 0, step_time_us: 5000 },
    { step: 13, sync_count: 0, host_wait_us: 0, gpu_idle_us: 0, step_time_us: 700 },
    { step: 14, sync_count: 0, host_wait_us: 0, gpu_idle_us: 0, step_time_us: 800 },
  ];
  const [a, b] = binSteps(s, 3);
  assert.equal(a.first, 10);
  assert.equal(a.last, 12);
  assert.deepEqual(a.steps, [10, 11, 12]);
  assert.equal(a.step, 11); // 250 µs beats 110 µs
  assert.equal(a.host_wait_us, 50);
  assert.equal(a.gpu_idle_us, 200);
  assert.equal(a.sync_count, 5); // the most syncs of a step in the bin
  assert.equal(a.mean.host_wait_us, 50);
  assert.equal(a.mean.gpu_idle_us, 70);
  // Nothing waited: the longest step; a short last bin.
  assert.equal(b.step, 14);
  assert.equal(b.size, 2);
  assert.deepEqual([b.first, b.last], [13, 14]);
  // A spike in 6,000 steps keeps its full height.
  const many = steps(6000);
  many[4321] = { ...many[4321], host_wait_us: 1e6, gpu_idle_us: 5e5 };
  const bins = binSteps(many, stepsPerBar(6000, 1000));
  const top = bins.reduce((m, x) => (x.host_wait_us + x.gpu_idle_us > m.host_wait_us + m.gpu_idle_us ? x : m));
  assert.equal(top.step, 4322);
  assert.equal(top.host_wait_us + top.gpu_idle_us, 1.5e6);
  assert.ok(top.steps.includes(4322));
});

test("go to step: the selected worker's step first, else the first worker that has it", () => {
  const groups = [
    { worker: "a", span: null, steps: steps(5) },
    { worker: "b", span: "1", steps: steps(5, 3) },
    { worker: "b", span: "2", steps: steps(5, 100) },
  ];
  assert.equal(groupWithStep(groups, 4), 0);
  assert.equal(groupWithStep(groups, 4, { worker: "b", span: "1" }), 1);
  assert.equal(groupWithStep(groups, 101, { worker: "b", span: "1" }), 2); // its other span
  assert.equal(groupWithStep(groups, 2, { worker: "b", span: null }), 0);
  assert.equal(groupWithStep(groups, 99), -1);
});

test("each worker's axis labels count from its own first bar", async () => {
  const { hasAxisLabel } = await import("../src/layout.js");
  // Two workers of 7 and 5 bars, a label every 3rd bar: the second worker's first bar is
  // labelled (its first step), not the bar where 3 | i over both groups.
  const spans = [
    { first: 0, size: 7 },
    { first: 7, size: 5 },
  ];
  const labelled = [...Array(12).keys()].filter((i) => hasAxisLabel(i, spans, 3));
  assert.deepEqual(labelled, [0, 3, 6, 7, 10]);
  // One group (no spans): every k-th bar from the first.
  assert.deepEqual([...Array(7).keys()].filter((i) => hasAxisLabel(i, [], 3)), [0, 3, 6]);
});
