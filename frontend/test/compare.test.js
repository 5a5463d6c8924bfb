import assert from "node:assert/strict";
import { test } from "node:test";
import {
  changeText,
  compareLocation,
  compareBasis,
  compareHeadline,
  countByStatus,
  costCell,
  countTone,
  counterpartOf,
  pickBaseline,
  selfBaselineText,
  sideCost,
  sortCompareSites,
  stepTimeChange,
  STATUS_TONE,
  withPerStepCosts,
} from "../src/compare.js";

const site = (key, status, before, after) => ({ key, status, file: `${key}.py`, line: 1, before, after });
// A side as compare.py answers it (one profiled step: its totals are its per-step cost).
const cost = (w, i, count = 1) => ({ count, host_wait_us: w, gpu_idle_us: i, cost_per_step_us: w + i });
// A side from an older version: totals only.
const totals = (w, i, count = 1) => ({ count, host_wait_us: w, gpu_idle_us: i });

test("every status gets a count, including those with no site", () => {
  const counts = countByStatus([site("a", "fixed"), site("b", "fixed"), site("c", "new")]);
  assert.deepEqual(counts, { worse: 0, new: 1, fixed: 2, better: 0, same: 0 });
});

test("regressions are listed first, then wins, then unchanged; larger cost first within a status", () => {
  const sites = [
    site("same1", "same", cost(10, 0), cost(10, 0)),
    site("fixsmall", "fixed", cost(100, 0), null),
    site("fixbig", "fixed", cost(5000, 100), null),
    site("new1", "new", null, cost(40, 0)),
    site("worse1", "worse", cost(10, 0), cost(50, 0)),
    site("better1", "better", cost(100, 0), cost(10, 0)),
  ];
  assert.deepEqual(
    sortCompareSites(sites).map((s) => s.key),
    ["worse1", "new1", "fixbig", "fixsmall", "better1", "same1"],
  );
});

test("cost of a side is its cost per step, never its whole-run totals", () => {
  assert.equal(sideCost(cost(100, 50)), 150);
  assert.equal(sideCost({ host_wait_us: 999, gpu_idle_us: 1, cost_per_step_us: 15 }), 15);
  assert.equal(sideCost(null), 0);
  // An older answer's side, totals only: no per-step figure.
  assert.equal(sideCost(totals(100, 50)), null);
});

test("an older answer's sides get the cost per step as compare.py computes it: totals over the run's profiled steps", () => {
  const sites = [site("a", "better", totals(900, 100), totals(200, 0)), site("b", "new", null, cost(7, 0))];
  const [a, b] = withPerStepCosts(sites, { step_count: 10 }, { step_count: 4 });
  assert.equal(sideCost(a.before), 100);
  assert.equal(sideCost(a.after), 50);
  assert.equal(b.before, null);
  assert.equal(sideCost(b.after), 7); // given: kept
  assert.equal(changeText(a), "\u221250 µs (\u221250 %)");
  // No profiled step: compare.py divides by 1.
  assert.equal(sideCost(withPerStepCosts(sites, { step_count: 0 }, {})[0].before), 1000);
  // No step count in the answer: none to compute, and the inputs are left as they were.
  const [old] = withPerStepCosts(sites, {}, null);
  assert.equal(sideCost(old.before), null);
  assert.equal(sites[0].before.cost_per_step_us, undefined);
});

test("a side with no per-step figure shows a dash saying the baseline predates them, and no change", () => {
  const x = site("a", "better", totals(1000, 200), cost(300, 0));
  assert.deepEqual(costCell(x.after, "after"), { text: "300 µs", title: null });
  const cell = costCell(x.before, "before");
  assert.equal(cell.text, "–");
  assert.match(cell.title, /^The baseline predates per-step figures/);
  assert.deepEqual(costCell(null, "before"), { text: "–", title: null });
  // Not the totals' "1.20 ms" under a per-step header, nor a change computed from them.
  assert.equal(changeText(x), "–");
  assert.equal(changeText(site("f", "fixed", totals(1000, 200), null)), "–");
});

test("change text says what a gone site was costing and what a new one costs, per step", () => {
  // The site's cost, not a predicted saving (the run totals' "saving per step" is the replay's).
  assert.equal(changeText(site("a", "fixed", cost(1000, 200), null)), "gone: was costing 1.20 ms/step");
  assert.equal(changeText(site("b", "new", null, cost(300, 0))), "new: costs 300 µs/step");
  assert.doesNotMatch(changeText(site("a", "fixed", cost(1000, 200), null)), /saves/);
  assert.equal(changeText(site("c", "better", cost(1000, 0), cost(550, 0))), "\u2212450 µs (\u221245 %)");
  assert.equal(changeText(site("d", "worse", cost(100, 0), cost(200, 0))), "+100 µs (+100 %)");
});

