import assert from "node:assert/strict";
import { test } from "node:test";
import { clearCache, getJson } from "../src/api.js";

/** A fetch that answers `body` (200) and counts its calls. */
function stubFetch(body) {
  const calls = [];
  globalThis.fetch = async (url) => {
    calls.push(url);
    return { ok: true, status: 200, json: async () => body };
  };
  return calls;
}

test("an answer that says the file is missing is not kept: the next view asks again", async () => {
  clearCache();
  const calls = stubFetch({ file: "gone.py", line: 3, lines: [], missing: true, error: "gone.py: not found" });
  const keep = (body) => !body?.missing;
  const params = { file: "gone.py", line: 3, context: 5, missing_ok: 1 };
  const first = await getJson("source", params, { keep });
  assert.equal(first.missing, true);
  await getJson("source", params, { keep });
  assert.equal(calls.length, 2);
  assert.match(calls[0], /^source\?.*missing_ok=1/);
});

test("a served answer is kept as before", async () => {
  clearCache();
  const calls = stubFetch({ file: "a.py", line: 1, start: 1, lines: ["x = 1"], missing: false });
  const keep = (body) => !body?.missing;
  await getJson("source", { file: "a.py", line: 1 }, { keep });
  await getJson("source", { file: "a.py", line: 1 }, { keep });
  await getJson("source", { file: "a.py", line: 1 });
  assert.equal(calls.length, 1);
});
