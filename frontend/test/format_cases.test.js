// The figures the CLI prints and the dashboard shows must read the same: both format from
// one table of cases (tests/format_cases.json, also read by tests/test_number_formats.py).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { formatPct, formatUs } from "../src/format.js";

const cases = JSON.parse(readFileSync(new URL("../../tests/format_cases.json", import.meta.url), "utf8"));

test("durations read as the CLI prints them", () => {
  for (const [us, text] of cases.us) assert.equal(formatUs(us), text, `formatUs(${us})`);
});

test("shares read as the CLI prints them", () => {
  for (const [share, text] of cases.share) assert.equal(formatPct(share), text, `formatPct(${share})`);
});
