import assert from "node:assert/strict";
import { test } from "node:test";
import { setCatalogue, syncSortOrder } from "../src/catalogue.js";
import {
  decodeState,
  defaultState,
  encodeState,
  hashNeedsRewrite,
  OCC_PAGE,
  OCC_SORTS,
  occSortWords,
  occurrencesParams,
  osortNeedsRewrite,
  patchState,
  stateFromTbHash,
  tbHashWithState,
} from "../src/state.js";

const SITE = "site=train.py%3A4%3Aaten%3A%3Aitem";

test("the occurrences' orders are as they ran, then the three costs", () => {
  assert.deepEqual(
    OCC_SORTS.map((o) => [o.key, o.label]),
    [
      ["", "as they ran"],
      ["predicted_saving_us", "largest saving"],
      ["host_wait_us", "longest host wait"],
      ["gpu_idle_after_us", "longest GPU idle after"],
    ],
  );
});

test("an osort in a link is kept when it is one of the orders, else read as none", () => {
  for (const key of ["predicted_saving_us", "host_wait_us", "gpu_idle_after_us"]) {
    assert.equal(decodeState(`#run=a&${SITE}&osort=${key}`).osort, key);
  }
  // Not an order the list offers (ts_us is as they ran: the default, written as none).
  for (const bad of ["line", "ts_us", "HOST_WAIT_US", "host_wait_us ", "", "%ZZ", "count"]) {
    assert.equal(decodeState(`#run=a&${SITE}&osort=${bad}`).osort, "", bad);
  }
  assert.equal(defaultState().osort, "");
});

test("the order is written before the page, and not at all as they ran", () => {
  const state = { ...defaultState(), run: "a", site: "train.py:4:aten::item", osort: "host_wait_us", occ: 400 };
  assert.equal(encodeState(state), `#run=a&${SITE}&osort=host_wait_us&occ=400`);
  assert.deepEqual(decodeState(encodeState(state)), state);
  assert.equal(encodeState({ ...state, osort: "" }), `#run=a&${SITE}&occ=400`);
  // In TensorBoard's address too, with the plugin's prefix.
  const tb = tbHashWithState("#sync_advisor", state);
  assert.match(tb, /&p\.sync_advisor\.osort=host_wait_us&p\.sync_advisor\.occ=400$/);
  assert.deepEqual(stateFromTbHash(tb), state);
});

test("a hash whose osort is not an order is written again without it", () => {
  for (const bad of ["line", "ts_us", "x"]) {
    const hash = `#run=a&${SITE}&osort=${bad}`;
    assert.equal(osortNeedsRewrite(hash, decodeState(hash)), true, bad);
    assert.equal(hashNeedsRewrite(hash, decodeState(hash)), true, bad);
    assert.equal(encodeState(decodeState(hash)), `#run=a&${SITE}`);
  }
  // Two of them, even valid ones: one only.
  const twice = `#run=a&${SITE}&osort=host_wait_us&osort=host_wait_us`;
  assert.equal(hashNeedsRewrite(twice, decodeState(twice)), true);
  // A valid one, or none, is left as it is; a malformed occ beside a valid osort still is not.
  for (const hash of [`#run=a&${SITE}&osort=gpu_idle_after_us&occ=200`, `#run=a&${SITE}`, ""]) {
    assert.equal(hashNeedsRewrite(hash, decodeState(hash)), false, hash);
  }
  const badOcc = `#run=a&${SITE}&osort=host_wait_us&occ=abc`;
  assert.equal(osortNeedsRewrite(badOcc, decodeState(badOcc)), false);
  assert.equal(hashNeedsRewrite(badOcc, decodeState(badOcc)), true);
  // TensorBoard's hash: the plugin's keys prefixed; another plugin's osort is not ours.
  const tb = `#sync_advisor&p.sync_advisor.run=a&p.sync_advisor.${SITE}&p.sync_advisor.osort=bogus`;
  const state = /** @type {any} */ (stateFromTbHash(tb));
  assert.equal(state.osort, "");
  assert.equal(hashNeedsRewrite(tb, state, true), true);
  assert.equal(hashNeedsRewrite("#scalars&osort=bogus", decodeState(""), true), false);
});

