import assert from "node:assert/strict";
import { test } from "node:test";
import { compareColumns, summaryRows, UNIT_WORDS } from "../src/compare.js";

const gpu = {
  step_count: 4,
  sync_count: 8,
  syncs_per_step: 2,
  host_wait_us: 4000,
  gpu_idle_us: 800,
  share_of_step: 0.375,
  mean_wall_step_time_us: 3200,
  saving_method: "replay",
  latent_count: 0,
};
const gpuAfter = { ...gpu, sync_count: 4, syncs_per_step: 1, host_wait_us: 1000, gpu_idle_us: 200, mean_wall_step_time_us: 3060 };

/** @param {ReturnType<typeof summaryRows>} groups */
const byId = (groups) => Object.fromEntries(groups.flatMap((g) => g.rows.map((r) => [r.id, { ...r, unit: g.unit }])));

test("the summary's rows are grouped by unit: means per step, then the whole run's totals", () => {
  const groups = summaryRows({ base: gpu, new: gpuAfter, predictedUs: 150, measuredUs: 140 });
  assert.deepEqual(
    groups.map((g) => g.unit),
    ["step", "run"],
  );
  // Each group's heading names its unit.
  assert.match(groups[0].title, /^Per step/);
  assert.match(groups[1].title, /^Whole run/);
  const rows = byId(groups);
  // Per-step figures under "per step"...
  for (const id of ["step-time", "saving", "syncs"]) assert.equal(rows[id].unit, "step", id);
  // ...the run's totals (they grow with the steps profiled) under "whole run", with the
  // number of steps they are over.
  for (const id of ["steps", "host-wait", "gpu-idle", "share"]) assert.equal(rows[id].unit, "run", id);
  assert.equal(rows.steps.before, "4");
  assert.equal(rows["host-wait"].before, "4.00 ms");
  assert.equal(rows.syncs.before, "2");
  assert.equal(rows.syncs.after, "1");
});

test("no row says its own unit: the group heading does, the same way for every row", () => {
  const groups = summaryRows({ base: { ...gpu, latent_count: 3 }, new: gpuAfter, predictedUs: 150, measuredUs: 140 });
  for (const g of groups) {
    for (const r of g.rows) assert.doesNotMatch(r.label, /per step|whole run|total/i, r.label);
  }
  // The latent row (a count per step) is with the other per-step figures.
  assert.equal(byId(groups).latent.unit, "step");
  assert.equal(byId(groups).latent.before, "0.75");
});

test("a CPU-only side's costs read as not measured, and there is no saving row", () => {
  const cpu = { step_count: 2, sync_count: 0, syncs_per_step: 0, host_wait_us: 0, gpu_idle_us: 0, share_of_step: 0, mean_step_time_us: 900, latent_count: 4 };
  const rows = byId(summaryRows({ base: cpu, new: gpuAfter, predictedUs: 150, measuredUs: 140, cpuBase: true }));
  assert.equal(rows.saving, undefined);
  assert.equal(rows["host-wait"].before, "–");
  assert.equal(rows.syncs.before, "–");
  assert.equal(rows["host-wait"].after, "1.00 ms");
  // Step time and step count are measured on a CPU too.
  assert.equal(rows["step-time"].before, "900 µs");
  assert.equal(rows.steps.before, "2");
  assert.equal(rows.latent.before, "2");
});

