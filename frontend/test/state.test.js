import assert from "node:assert/strict";
import { test } from "node:test";
import { compareRunNames, decodeState, defaultState, encodeState, parseTbHash, pickRun, reconcileRun, runsSignature, shareUrl, sortRuns, stateFromTbHash, tbHashWithState, vscodeAncestry, vscodeFlag } from "../src/state.js";
import { apiUrl } from "../src/query.js";

test("default state encodes to an empty hash", () => {
  assert.equal(encodeState(defaultState()), "");
});

test("state round-trips through the hash, including names with URL metacharacters", () => {
  const state = {
    ...defaultState(),
    run: "seg baseline/#1&x=y",
    worker: "host_123.pid",
    span: "2",
    view: "compare",
    base: "cnn_baseline",
    step: 12,
    kind: "dynamic_shape",
    q: "nonzero loss.py",
    sort: "count",
    order: "asc",
    site: "train.py:42:aten::item",
    sync: "abcd1234-7",
    latent: true,
  };
  const hash = encodeState(state);
  assert.ok(hash.startsWith("#run=seg%20baseline%2F%231%26x%3Dy&"));
  assert.deepEqual(decodeState(hash), state);
});

test("encoding is deterministic: same state, same URL", () => {
  const a = encodeState({ site: "s", run: "r", step: 3 });
  const b = encodeState({ step: 3, run: "r", site: "s" });
  assert.equal(a, b);
  assert.equal(a, "#run=r&step=3&site=s");
});

test("invalid values in a hand-edited hash fall back to defaults", () => {
  const s = decodeState("#sort=rm%20-rf&order=sideways&view=admin&step=abc&latent=maybe&bogus=1&run=%E0%A4%A");
  assert.equal(s.sort, "predicted_saving_us");
  assert.equal(s.order, "desc");
  assert.equal(s.view, "hotspots");
  assert.equal(s.step, null);
  assert.equal(s.latent, false);
  assert.equal(s.run, null); // malformed percent-encoding is ignored
});

test("step 0 survives the round trip", () => {
  assert.equal(decodeState(encodeState({ step: 0 })).step, 0);
});

test("VS Code is told by its webview's origin, not by the frames' nesting", () => {
  // Desktop: TensorBoard's page, then the webview's two frames, then the workbench.
  assert.equal(vscodeAncestry(["http://localhost:6006", "vscode-webview://0abc", "vscode-webview://0abc", "vscode-file://vscode-app"]), true);
  assert.equal(vscodeAncestry(["http://127.0.0.1:6006", "https://0abc.vscode-cdn.net"]), true); // vscode.dev
  // Jupyter's %tensorboard, a dashboard page framing TensorBoard: not VS Code.
  assert.equal(vscodeAncestry(["http://localhost:6006", "http://localhost:8888"]), false);
  assert.equal(vscodeAncestry(["http://localhost:6006", "https://evil.example/vscode-webview:"]), false);
  assert.equal(vscodeAncestry(["https://vscode-cdn.net.example"]), false);
  assert.equal(vscodeAncestry([]), false);
  assert.equal(vscodeAncestry(null), false); // no ancestorOrigins (Firefox)
});

test("vscode flag is read from query or hash", () => {
  assert.equal(vscodeFlag("?name=sync_advisor&vscode=1", ""), true);
  assert.equal(vscodeFlag("", "#run=a&vscode=true"), true);
  assert.equal(vscodeFlag("?name=sync_advisor", "#run=vscode=1x"), false);
});

test("API URLs are relative, encoded, and skip empty parameters", () => {
  assert.equal(apiUrl("runs"), "runs");
  const url = apiUrl("sites", { run: "a b&c", worker: null, span: "", latent: true, step: 0 });
  assert.equal(url, "sites?run=a%20b%26c&latent=1&step=0");
  assert.ok(!url.startsWith("/"));
  assert.throws(() => apiUrl("/etc/passwd"));
  assert.throws(() => apiUrl("http://evil"));
});

test("share URL is the frame's address with the state hash, the old hash replaced", () => {
  const entry = "http://host:6006/tb/data/plugin_entry.html?name=sync_advisor";
  const state = { run: "base line", site: "train.py:12:aten::item", sort: "gpu_idle_us" };
  const url = shareUrl(`${entry}#run=old&site=stale`, state);
  assert.equal(url, `${entry}#run=base%20line&sort=gpu_idle_us&site=train.py%3A12%3Aaten%3A%3Aitem`);
  assert.deepEqual(decodeState(new URL(url).hash), { ...decodeState(""), ...state });
  // The default view has no hash at all: the bare entry page opens it.
  assert.equal(shareUrl(`${entry}#`, {}), entry);
  assert.equal(shareUrl(entry, { latent: true }), `${entry}#latent=1`);
});

test("the dashboard opens on the first run with device activity, else the first run", () => {
  const runs = [
    { name: "cnn_baseline", device_activity: false },
    { name: "cnn_optimized", device_activity: null },
    { name: "gpu_cnn_baseline", device_activity: true },
    { name: "gpu_seg_baseline", device_activity: true },
  ];
  assert.equal(pickRun(runs, null)?.name, "gpu_cnn_baseline");
  assert.equal(pickRun(runs, "cnn_optimized")?.name, "cnn_optimized"); // named: kept
  assert.equal(pickRun(runs, "no such run")?.name, "gpu_cnn_baseline");
  assert.equal(pickRun(runs.slice(0, 2), null)?.name, "cnn_baseline"); // none known: first
  assert.equal(pickRun([], null), null);
});

