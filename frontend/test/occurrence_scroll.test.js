import assert from "node:assert/strict";
import { test } from "node:test";
import { scrollToShow } from "../src/layout.js";

// The occurrences list: 180 px high, a 26 px sticky header, 200 rows of 25 px.
const list = { clientHeight: 180, scrollHeight: 26 + 200 * 25, header: 26 };
const row = (i) => ({ top: 26 + i * 25, height: 25 });

test("a row already wholly in view below the header leaves the list where it is", () => {
  assert.equal(scrollToShow(row(0), { ...list, scrollTop: 0 }), null);
  assert.equal(scrollToShow(row(5), { ...list, scrollTop: 0 }), null); // 151..176 of 0..180
  assert.equal(scrollToShow(row(100), { ...list, scrollTop: 2500 }), null);
});

test("a row out of view is scrolled to the middle of the list, below its header", () => {
  const to = /** @type {number} */ (scrollToShow(row(150), { ...list, scrollTop: 0 }));
  assert.notEqual(to, null);
  const top = row(150).top - to;
  // Wholly in view, under the header, and about as far from the top as from the bottom.
  assert.ok(top >= list.header && top + 25 <= list.clientHeight, `${top}`);
  assert.ok(Math.abs(top - list.header - (list.clientHeight - top - 25)) <= 1, `${top}`);
  // A row above the view (behind the header) comes back down the same way.
  const back = /** @type {number} */ (scrollToShow(row(3), { ...list, scrollTop: 2000 }));
  assert.ok(row(3).top - back >= list.header);
  // A row half hidden by the sticky header counts as out of view.
  assert.notEqual(scrollToShow(row(10), { ...list, scrollTop: row(10).top - 10 }), null);
});

test("near the ends the list scrolls only as far as it can", () => {
  assert.equal(scrollToShow(row(199), { ...list, scrollTop: 0 }), list.scrollHeight - list.clientHeight);
  assert.equal(scrollToShow(row(1), { ...list, scrollTop: 3000 }), 0);
});
