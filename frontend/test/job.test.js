import assert from "node:assert/strict";
import { test } from "node:test";

import { lateCell } from "../src/job.js";

test("a rank that held the others reads +, one that waited reads −, absent reads ·", () => {
  assert.deepEqual(lateCell({ late_us: 80000, wait_us: 0 }), { text: "+80.0 ms", cls: "sa-job-late" });
  assert.deepEqual(lateCell({ late_us: 0, wait_us: 4000 }), { text: "\u22124.00 ms", cls: "sa-job-wait" });
  assert.deepEqual(lateCell(undefined), { text: "·", cls: "sa-job-none" });
  assert.deepEqual(lateCell({ late_us: 0, wait_us: 0 }), { text: "0", cls: "sa-job-none" });
});
