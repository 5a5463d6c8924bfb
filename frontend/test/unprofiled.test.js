import assert from "node:assert/strict";
import { test } from "node:test";
import { choiceNeedsRewrite, decodeState, defaultState, encodeState, patchState, stepMsProblem, validStepMs } from "../src/state.js";
import { defaultOrder, nextSort, sitesInStep, sortSites, UNPROFILED_SORT, withUnprofiled } from "../src/sites.js";

test("a step time is a plain decimal number of ms within what the plugin takes", () => {
  for (const [text, ms] of [["46.97", 46.97], ["12", 12], [" 8.5 ", 8.5], [".5", 0.5], ["4.7e1", 47], ["14.510858859999871", 14.510858859999871], ["3600000", 3.6e6], ["14,51", 14.51], ["14.5 ms", 14.5], ["14.5ms", 14.5], ["14,5 MS", 14.5]]) {
    assert.equal(validStepMs(text), ms, text);
  }
  for (const text of ["", "fast", "-3", "0", "0.0001", "3600001", "Infinity", "NaN", "0x10", "1,234.5", "1,2,3", "14 s", "14 us", ".", "e5", "1e", "ms"]) {
    assert.equal(validStepMs(text), null, text);
  }
});

test("the step time travels in the link and a malformed one is dropped from it", () => {
  const state = { ...defaultState(), run: "gpu_cnn_baseline", unprof: 14.51 };
  const hash = encodeState(state);
  assert.equal(hash, "#run=gpu_cnn_baseline&unprof=14.51");
  assert.deepEqual(decodeState(hash), state);
  for (const bad of ["#unprof=-3", "#unprof=abc", "#unprof=0"]) {
    const decoded = decodeState(bad);
    assert.equal(decoded.unprof, null, bad);
    assert.equal(choiceNeedsRewrite(bad, decoded), true, bad);
  }
  assert.equal(choiceNeedsRewrite(hash, decodeState(hash)), false);
});

test("a step time is the run's: another run drops it, another worker or site keeps it", () => {
  const state = { ...defaultState(), run: "a", unprof: 14.51 };
  assert.equal(patchState(state, { run: "b" }).unprof, null);
  assert.equal(patchState(state, { run: "a" }).unprof, 14.51);
  assert.equal(patchState(state, { worker: "w1", site: "x" }).unprof, 14.51);
  assert.equal(patchState(state, { run: "b", unprof: 9 }).unprof, 9);
});

test("each site gets its saving without the profiler by key, also a null one, and keeps it per step", () => {
  const sites = [
    { key: "a", count: 5, per_step: 1, steps: { 2: { count: 1, host_wait_us: 1, gpu_idle_us: 0 } } },
    { key: "b", count: 3, per_step: 1 },
    { key: "c", count: 1, per_step: 1 },
  ];
  const merged = withUnprofiled(sites, { a: 2268.5, b: null });
  assert.equal(merged[0].unprofiled_predicted_saving_per_step_us, 2268.5);
  assert.ok("unprofiled_predicted_saving_per_step_us" in merged[1]);
  assert.equal(merged[1].unprofiled_predicted_saving_per_step_us, null);
  assert.equal("unprofiled_predicted_saving_per_step_us" in merged[2], false);
  assert.equal(sites[0].unprofiled_predicted_saving_per_step_us, undefined); // a copy
  assert.equal(withUnprofiled(sites, null), sites);
  // A step picked in the chart: the whole run's figure stays on the site.
  const inStep = sitesInStep(merged, 2).sites;
  assert.equal(inStep.find((s) => s.key === "a")?.unprofiled_predicted_saving_per_step_us, 2268.5);
});

test("sites sort by their saving without the profiler, largest first, those without a figure last", () => {
  // Profiled ranking a, b, c, d; without the profiler b saves the most and c has no figure.
  const sites = [
    { key: "a", predicted_saving_us: 130 },
    { key: "b", predicted_saving_us: 120 },
    { key: "c", predicted_saving_us: 90 },
    { key: "d", predicted_saving_us: 10 },
  ];
  const merged = withUnprofiled(sites, { a: 130, b: 228, c: null, d: 15 });
  assert.equal(defaultOrder(UNPROFILED_SORT), "desc");
  const first = nextSort({ sort: "predicted_saving_us", order: "desc" }, UNPROFILED_SORT);
  assert.deepEqual(first, { sort: UNPROFILED_SORT, order: "desc" });
  assert.deepEqual(sortSites(merged, first.sort, first.order).map((s) => s.key), ["b", "a", "d", "c"]);
  const flipped = nextSort(first, UNPROFILED_SORT);
  assert.deepEqual(sortSites(merged, flipped.sort, flipped.order).map((s) => s.key), ["d", "a", "b", "c"]);
  // Before the answer comes no site has the figure: the plugin's ranking stays.
  assert.deepEqual(sortSites(sites, UNPROFILED_SORT, "desc").map((s) => s.key), ["a", "b", "c", "d"]);
});

test("the sort by the saving without the profiler travels in the link", () => {
  const state = { ...defaultState(), run: "gpu_seg_baseline", unprof: 47.5, sort: UNPROFILED_SORT };
  const hash = encodeState(state);
  assert.ok(hash.includes(`sort=${UNPROFILED_SORT}`), hash);
  assert.deepEqual(decodeState(hash), state);
});

test("a number of ms out of range is told the range, any other text that it is no step time", () => {
  for (const text of ["1e9", "0.0001", "3600001", "5000000 ms"]) {
    assert.equal(validStepMs(text), null, text);
    assert.match(stepMsProblem(text), /outside the step times the replay takes: from 0.001 to 3600000 ms/, text);
  }
  for (const text of ["fast", "-3", "0", "14 s", "Infinity"]) {
    assert.match(stepMsProblem(text), /is not a step time: give it in milliseconds/, text);
  }
});
