import assert from "node:assert/strict";
import { test } from "node:test";
import { decodeState, encodeState, occNeedsRewrite, occPagePatch, stateFromTbHash } from "../src/state.js";

const SITE = "site=train.py%3A9%3Aaten%3A%3Aitem";

test("an occ that is not plain digits reads as the first page", () => {
  for (const occ of ["abc", "-5", "1e3", "0x10", " 200", "2.5", ""]) {
    assert.equal(decodeState(`#${SITE}&occ=${occ}`).occ, 0, occ);
  }
});

test("an occ inside a page reads as that page's start, a huge one as the plugin's largest offset", () => {
  assert.equal(decodeState(`#${SITE}&occ=250`).occ, 200);
  assert.equal(decodeState(`#${SITE}&occ=5800`).occ, 5800);
  // The plugin refuses offsets past 10^9: the list then goes to its last page from there.
  assert.equal(decodeState(`#${SITE}&occ=99999999999`).occ, 1e9);
});

test("an occ without a site means nothing and reads as none", () => {
  assert.equal(decodeState("#run=a&occ=400").occ, 0);
});

test("a hash is written again when its occ is not what the state it decodes to writes", () => {
  for (const occ of ["abc", "-5", "250", "1e3", "99999999999"]) {
    const hash = `#run=a&${SITE}&occ=${occ}`;
    assert.equal(occNeedsRewrite(hash, decodeState(hash)), true, occ);
  }
  assert.equal(occNeedsRewrite("#run=a&occ=400", decodeState("#run=a&occ=400")), true);
  // Two of them, even valid ones: one only.
  const twice = `#run=a&${SITE}&occ=200&occ=400`;
  assert.equal(occNeedsRewrite(twice, decodeState(twice)), true);
  // A valid one, or none, is left as it is.
  for (const hash of [`#run=a&${SITE}&occ=400`, `#run=a&${SITE}`, "", "#run=a"]) {
    assert.equal(occNeedsRewrite(hash, decodeState(hash)), false, hash);
  }
  // What is written holds only the valid value.
  assert.equal(encodeState(decodeState(`#run=a&${SITE}&occ=250`)), `#run=a&${SITE}&occ=200`);
  assert.equal(encodeState(decodeState(`#run=a&${SITE}&occ=abc`)), `#run=a&${SITE}`);
});

test("so is TensorBoard's hash, whose keys are the plugin's prefixed", () => {
  const bad = `#sync_advisor&p.sync_advisor.run=a&p.sync_advisor.${SITE}&p.sync_advisor.occ=-5`;
  const state = /** @type {any} */ (stateFromTbHash(bad));
  assert.equal(state.occ, 0);
  assert.equal(occNeedsRewrite(bad, state, true), true);
  const good = `#sync_advisor&p.sync_advisor.run=a&p.sync_advisor.${SITE}&p.sync_advisor.occ=200`;
  assert.equal(occNeedsRewrite(good, /** @type {any} */ (stateFromTbHash(good)), true), false);
  // Another plugin's occ is not ours.
  const other = `#scalars&run=a&occ=abc`;
  assert.equal(occNeedsRewrite(other, decodeState(""), true), false);
});

test("another page or order of the occurrences names the occurrence still shown when the URL names another or none", () => {
  // None named: a reload would show the first one listed, so the one shown is written.
  assert.deepEqual(occPagePatch({ occ: 200 }, null, "s1"), { occ: 200, sync: "s1" });
  assert.deepEqual(occPagePatch({ osort: "host_wait_us", occ: 0 }, null, "s1"), { osort: "host_wait_us", occ: 0, sync: "s1" });
  // Another one named (not this site's): the one shown.
  assert.deepEqual(occPagePatch({ occ: 0 }, "gone", "s1"), { occ: 0, sync: "s1" });
  // The one shown named already, or nothing shown: the page only.
  assert.deepEqual(occPagePatch({ occ: 400 }, "s1", "s1"), { occ: 400 });
  assert.deepEqual(occPagePatch({ occ: 400 }, null, null), { occ: 400 });
});

test("a step time in a link that is no step time is said, not dropped without a word", async () => {
  const { decodeState, linkStepTimeProblem } = await import("../src/state.js");
  const bad = "#run=r&unprof=-5";
  assert.match(linkStepTimeProblem(bad, decodeState(bad)), /"-5" is not a step time/);
  const far = "#run=r&unprof=9e9";
  assert.match(linkStepTimeProblem(far, decodeState(far)), /outside the step times the replay takes/);
  const good = "#run=r&unprof=14.51";
  assert.equal(linkStepTimeProblem(good, decodeState(good)), null);
  assert.equal(linkStepTimeProblem("#run=r", decodeState("#run=r")), null);
});