test("another order goes back to the first page; the order stays from one site to the next", () => {
  const state = { ...defaultState(), run: "r", site: "a.py:3:aten::item", osort: "host_wait_us", occ: 400 };
  assert.equal(patchState(state, { osort: "gpu_idle_after_us" }).occ, 0);
  assert.equal(patchState(state, { osort: "" }).occ, 0);
  assert.equal(patchState(state, { osort: "host_wait_us" }).occ, 400); // the same order
  assert.equal(patchState(state, { osort: "gpu_idle_after_us", occ: 200 }).occ, 200);
  assert.equal(patchState(state, { sync: "s1" }).occ, 400);
  const other = patchState(state, { site: "b.py:1:aten::nonzero", sync: null });
  assert.deepEqual([other.osort, other.occ], ["host_wait_us", 0]);
  assert.equal(patchState(state, { site: null, sync: null }).osort, "host_wait_us");
});

test("the syncs request sorts by the order picked, in the catalogue's direction", () => {
  const state = { site: "a.py:3:aten::item", step: null };
  const desc = () => /** @type {"desc"} */ ("desc");
  assert.deepEqual(occurrencesParams(state, { osort: "", latent: false, offset: 0, orderOf: desc }), {
    site: "a.py:3:aten::item",
    step: null,
    latent: null,
    sort: null,
    order: null,
    offset: 0,
    limit: OCC_PAGE,
  });
  const byWait = occurrencesParams({ ...state, step: 7 }, { osort: "host_wait_us", latent: false, offset: 200, orderOf: desc });
  assert.deepEqual([byWait.sort, byWait.order, byWait.step, byWait.offset], ["host_wait_us", "desc", 7, 200]);
  // The direction is the catalogue's, whatever it says.
  const asked = [];
  const orderOf = (/** @type {string} */ key) => {
    asked.push(key);
    return /** @type {"asc"} */ ("asc");
  };
  assert.equal(occurrencesParams(state, { osort: "gpu_idle_after_us", latent: false, offset: 0, orderOf }).order, "asc");
  assert.deepEqual(asked, ["gpu_idle_after_us"]);
  // Not an order: as they ran. Latent findings cost nothing: as they ran, whatever is picked.
  for (const [osort, latent] of [["bogus", false], ["host_wait_us", true]]) {
    const p = occurrencesParams(state, { osort: /** @type {string} */ (osort), latent: /** @type {boolean} */ (latent), offset: 0, orderOf: desc });
    assert.deepEqual([p.sort, p.order], [null, null], String(osort));
  }
  assert.equal(occurrencesParams(state, { osort: "", latent: true, offset: 0, orderOf: desc }).latent, 1);
});

test("the direction of an order comes from the catalogue's sync_sorts", () => {
  setCatalogue(null);
  assert.equal(syncSortOrder("host_wait_us"), "desc"); // before it loads: costs largest first
  setCatalogue({ kinds: [], sync_sorts: { ts_us: "asc", host_wait_us: "desc", gpu_idle_after_us: "asc" } });
  assert.equal(syncSortOrder("ts_us"), "asc");
  assert.equal(syncSortOrder("host_wait_us"), "desc");
  assert.equal(syncSortOrder("gpu_idle_after_us"), "asc");
  assert.equal(syncSortOrder("not_served"), "desc");
  setCatalogue({ kinds: [], sync_sorts: "nonsense" });
  assert.equal(syncSortOrder("gpu_idle_after_us"), "desc");
  setCatalogue(null);
});

test("an NPU run's occurrences are ordered by the NPU's idle, in those words", () => {
  assert.deepEqual(occSortWords("gpu_idle_after_us", "NPU"), { label: "longest NPU idle after", range: "longest NPU idle after first" });
  assert.equal(occSortWords("gpu_idle_after_us").label, "longest GPU idle after");
  assert.equal(occSortWords("no such order", "NPU").range, "in the order they ran");
});