test("a gone site also says what its fix saves, as the baseline predicted", () => {
  // Wait + idle overstate it where other work fills the gap (8.78 ms against 3.20 ms on
  // the H100 demo's loss.item()): the prediction goes beside the cost, not instead of it.
  const predicted = (saving, method) => ({
    ...cost(1000, 200),
    predicted_saving_per_step_us: saving,
    saving_method: method,
  });
  const gone = site("a", "fixed", predicted(320, "replay"), null);
  assert.equal(changeText(gone), "gone: was costing 1.20 ms/step; saves ~320 µs/step (predicted)");
  const bound = site("a", "fixed", predicted(320, "bound"), null);
  assert.equal(changeText(bound), "gone: was costing 1.20 ms/step; saves ≤320 µs/step (predicted)");
  assert.equal(changeText(site("a", "fixed", predicted(null, "replay"), null)), "gone: was costing 1.20 ms/step");
});

test("step time change is good news when negative and bad when positive", () => {
  assert.deepEqual(stepTimeChange(-2500), { text: "profiled steps faster by 2.50 ms", tone: "good" });
  assert.deepEqual(stepTimeChange(800), { text: "profiled steps slower by 800 µs", tone: "bad" });
  assert.equal(stepTimeChange(0).tone, "neutral");
  assert.equal(stepTimeChange(null).tone, "neutral");
  assert.equal(STATUS_TONE.fixed, "good");
  assert.equal(STATUS_TONE.worse, "bad");
});

test("latent sites are described by syncs per step, not by cost", () => {
  const fixed = { status: "fixed", before: { per_step: 3, cost_per_step_us: 0 }, after: null };
  assert.equal(changeText(fixed, { latent: true }), "gone: 3 fewer syncs per step");
  const one = { status: "fixed", before: { per_step: 1, cost_per_step_us: 0 }, after: null };
  assert.equal(changeText(one, { latent: true }), "gone: 1 fewer sync per step");
  const added = { status: "new", before: null, after: { per_step: 1 } };
  assert.equal(changeText(added, { latent: true }), "new: 1 sync per step");
  const same = { status: "same", before: { per_step: 2 }, after: { per_step: 2 } };
  assert.equal(changeText(same, { latent: true }), "2 → 2 per step");
});

test("a step time change within 2 % of the baseline step is neither better nor worse", () => {
  // 30 µs on a 3 ms step is 1 %: noise.
  const small = stepTimeChange(30, { baseStepUs: 3000 });
  assert.equal(small.tone, "neutral");
  assert.match(small.text, /within noise/);
  assert.match(small.text, /\+30 µs/);
  assert.equal(stepTimeChange(-59, { baseStepUs: 3000 }).tone, "neutral");
  // 142 µs on a 3.2 ms step is 4.4 %: a real change, with its share of the step.
  const real = stepTimeChange(-142, { baseStepUs: 3200 });
  assert.deepEqual(real, { text: "profiled steps faster by 142 µs (\u22124.4 %)", tone: "good" });
  assert.equal(stepTimeChange(300, { baseStepUs: 3000 }).tone, "bad");
});

test("a latent compare headline is neutral, counts the sites and says CPU step time is noise", () => {
  const counts = { worse: 0, new: 0, fixed: 4, better: 0, same: 0 };
  for (const changeUs of [4890, -889]) {
    const head = compareHeadline({ latent: true, changeUs, baseStepUs: 6390, counts });
    assert.equal(head.tone, "neutral");
    assert.equal(head.text, "4 latent sync sites fixed, 0 new");
    assert.doesNotMatch(head.text, /faster|slower/);
    assert.match(head.note ?? "", /CPU step time does not measure these syncs/);
  }
  const one = compareHeadline({ latent: true, changeUs: null, counts: { ...counts, fixed: 1, new: 2 } });
  assert.equal(one.text, "1 latent sync site fixed, 2 new");
});

