import assert from "node:assert/strict";
import { test } from "node:test";
import { spanLabels } from "../src/format.js";
import { nothingReadable, otherRunsUnreadable, readableCount, repairNotices, runOptionLabel, runUnreadable, selectionName, unreadableBanner } from "../src/repairs.js";

test("a repaired trace gets a notice naming the file and every repair", () => {
  const { notices, more } = repairNotices([
    { path: "run/a.pt.trace.json", repairs: ["escaped backslashes in Windows paths", "skipped 3 malformed events"] },
    { path: "run/b.pt.trace.json", repairs: [] },
  ]);
  assert.deepEqual(notices, [
    {
      path: "run/a.pt.trace.json",
      text: "read with repairs: escaped backslashes in Windows paths; skipped 3 malformed events",
    },
  ]);
  assert.equal(more, 0);
});

test("unreadable traces and traces without repairs get no repair notice", () => {
  const { notices } = repairNotices([
    { path: "bad.json", error: "invalid JSON", repairs: ["quoted N/A values"] },
    { path: "old.json" }, // a report from before the field existed
    { path: "odd.json", repairs: [null, ""] },
  ]);
  assert.deepEqual(notices, []);
  assert.deepEqual(repairNotices(undefined), { notices: [], more: 0 });
});

test("beyond the limit repaired files are counted, not listed", () => {
  const traces = Array.from({ length: 7 }, (_, i) => ({ path: `t${i}.json`, repairs: ["quoted N/A values"] }));
  const { notices, more } = repairNotices(traces, 5);
  assert.deepEqual(notices.map((n) => n.path), ["t0.json", "t1.json", "t2.json", "t3.json", "t4.json"]);
  assert.equal(more, 2);
});

test("a run whose every trace failed says none could be read, open; otherwise the others are analysed", () => {
  assert.deepEqual(unreadableBanner(1, 1), { all: true, title: "No trace of this run could be read", open: true });
  assert.deepEqual(unreadableBanner(3, 3), { all: true, title: "No trace of this run could be read (3 files)", open: true });
  const some = unreadableBanner(2, 1);
  assert.equal(some.all, false);
  assert.equal(some.open, false);
  assert.equal(some.title, "1 trace file of this run could not be read (the others are analysed)");
  assert.equal(unreadableBanner(5, 2).title, "2 trace files of this run could not be read (the others are analysed)");
  // Every file of the run still being written: not a broken run.
  assert.equal(unreadableBanner(1, 1, 1).title, "The trace of this run is still being written");
  assert.equal(unreadableBanner(2, 2, 1).title, "No trace of this run could be read (2 files)");
});

test("a selection is unreadable only when it has traces and each failed", () => {
  assert.equal(nothingReadable([{ path: "a", error: "truncated JSON" }]), true);
  assert.equal(nothingReadable([{ path: "a", error: "truncated JSON" }, { path: "b", error: null }]), false);
  assert.equal(nothingReadable([]), false);
  assert.equal(nothingReadable(undefined), false);
  assert.equal(readableCount([{ error: "x" }, { error: null }, {}]), 2);
  assert.equal(readableCount(undefined), null);
});

test("a run picker names a run unreadable as a whole, or counts its unreadable files", () => {
  const run = (error_count, trace_count = 2, loading = false) => ({ name: "r", error_count, trace_count, loading });
  assert.equal(runOptionLabel(run(0)), "r");
  assert.equal(runOptionLabel(run(1)), "r (1 unreadable)");
  assert.equal(runOptionLabel(run(2)), "r (unreadable)");
  assert.equal(runOptionLabel(run(2, 2, true)), "r (loading…)");
  assert.equal(runUnreadable(run(2)), true);
  assert.equal(runUnreadable(run(1)), false);
  assert.equal(runUnreadable({ trace_count: 0, error_count: 0 }), false);
  assert.equal(runUnreadable(null), false);
});

test("a selection is named as a sentence says it", () => {
  assert.equal(selectionName({ worker: null, span: null }), "this run");
  assert.equal(selectionName({ worker: null, span: null }, 'run "a"'), 'run "a"');
  assert.equal(selectionName({ worker: "w0", span: null }), "worker w0");
  assert.equal(selectionName({ worker: "w0", span: "17" }), "span 17 of worker w0");
});

test("a span of epoch milliseconds is named by its date-time, as the span selector names it", () => {
  const date = (/** @type {string} */ ms) => spanLabels([ms]).get(ms);
  const one = "1700000000000";
  assert.match(date(one) ?? "", /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);
  // An unreadable span (its traces could not be read) is named as a readable one is.
  assert.equal(selectionName({ worker: "w0", span: one }), `span ${date(one)} of worker w0`);
  // Two spans in one second: to the millisecond, as the selector lists the worker's spans.
  const spans = [one, "1700000000250"];
  const labels = spanLabels(spans);
  assert.equal(selectionName({ worker: "w0", span: one }, "this run", spans), `span ${labels.get(one)} of worker w0`);
  assert.match(labels.get(one) ?? "", /\.000$/);
  assert.ok(!selectionName({ worker: "w0", span: one }, "this run", spans).includes(one));
});

test("a selection still loading with no analysed trace shows only the loading state", async () => {
  const { awaitingFirstTrace } = await import("../src/repairs.js");
  assert.equal(awaitingFirstTrace({ loading: true, traces: [] }), true);
  assert.equal(awaitingFirstTrace({ loading: true }), true);
  // a failed trace is no analysed trace
  assert.equal(awaitingFirstTrace({ loading: true, traces: [{ path: "a", error: "bad" }] }), true);
  assert.equal(awaitingFirstTrace({ loading: true, traces: [{ path: "a" }] }), false);
  assert.equal(awaitingFirstTrace({ loading: false, traces: [] }), false);
});

test("unreadable files of other runs are counted with the runs named", () => {
  assert.equal(otherRunsUnreadable([{ run: "broken" }, { run: "broken" }]), '2 trace files of run "broken" could not be read: choose the run to see why.');
  assert.equal(otherRunsUnreadable([{ run: "a" }, { run: "b" }]), '2 trace files of runs "a", "b" could not be read: choose the run to see why.');
  assert.equal(
    otherRunsUnreadable(["a", "b", "c", "d", "e"].map((run) => ({ run }))),
    '5 trace files of runs "a", "b", "c" and 2 more could not be read: choose the run to see why.',
  );
});