test("of CPU runs only, the dashboard opens on the first with findings, not an empty one", () => {
  const runs = [
    { name: "fixed", device_activity: false, findings: false },
    { name: "my_run", device_activity: false, findings: true },
  ];
  assert.equal(pickRun(runs, null)?.name, "my_run");
  assert.equal(pickRun([{ ...runs[1], device_activity: true }, runs[0]].reverse(), null)?.name, "my_run");
  assert.equal(pickRun(runs.map((r) => ({ ...r, findings: null })), null)?.name, "fixed"); // not known yet
});

test("a run's generation changes the runs signature only once the run has loaded", () => {
  const answer = (/** @type {boolean} */ loading, /** @type {number} */ generation) => ({
    loading,
    runs: [{ name: "run", loading, trace_count: 2, generation }],
    errors: [],
  });
  // Analysed again between two polls: nothing else in the answer changed.
  assert.notEqual(runsSignature(answer(false, 3)), runsSignature(answer(false, 5)));
  // Traces settling one by one while the run loads: not a redraw per poll.
  assert.equal(runsSignature(answer(true, 3)), runsSignature(answer(true, 4)));
  assert.notEqual(runsSignature(answer(true, 4)), runsSignature(answer(false, 4)));
});

test("a run the view names that is not listed is replaced, with nothing of its selection kept", () => {
  const runs = [
    { name: "cpu", device_activity: false },
    { name: "gpu", device_activity: true },
  ];
  const state = { ...defaultState(), run: "no_such_run", worker: "w0", span: "2", step: 551, site: "a.py:3:aten::item", sync: "x-1", unprof: 14.51 };
  assert.deepEqual(reconcileRun(runs, state), {
    missing: "no_such_run",
    // The step time too: measured for the missing run's program, not the one shown.
    patch: { run: "gpu", worker: null, span: null, step: null, site: null, sync: null, occ: 0, unprof: null },
  });
  // Nothing to change: the run is there, no run is named, or no run is listed yet.
  assert.equal(reconcileRun(runs, { ...state, run: "cpu" }), null);
  assert.equal(reconcileRun(runs, { ...state, run: null }), null);
  assert.equal(reconcileRun([], state), null);
});

test("runs sort as TensorBoard sorts them: numbers by value, then by character", () => {
  // Checked against TensorBoard 2.21's own function (webfiles.zip, index.js).
  const names = ["run10", "run2", "baseline", "run1", "Zeta", "a_b", "ab", "lr=1e-3", "lr=0.01", "seg_optimized", "seg_baseline"];
  assert.deepEqual(sortRuns(names.map((name) => ({ name }))).map((r) => r.name), [
    "Zeta",
    "a_b",
    "ab",
    "baseline",
    "lr=1e-3",
    "lr=0.01",
    "run1",
    "run2",
    "run10",
    "seg_baseline",
    "seg_optimized",
  ]);
  assert.equal(compareRunNames("run2", "run10"), -1);
  assert.equal(compareRunNames("same", "same"), 0);
});

test("the view state rides in TensorBoard's hash under p.sync_advisor., beside its own keys", () => {
  const state = { ...defaultState(), run: "seg baseline/#1&x=y", site: "train.py:42:aten::item", step: 3 };
  const hash = tbHashWithState("#sync_advisor&tagFilter=loss&p.sync_advisor.run=old&p.sync_advisor.q=x", state);
  assert.equal(
    hash,
    "#sync_advisor&tagFilter=loss&p.sync_advisor.run=seg%20baseline%2F%231%26x%3Dy&p.sync_advisor.step=3&p.sync_advisor.site=train.py%3A42%3Aaten%3A%3Aitem",
  );
  // TensorBoard reads it back part by part: one tab, every key=value whole.
  const parsed = parseTbHash(hash);
  assert.equal(parsed.tab, "sync_advisor");
  assert.deepEqual(parsed.params[0], ["tagFilter", "loss"]);
  assert.deepEqual(stateFromTbHash(hash), { ...state });
  // A default state leaves no key; another tab is kept; a hash without our keys is no state.
  assert.equal(tbHashWithState("#sync_advisor&p.sync_advisor.run=a", defaultState()), "#sync_advisor");
  assert.equal(tbHashWithState("#sync_advisor", { run: "a" }, "pytorch_profiler"), "#pytorch_profiler&p.sync_advisor.run=a");
  assert.equal(stateFromTbHash("#sync_advisor&tagFilter=x"), null);
  assert.equal(stateFromTbHash(""), null);
});

test("workers are listed with numbers by value: rank2 before rank10", async () => {
  const { sortWorkers } = await import("../src/state.js");
  const names = sortWorkers([{ name: "rank10" }, { name: "rank2" }, { name: "rank1" }]).map((w) => w.name);
  assert.deepEqual(names, ["rank1", "rank2", "rank10"]);
});