test("a GPU compare headline is the step time change, without the latent note", () => {
  const counts = { worse: 1, new: 0, fixed: 1, better: 0, same: 0 };
  const head = compareHeadline({ latent: false, changeUs: -142, baseStepUs: 3200, counts });
  assert.equal(head.tone, "good");
  assert.match(head.text, /^profiled steps faster by 142 µs/);
  assert.equal(head.note, null);
  assert.match(head.caveat, /^Profiled step times include the profiler's overhead/);
  assert.equal(compareHeadline({ latent: false, changeUs: 0, baseStepUs: 3200, counts }).caveat, null);
  assert.equal(compareHeadline({ latent: false, changeUs: 20, baseStepUs: 3200, counts }).tone, "neutral");
});

test("a status count badge is neutral at zero and takes the status colour otherwise", () => {
  assert.equal(countTone("worse", 0), "neutral");
  assert.equal(countTone("new", 0), "neutral");
  assert.equal(countTone("fixed", 0), "neutral");
  assert.equal(countTone("worse", 1), "bad");
  assert.equal(countTone("new", 3), "bad");
  assert.equal(countTone("fixed", 4), "good");
  assert.equal(countTone("same", 2), "neutral");
});

test("GPU runs are compared by cost, with no note", () => {
  const b = compareBasis({ sites: [site("a", "same")], latent_sites: [site("l", "fixed")], note: null });
  assert.deepEqual(b.sites.map((s) => s.key), ["a"]);
  assert.equal(b.byCount, false);
  assert.equal(b.latentOnly, false);
  assert.equal(b.note, null);
});

test("two CPU-only runs compare their latent sites by count", () => {
  const b = compareBasis({ sites: [], latent_sites: [site("l", "fixed")] });
  assert.deepEqual(b.sites.map((s) => s.key), ["l"]);
  assert.equal(b.latentOnly, true);
  assert.equal(b.byCount, true);
});

test("a CPU-only run against a GPU run is compared by count and carries the route's note", () => {
  const note = "one run is CPU-only: sites are compared by count per step";
  const b = compareBasis({ sites: [site("a", "same")], latent_sites: [], note: `  ${note} ` });
  assert.deepEqual(b.sites.map((s) => s.key), ["a"]);
  assert.equal(b.latentOnly, false);
  assert.equal(b.byCount, true);
  assert.equal(b.note, note);
  // A blank or non-string note (older plugin, odd answer) is no note.
  assert.equal(compareBasis({ sites: [], note: " " }).note, null);
  assert.equal(compareBasis({ sites: [], note: 3 }).byCount, false);
  assert.deepEqual(compareBasis(null).sites, []);
});

test("a CPU-only run against a GPU run gets a neutral headline by site counts", () => {
  const head = compareHeadline({ latent: false, mixed: true, changeUs: -250000, baseStepUs: 300000, counts: { fixed: 2, new: 1 } });
  assert.equal(head.tone, "neutral");
  assert.match(head.text, /2 sync sites fixed, 1 new/);
  assert.match(head.note, /step times do not compare/);
  const one = compareHeadline({ latent: false, mixed: true, changeUs: 0, baseStepUs: 300000, counts: { fixed: 1, new: 0 } });
  assert.equal(one.text, "1 sync site fixed, 0 new");
});

test("two NPU runs without AscendCL calls are not told they ran on the CPU", () => {
  const head = compareHeadline({ latent: true, npu: true, changeUs: 1000, baseStepUs: 300000, counts: { fixed: 1, new: 0 } });
  assert.match(head.note, /NPU traces recorded no AscendCL call/);
  assert.doesNotMatch(head.note, /CPU/);
});

test("the baseline is pre-selected by name, and a run is never its own baseline", async () => {
  const { defaultBaseline } = await import("../src/compare.js");
  const demo = ["cnn_baseline", "cnn_optimized", "seg_baseline", "seg_optimized"];
  assert.equal(defaultBaseline(demo, "seg_optimized"), "seg_baseline");
  assert.equal(defaultBaseline(demo, "cnn_optimized"), "cnn_baseline");
  assert.equal(defaultBaseline(demo, "seg_baseline"), null); // it is the baseline itself
  assert.equal(defaultBaseline(["baseline", "optimized", "clean"], "optimized"), "baseline");
  assert.equal(defaultBaseline(["run_a", "run_b"], "run_b"), "run_a"); // the other run
  assert.equal(defaultBaseline(["a", "b", "c"], "c"), null); // nothing says which
  assert.equal(defaultBaseline(["only"], "only"), null);
  for (const runs of [demo, ["a", "b"], ["baseline", "x"]]) {
    for (const r of runs) assert.notEqual(defaultBaseline(runs, r), r);
  }
  // tensorboard_trace_handler's layout: each run's profile folder has its own time.
  const profiled = demo.map((r, n) => `${r}/plugins/profile/2026_11_26_01_1${n}_11`);
  assert.equal(defaultBaseline(profiled, profiled[3]), profiled[2]);
  assert.equal(defaultBaseline(profiled, profiled[1]), profiled[0]);
});

test("a compared row merging several lines names every line, as the CLI does", () => {
  const row = { file: "tb_syncfinder/demo/cnn.py", line: 95, ops: ["aten::to"], before: { lines: [95, 96] }, after: null };
  assert.equal(compareLocation(row), "\u2026/demo/cnn.py:95,96");
  assert.equal(compareLocation({ ...row, before: { lines: [95] } }), "\u2026/demo/cnn.py:95");
  assert.equal(compareLocation({ ...row, before: null, after: { lines: [101, 104] } }), "\u2026/demo/cnn.py:101,104");
  assert.equal(compareLocation({ file: "train.py", line: 9, before: {} }), "train.py:9");
  assert.equal(compareLocation({ file: null, ops: ["aten::item"], before: {} }), "aten::item");
});

test("a baseline the view names that is not listed is said missing and the default used", () => {
  const runs = ["baseline", "optimized", "other"];
  assert.deepEqual(pickBaseline(runs, "optimized", "other"), { base: "other", missing: null, self: null });
  assert.deepEqual(pickBaseline(runs, "optimized", "no_such_run"), { base: "baseline", missing: "no_such_run", self: null });
  // No default to guess: nothing compared, the name still said missing.
  assert.deepEqual(pickBaseline(runs, "baseline", "gone"), { base: null, missing: "gone", self: null });
  // None named: the default, nothing said.
  assert.deepEqual(pickBaseline(runs, "optimized", null), { base: "baseline", missing: null, self: null });
  // No run listed yet (TensorBoard still starting): nothing is said missing.
  assert.deepEqual(pickBaseline([], "optimized", "baseline"), { base: null, missing: null, self: null });
});

test("a run named as its own baseline is said, not replaced quietly", () => {
  const runs = ["baseline", "optimized", "other"];
  // The default is compared instead, and the view says why.
  assert.deepEqual(pickBaseline(runs, "optimized", "optimized"), { base: "baseline", missing: null, self: "optimized" });
  // The run named baseline picked as the run while it was the baseline: nothing to guess.
  assert.deepEqual(pickBaseline(runs, "baseline", "baseline"), { base: null, missing: null, self: "baseline" });
  // The default baseline (none named) picked as the run is said as a named one is.
  assert.deepEqual(pickBaseline(runs, "baseline", null, "baseline"), { base: null, missing: null, self: "baseline" });
  assert.deepEqual(pickBaseline(runs, "optimized", null, "baseline"), { base: "baseline", missing: null, self: null });
  assert.equal(
    selfBaselineText("baseline", null),
    'Run "baseline" cannot be its own baseline: a run compared with itself shows nothing. Pick another run as baseline.',
  );
  assert.equal(
    selfBaselineText("optimized", "baseline"),
    'Run "optimized" cannot be its own baseline: a run compared with itself shows nothing. Comparing with run "baseline" instead: pick another run as baseline to change it.',
  );
});

test("a baseline run's counterpart is the one other run of its name, not a baseline", () => {
  const runs = ["gpu_cnn_baseline", "gpu_cnn_optimized", "gpu_seg_baseline", "gpu_seg_optimized", "cnn_baseline"];
  assert.equal(counterpartOf(runs, "gpu_cnn_baseline"), "gpu_cnn_optimized");
  assert.equal(counterpartOf(runs, "cnn_baseline"), null); // no cnn_optimized
  assert.equal(counterpartOf(runs, "gpu_cnn_optimized"), null); // not a baseline
  assert.equal(counterpartOf(["baseline", "fixed", "optimized"], "baseline"), null); // two
  assert.equal(counterpartOf(["baseline", "optimized"], "baseline"), "optimized");
  assert.equal(counterpartOf([], null), null);
});

test("a compared Jupyter cell's site is named by its notebook and cell", async () => {
  const { compareLocation } = await import("../src/compare.js");
  const row = { file: "/tmp/ipykernel_9/1.py", line: 7, line_exact: true, cell: { notebook: "/w/nb/train.ipynb", index: 2, execution_count: 5 }, after: { lines: [7] } };
  assert.match(compareLocation(row), /train\.ipynb In\[5\]:7$/);
});

test("a new row in place of its function's fixed syncs names their lines and is no bad news", async () => {
  const { replacesText, rowTone } = await import("../src/compare.js");
  const fixed = { key: "chargpt.py:batch:aten::item:scalar_readback", status: "fixed", before: { lines: [122] }, after: null };
  const added = { key: "chargpt.py:batch:aten::to:device_to_host_copy", status: "new", replaces: [fixed.key], before: null, after: { lines: [121] } };
  assert.equal(replacesText(added, [added, fixed]), "in place of the syncs at line 122 (fewer syncs in this function than before)");
  assert.equal(rowTone(added), "neutral");
  // A new row of its own is a regression, as before.
  const alone = { ...added, replaces: [] };
  assert.equal(replacesText(alone, [alone, fixed]), null);
  assert.equal(rowTone(alone), "bad");
  assert.equal(rowTone(fixed), "good");
  // An older answer without the field.
  assert.equal(replacesText({ status: "new" }, []), null);
});
