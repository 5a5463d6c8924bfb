import assert from "node:assert/strict";
import { test } from "node:test";
import { repairNotices } from "../src/repairs.js";

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
