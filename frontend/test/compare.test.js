import assert from "node:assert/strict";
import { test } from "node:test";
import { changeText, countByStatus, sideCost, sortCompareSites, stepTimeChange, STATUS_TONE } from "../src/compare.js";

const site = (key, status, before, after) => ({ key, status, file: `${key}.py`, line: 1, before, after });
const cost = (w, i, count = 1) => ({ count, host_wait_us: w, gpu_idle_us: i });

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

test("cost of a side is host wait plus GPU idle, per step when given", () => {
  assert.equal(sideCost(cost(100, 50)), 150);
  assert.equal(sideCost({ host_wait_us: 999, gpu_idle_us: 1, cost_per_step_us: 15 }), 15);
  assert.equal(sideCost(null), 0);
});

test("change text says what a fix saved and what a regression costs", () => {
  assert.equal(changeText(site("a", "fixed", cost(1000, 200), null)), "gone: saves 1.20 ms");
  assert.equal(changeText(site("b", "new", null, cost(300, 0))), "new: costs 300 µs");
  assert.equal(changeText(site("c", "better", cost(1000, 0), cost(550, 0))), "\u2212450 µs (\u221245 %)");
  assert.equal(changeText(site("d", "worse", cost(100, 0), cost(200, 0))), "+100 µs (+100 %)");
});

test("step time change is good news when negative and bad when positive", () => {
  assert.deepEqual(stepTimeChange(-2500), { text: "steps faster by 2.50 ms", tone: "good" });
  assert.deepEqual(stepTimeChange(800), { text: "steps slower by 800 µs", tone: "bad" });
  assert.equal(stepTimeChange(0).tone, "neutral");
  assert.equal(stepTimeChange(null).tone, "neutral");
  assert.equal(STATUS_TONE.fixed, "good");
  assert.equal(STATUS_TONE.worse, "bad");
});

test("latent sites are described by syncs per step, not by cost", () => {
  const fixed = { status: "fixed", before: { per_step: 3, cost_per_step_us: 0 }, after: null };
  assert.equal(changeText(fixed, { latent: true }), "gone: 3 fewer syncs per step");
  const same = { status: "same", before: { per_step: 2 }, after: { per_step: 2 } };
  assert.equal(changeText(same, { latent: true }), "2 → 2 per step");
});