test("the compared sites' headers say each figure's unit, in the summary's words", () => {
  const heads = (/** @type {boolean} */ byCount) =>
    compareColumns(byCount)
      .filter((c) => c.unit)
      .map((c) => [c.label, c.unit && UNIT_WORDS[c.unit]]);
  // Whole-run counts beside per-step costs: never a bare "Count" next to "Cost/step".
  assert.deepEqual(heads(false), [
    ["Syncs before", "whole run"],
    ["Syncs after", "whole run"],
    ["Cost before", "per step"],
    ["Cost after", "per step"],
    ["Change", "per step"],
  ]);
  // Compared by count (a CPU-only run): both are syncs, one over the run, one per step.
  assert.deepEqual(heads(true), [
    ["Syncs before", "whole run"],
    ["Syncs after", "whole run"],
    ["Syncs before", "per step"],
    ["Syncs after", "per step"],
    ["Change", "per step"],
  ]);
  // The same words as the summary's group headings, whose units they are.
  const titles = Object.fromEntries(summaryRows({ base: gpu, new: gpuAfter }).map((g) => [g.unit, g.title.toLowerCase()]));
  assert.ok(titles.step.startsWith(UNIT_WORDS.step), titles.step);
  assert.ok(titles.run.startsWith(UNIT_WORDS.run), titles.run);
  // Each figure's tooltip says which run and over what.
  const cost = compareColumns(false).find((c) => c.id === "cost-after");
  assert.match(cost?.title ?? "", /^This run: host wait \+ GPU idle after the syncs, per step \(mean of the profiled steps\)$/);
  const count = compareColumns(false).find((c) => c.id === "count-before");
  assert.equal(count?.title, "Baseline: syncs over the whole run (all profiled steps)");
  assert.deepEqual(
    compareColumns(false).map((c) => c.id),
    ["status", "location", "func", "kind", "count-before", "count-after", "cost-before", "cost-after", "change"],
  );
});

