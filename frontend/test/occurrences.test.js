import assert from "node:assert/strict";
import { test } from "node:test";
import { decodeState, defaultState, encodeState, occurrencePages, patchState } from "../src/state.js";

test("the occurrences list pages through every occurrence", () => {
  const first = occurrencePages(5988, 0);
  assert.deepEqual([first.from, first.to, first.page, first.pages], [1, 200, 1, 30]);
  assert.deepEqual([first.first, first.prev, first.next, first.last], [null, null, 200, 5800]);
  const last = occurrencePages(5988, first.last ?? 0);
  assert.deepEqual([last.from, last.to, last.page], [5801, 5988, 30]);
  assert.deepEqual([last.prev, last.next, last.last], [5600, null, null]);
  // Walking "next" reaches every occurrence once.
  let seen = 0;
  for (let at = /** @type {number | null} */ (0); at !== null; at = occurrencePages(5988, at).next) {
    const p = occurrencePages(5988, at);
    seen += p.to - p.from + 1;
  }
  assert.equal(seen, 5988);
  // An offset past the end (the list shrank) shows the last page; inside a page, its start.
  assert.equal(occurrencePages(450, 10_000).offset, 400);
  assert.equal(occurrencePages(450, 250).offset, 200);
  assert.deepEqual([occurrencePages(0, 0).from, occurrencePages(0, 0).to, occurrencePages(0, 0).pages], [0, 0, 1]);
});

test("the occurrences page is in the link, and goes back to the first for another list", () => {
  const state = { ...defaultState(), run: "r", site: "a.py:3:aten::item", occ: 400 };
  assert.match(encodeState(state), /&occ=400$/);
  assert.equal(decodeState(encodeState(state)).occ, 400);
  assert.equal(decodeState("#occ=-5").occ, 0);
  assert.equal(decodeState("#occ=x").occ, 0);
  assert.equal(encodeState({ ...state, occ: 0 }).includes("occ"), false);
  // Another occurrence of the same site, a sort, a filter: the page stays.
  assert.equal(patchState(state, { sync: "s9" }).occ, 400);
  assert.equal(patchState(state, { sort: "count", order: "desc" }).occ, 400);
  assert.equal(patchState(state, { q: "item" }).occ, 400);
  assert.equal(patchState(state, { site: state.site, sync: null }).occ, 400);
  // Another site, step, worker or run lists other occurrences.
  assert.equal(patchState(state, { site: "b.py:1:aten::nonzero", sync: null }).occ, 0);
  assert.equal(patchState(state, { step: 7 }).occ, 0);
  assert.equal(patchState(state, { worker: "w1", span: null, site: null }).occ, 0);
  assert.equal(patchState(state, { run: "other" }).occ, 0);
  assert.equal(patchState(state, { occ: 600 }).occ, 600);
});
