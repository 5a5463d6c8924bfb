import assert from "node:assert/strict";
import { test } from "node:test";
import { choiceNeedsRewrite, decodeState, encodeState, hashNeedsRewrite, missingWorkerOrSpan, stateFromTbHash } from "../src/state.js";

// A review: a link naming an unknown view, order or step showed the default view and kept
// the value in the address, which "Copy link" passed on.
test("a view, order or step the state does not hold makes the address be written again", () => {
  for (const bad of ["view=bogus", "sort=Bad-Key", "order=sideways", "step=abc", "step=1.5", "view=hotspots&view=compare"]) {
    const hash = `#run=r&${bad}`;
    assert.equal(hashNeedsRewrite(hash, decodeState(hash)), true, bad);
    const written = encodeState(decodeState(hash));
    assert.equal(hashNeedsRewrite(written, decodeState(written)), false, `${bad} -> ${written}`);
  }
});

test("valid choices, written or left to their defaults, leave the address as it is", () => {
  for (const good of ["", "view=compare", "view=hotspots", "sort=count", "order=asc", "order=desc", "step=3", "step=0"]) {
    const hash = `#run=r&${good}`;
    assert.equal(choiceNeedsRewrite(hash, decodeState(hash)), false, good);
  }
});

test("TensorBoard's address is checked with the plugin's keys prefixed", () => {
  const hash = "#sync_advisor&p.sync_advisor.run=r&p.sync_advisor.view=bogus";
  const state = stateFromTbHash(hash);
  assert.ok(state);
  assert.equal(hashNeedsRewrite(hash, state, true), true);
  assert.equal(hashNeedsRewrite("#sync_advisor&p.sync_advisor.run=r", stateFromTbHash("#sync_advisor&p.sync_advisor.run=r"), true), false);
});

const RUN = { name: "base", workers: [{ name: "w0", spans: [null] }, { name: "w1", spans: ["1", "2"] }] };

test("a worker the run does not have is dropped with its span, saying the whole run is shown", () => {
  const fix = missingWorkerOrSpan(RUN, "nobody", "1");
  assert.deepEqual(fix, { what: 'Worker "nobody"', where: 'run "base"', outcome: "showing the whole run", patch: { worker: null, span: null } });
});

test("a span the worker does not have is dropped, keeping the worker", () => {
  const fix = missingWorkerOrSpan(RUN, "w1", "123");
  assert.deepEqual(fix?.patch, { span: null });
  assert.equal(fix?.where, 'worker w1 of run "base"');
  assert.equal(fix?.outcome, "showing all of worker w1");
  assert.equal(missingWorkerOrSpan(RUN, "w1", "2"), null);
  assert.equal(missingWorkerOrSpan(RUN, "w0", null), null);
  assert.equal(missingWorkerOrSpan(RUN, null, null), null);
});

test("a span without a worker selects nothing and is dropped", () => {
  assert.deepEqual(missingWorkerOrSpan(RUN, null, "1")?.patch, { span: null });
});