test("the saving row predicts what was fixed, not every sync, when only some sites were", async () => {
  const { savingTexts } = await import("../src/compare.js");
  const fixedRow = { status: "fixed", before: { lines: [277] }, after: null, lines_fixed: [] };
  const sameRow = { status: "same", before: { lines: [283] }, after: { lines: [283] }, lines_fixed: [] };
  const some = savingTexts(gpu, 4580, 11400, { sites: [sameRow, fixedRow], every_site_fixed: false, predicted_saving_of_fixed_us: 20, measured_saving_median_us: 8350 });
  assert.match(some.span, /^predicted ~20 µs by the baseline's replay for what was fixed \(1 site; its own prediction; every baseline sync: ~4\.58 ms\)/);
  // The mean of a few profiled steps and their median disagree: both are said.
  assert.match(some.span, /measured 11\.4 ms between the runs \(mean steps; from the median steps 8\.35 ms\)$/);
  const all = savingTexts(gpu, 4580, 4300, { sites: [fixedRow, { ...fixedRow }], every_site_fixed: true, predicted_saving_of_fixed_us: 4400, measured_saving_median_us: 4310 });
  assert.equal(all.span, "predicted ~4.58 ms by the baseline's replay (every baseline site fixed); measured 4.30 ms between the runs");
  const none = savingTexts(gpu, 3040, 0, { sites: [sameRow], every_site_fixed: false, predicted_saving_of_fixed_us: null, measured_saving_median_us: 0 });
  assert.match(none.span, /^no site fixed \(every baseline sync fixed: predicted ~3\.04 ms\); measured 0 µs/);
  // A line fixed in a row still there (one function's .cpu() and .tolist()) is a fix too.
  const line = savingTexts(gpu, 4370, 0, { sites: [{ status: "better", before: { lines: [199, 204] }, after: { lines: [204] }, lines_fixed: [199] }], every_site_fixed: false, predicted_saving_of_fixed_us: 287, measured_saving_median_us: 0 });
  assert.match(line.span, /^predicted ~287 µs by the baseline's replay for what was fixed \(1 line of a site still there; its own prediction;/);
  // A baseline with nothing to fix: no "every sync fixed" beside the new run's syncs.
  const nothing = savingTexts(gpu, 0, -14400, { sites: [{ status: "new", before: null, after: { lines: [283] }, lines_fixed: [] }], every_site_fixed: false, predicted_saving_of_fixed_us: null });
  assert.match(nothing.span, /^the baseline had no sync to fix; measured/);
  // A fixed site without a prediction of its own (an older report): not "no site fixed".
  const unpredicted = savingTexts(gpu, 4580, 100, { sites: [sameRow, fixedRow], every_site_fixed: false, predicted_saving_of_fixed_us: null });
  assert.match(unpredicted.span, /^1 site fixed, without a prediction of its own/);
  // An older server's answer has none of these fields: the all-syncs figure, as before.
  assert.match(savingTexts(gpu, 150, 140, null).span, /^predicted ~150 µs by the baseline's replay; measured 140 µs/);
});

test("a compared site marks a line that is not the call's, and the lines a fix removed", async () => {
  const { compareLocation } = await import("../src/compare.js");
  const row = { file: "train.py", line: 204, line_exact: false, before: { lines: [199, 204] }, after: { lines: [204] } };
  assert.equal(compareLocation(row), "train.py:204* (before: 199,204)");
  assert.equal(compareLocation({ ...row, line_exact: true, before: { lines: [204] } }), "train.py:204");
});

test("an NPU baseline's saving is not predicted in the compare view, nor its idle shown as 0", async () => {
  const { savingTexts, summaryRows } = await import("../src/compare.js");
  const npu = { saving_method: "bound", gpu_idle_measured: false, gpu_idle_us: 0, mean_wall_step_time_us: 1000 };
  const texts = savingTexts(npu, 522, 10, { sites: [{ status: "fixed", before: { predicted_saving_per_step_us: 2 } }], every_site_fixed: false, predicted_saving_of_fixed_us: 2, measured_saving_median_us: 10 });
  assert.match(texts.span, /^not predicted/);
  assert.doesNotMatch(texts.span, /≤/);
  const idle = summaryRows({ base: npu, new: npu }).flatMap((g) => g.rows).find((r) => r.id === "gpu-idle");
  assert.equal(idle.before, "not measured");
});

test("two NPU runs compared say the NPU idled; a GPU run beside an NPU run, the device", async () => {
  const { compareColumns, compareIdleOn, summaryRows } = await import("../src/compare.js");
  const npu = { device: "npu" };
  const gpuRun = { device: "cuda" };
  assert.equal(compareIdleOn(npu, npu), "NPU");
  assert.equal(compareIdleOn(gpuRun, npu), "device");
  assert.equal(compareIdleOn(gpuRun, gpuRun), "GPU");
  assert.equal(compareIdleOn(null, gpuRun), "GPU");
  const idle = summaryRows({ base: gpu, new: gpuAfter, idleOn: "NPU" }).flatMap((g) => g.rows).find((r) => r.id === "gpu-idle");
  assert.equal(idle.label, "NPU idle after syncs");
  const titles = compareColumns(false, "NPU").map((c) => c.title || "").join(" ");
  assert.match(titles, /NPU idle after/);
  assert.doesNotMatch(titles, /GPU/);
});

test("an NPU run against a GPU run: no predicted-vs-measured row, a neutral headline naming both", async () => {
  const { compareHeadline, summaryRows } = await import("../src/compare.js");
  const rows = summaryRows({ base: gpu, new: gpuAfter, predictedUs: 150, measuredUs: 15700, mixed: true }).flatMap((g) => g.rows);
  assert.equal(rows.find((r) => r.id === "saving"), undefined);
  const head = compareHeadline({ latent: false, mixed: true, npuAndGpu: true, changeUs: -15700, counts: { fixed: 2, new: 2 } });
  assert.equal(head.tone, "neutral");
  assert.match(head.note, /^An NPU run and a GPU run: their step times do not compare/);
});

test("the median steps' saving is said whichever run is the baseline", async () => {
  const { savingTexts } = await import("../src/compare.js");
  const seg = { ...gpu, mean_wall_step_time_us: 15800 };
  const optimized = { ...gpu, mean_wall_step_time_us: 13070 };
  const all = { sites: [], every_site_fixed: true, predicted_saving_of_fixed_us: 3040 };
  assert.match(savingTexts(seg, 3040, 2730, { ...all, measured_saving_median_us: 1200 }).span, /from the median steps 1\.20 ms/);
  assert.match(savingTexts(optimized, 0, -2730, { ...all, measured_saving_median_us: -1200 }).span, /from the median steps/);
});

test("the median rule takes the longer of the two runs' steps, so swapping them changes nothing", async () => {
  const { savingTexts } = await import("../src/compare.js");
  const s40 = { ...gpu, mean_wall_step_time_us: 40000 };
  const s60 = { ...gpu, mean_wall_step_time_us: 60000 };
  const said = (base, other, mean, median) => /median steps/.test(savingTexts(base, 0, mean, { sites: [], every_site_fixed: false, new: other, measured_saving_median_us: median }).span);
  assert.equal(said(s40, s60, 1000, 2000), said(s60, s40, -1000, -2000));
});
