import assert from "node:assert/strict";
import { test } from "node:test";
import { setCatalogue } from "../src/catalogue.js";
import { filterSites, nextRowIndex, nextSort, siteWhere, sitesInStep, sortSites } from "../src/sites.js";

const sites = [
  { key: "a", file: "train.py", line: 42, func: "step", kind: "scalar_readback", ops: ["aten::item"], count: 10, per_step: 1, host_wait_us: 500, gpu_idle_us: 20, share_of_step: 0.1 },
  { key: "b", file: "loss.py", line: 7, func: "masked", kind: "dynamic_shape", ops: ["aten::index", "aten::nonzero"], count: 30, per_step: 3, host_wait_us: 900, gpu_idle_us: 5, share_of_step: 0.2 },
  { key: "c", file: null, line: null, func: null, kind: "explicit_sync", ops: [], count: 2, per_step: 0.2, host_wait_us: 500, gpu_idle_us: 0, share_of_step: 0.05 },
  { key: "d", file: "data.py", line: 100, func: "load", kind: "blocking_host_to_device", ops: ["aten::to"], count: 30, per_step: 3, host_wait_us: 50, gpu_idle_us: 800, share_of_step: 0.15 },
];
const keys = (xs) => xs.map((x) => x.key).join("");

test("numeric columns sort by value both ways, ties keep the order the plugin sent", () => {
  assert.equal(keys(sortSites(sites, "host_wait_us", "desc")), "bacd");
  assert.equal(keys(sortSites(sites, "count", "desc")), "bdac");
  assert.equal(keys(sortSites(sites, "gpu_idle_us", "asc")), "cbad");
});

test("text columns sort naturally and missing values always go last", () => {
  assert.equal(keys(sortSites(sites, "file", "asc")), "dbac");
  assert.equal(keys(sortSites(sites, "file", "desc")), "abdc");
  assert.equal(keys(sortSites(sites, "line", "asc")), "badc");
});

test("sorting returns a copy and leaves the input alone", () => {
  const before = keys(sites);
  sortSites(sites, "count", "asc");
  assert.equal(keys(sites), before);
});

test("clicking the sorted column flips it; a new column starts in the plugin's order for it", () => {
  setCatalogue({ site_sorts: { count: "desc", file: "asc", gpu_idle_us: "desc", line: "asc" } });
  assert.deepEqual(nextSort({ sort: "count", order: "desc" }, "count"), { sort: "count", order: "asc" });
  assert.deepEqual(nextSort({ sort: "count", order: "desc" }, "file"), { sort: "file", order: "asc" });
  assert.deepEqual(nextSort({ sort: "file", order: "asc" }, "gpu_idle_us"), { sort: "gpu_idle_us", order: "desc" });
  setCatalogue({ site_sorts: { count: "asc" } });
  assert.deepEqual(nextSort({ sort: "file", order: "asc" }, "count"), { sort: "count", order: "asc" });
  setCatalogue(null);
});

test("filters match kind exactly and every free-text word case-insensitively", () => {
  assert.equal(keys(filterSites(sites, { kind: "dynamic_shape" })), "b");
  assert.equal(keys(filterSites(sites, { q: "NONZERO" })), "b");
  assert.equal(keys(filterSites(sites, { q: "aten:: py" })), "abd");
  assert.equal(keys(filterSites(sites, { q: "train item" })), "a");
  assert.equal(keys(filterSites(sites, { q: "train nonzero" })), "");
  assert.equal(keys(filterSites(sites, {})), "abcd");
});

test("arrow keys move within the table and stop at its ends", () => {
  assert.equal(nextRowIndex(-1, "ArrowDown", 4), 0);
  assert.equal(nextRowIndex(0, "ArrowDown", 4), 1);
  assert.equal(nextRowIndex(3, "ArrowDown", 4), 3);
  assert.equal(nextRowIndex(0, "ArrowUp", 4), 0);
  assert.equal(nextRowIndex(2, "Home", 4), 0);
  assert.equal(nextRowIndex(0, "End", 4), 3);
  assert.equal(nextRowIndex(0, "PageDown", 30), 10);
  assert.equal(nextRowIndex(5, "PageUp", 30), 0);
  assert.equal(nextRowIndex(1, "Tab", 4), null);
  assert.equal(nextRowIndex(0, "ArrowDown", 0), null);
});

test("with a step selected the count, wait and idle are the step's, sorted by, the rest the run's", () => {
  const sites = [
    { key: "a", count: 10, per_step: 2, host_wait_us: 725794, gpu_idle_us: 2193, predicted_saving_per_step_us: 5, share_of_step: 0.68, in_step: { step: 551, count: 2, host_wait_us: 147255, gpu_idle_us: 490 } },
    { key: "b", count: 45, per_step: 9, host_wait_us: 2237, gpu_idle_us: 28892, predicted_saving_per_step_us: 1, share_of_step: 0.03, in_step: { step: 551, count: 9, host_wait_us: 280, gpu_idle_us: 5837 } },
  ];
  const { sites: shown, inStep } = sitesInStep(sites, 551);
  assert.equal(inStep, true);
  assert.deepEqual(
    shown.map((s) => [s.key, s.count, s.host_wait_us, s.gpu_idle_us, s.per_step, s.share_of_step, s.predicted_saving_per_step_us]),
    [
      ["a", 2, 147255, 490, 2, 0.68, 5],
      ["b", 9, 280, 5837, 9, 0.03, 1],
    ],
  );
  assert.deepEqual(shown[0].whole, { count: 10, host_wait_us: 725794, gpu_idle_us: 2193 });
  assert.deepEqual(sortSites(shown, "gpu_idle_us", "desc").map((s) => s.key), ["b", "a"]);
  // No step, another step's figures, or a plugin without in_step: the run's, said so.
  assert.deepEqual(sitesInStep(sites, null), { sites, inStep: false });
  assert.equal(sitesInStep(sites, 552).inStep, false);
  assert.equal(sitesInStep([{ key: "c", count: 3 }], 551).inStep, false);
});

test("an inexact line is marked * with why; its candidates and a job's late peer go under it", async () => {
  const { siteWhere } = await import("../src/sites.js");
  const exact = siteWhere({ file: "/w/train.py", line: 88, line_exact: true, def_line: 80 });
  assert.equal(exact.text, "/w/train.py:88");
  assert.equal(exact.inexact, false);
  assert.deepEqual(exact.notes, []);
  const atDef = siteWhere(
    { file: "/w/train.py", line: 80, def_line: 80, line_exact: false, candidates: [83, 88], waiting_for: "23 of its 48 syncs waiting for rank 13" },
    (p) => p.split("/").pop(),
  );
  assert.equal(atDef.text, "train.py:80*");
  assert.match(atDef.title, /\* line where the function is defined/);
  assert.deepEqual(atDef.notes, [
    { id: "candidates", text: "candidate lines 83, 88" },
    { id: "waiting-for", text: "23 of its 48 syncs waiting for rank 13" },
  ]);
  const running = siteWhere({ file: "t.py", line: 12, def_line: 3, line_exact: false });
  assert.match(running.title, /already running/);
  // No source read: the recorded line is not said to be the def (it was on_step()'s call,
  // the function already running, in a review's pair).
  const unread = siteWhere({ file: "t.py", line: 286, def_line: null, line_exact: false });
  assert.match(unread.title, /\* line the trace recorded for the function .*its source file was not read here/);
  assert.doesNotMatch(unread.title, /line where the function is defined/);
  // As the CLI: a file not read whose frame was seen called is at its def line, and a read
  // file's missing def line (a class body) is not "not read".
  const called = siteWhere({ file: "t.py", line: 40, def_line: 40, line_exact: false, source_read: false });
  assert.match(called.title, /\* line where the function is defined \(the trace shows it called\).*not found here/);
  const read = siteWhere({ file: "t.py", line: 40, def_line: null, line_exact: false, source_read: true });
  assert.doesNotMatch(read.title, /not read here|not found here/);
});

test("the filter finds a site by the file:line the table shows", () => {
  const sites = [
    { file: "demo/seg.py", line: 82, func: "loss", kind: "dynamic_shape", ops: ["aten::index"] },
    { file: "demo/seg.py", line: 76, func: "loss", kind: "dynamic_shape", ops: ["aten::_unique2"] },
  ];
  assert.deepEqual(filterSites(sites, { q: "seg.py:82" }).map((s) => s.line), [82]);
  assert.deepEqual(filterSites(sites, { q: "SEG.PY:7" }).map((s) => s.line), [76]);
});

test("sorting by location orders lines as numbers and stackless sites by the label shown", () => {
  const sites = [
    { file: "a.py", line: 100 },
    { file: null, line: null, ops: ["cudaDeviceSynchronize"] },
    { file: "a.py", line: 82 },
    { file: null, line: null, ops: ["aten::max_pool2d"] },
  ];
  const order = (dir) => sortSites(sites, "file", dir).map((s) => (s.file ? `${s.file}:${s.line}` : s.ops[0]));
  assert.deepEqual(order("asc"), ["a.py:82", "a.py:100", "aten::max_pool2d", "cudaDeviceSynchronize"]);
  assert.deepEqual(order("desc"), ["cudaDeviceSynchronize", "aten::max_pool2d", "a.py:100", "a.py:82"]);
});

test("a backward site says so, and which line ran it, under its location", () => {
  const site = { file: "seg.py", line: 82, line_exact: true, backward: true, run_by: { file: "seg.py", line: 127, func: "baseline_step" } };
  assert.deepEqual(siteWhere(site).notes, [{ id: "backward", text: "backward of this line, run by line 127 (baseline_step)" }]);
  assert.deepEqual(siteWhere({ ...site, run_by: null }).notes, [{ id: "backward", text: "backward of this line" }]);
  assert.deepEqual(siteWhere({ ...site, backward: false }).notes, []);
});

test("a copy whose direction no record gives says so under its location", () => {
  const notes = siteWhere({ file: "main.py", line: 375, line_exact: false, kind: "device_to_host_copy", copy_direction_guessed: true }).notes;
  assert.deepEqual(
    notes.map((n) => n.id),
    ["copy-direction"],
  );
  assert.match(notes[0].text, /no record says which way this copy went/);
  assert.deepEqual(siteWhere({ file: "main.py", line: 375, kind: "device_to_host_copy", copy_direction_guessed: false }).notes, []);
});

test("a site that also synced in another way says so, as its fix is the most frequent kind's", () => {
  const notes = siteWhere({ file: "base.py", line: 1173, kind: "device_to_host_copy", other_kinds: { blocking_host_to_device: 25 } }).notes;
  assert.deepEqual(notes.map((n) => n.id), ["other-kinds"]);
  assert.match(notes[0].text, /^also 25 .+, whose fix is not the one shown$/);
});

test("an inexact line whose only file is another run's copy says so, not that it was not found", async () => {
  const { inexactWhy } = await import("../src/sites.js");
  const why = inexactWhy({ line: 4, def_line: 4, source_read: false, other_run_copy: "/logs/run_a/train.py" });
  assert.match(why, /only copy of its source file found \(\/logs\/run_a\/train\.py\) lies in another run's folder/);
  assert.doesNotMatch(inexactWhy({ line: 4, def_line: 4, source_read: false }), /another run/);
});

test("an inexact line left for several different files of its name says so, not that none was found", async () => {
  const { inexactWhy } = await import("../src/sites.js");
  const why = inexactWhy({ line: 4, def_line: 4, source_read: false, copies_found: 2 });
  assert.match(why, /2 different files of its name lie under the source roots/);
  assert.doesNotMatch(why, /not found/);
});

test("a Jupyter cell's site is named by its notebook and cell, not ipykernel's file name", () => {
  const cell = { notebook: "/w/train.ipynb", index: 2, execution_count: 4, copies: 1 };
  const where = siteWhere({ file: "/tmp/ipykernel_42/2312009515.py", line: 6, line_exact: true, cell });
  assert.equal(where.text, "/w/train.ipynb In[4]:6");
  assert.match(where.title, /^\/w\/train\.ipynb, In\[4\], line 6\n\(run as \/tmp\/ipykernel_42\/2312009515\.py\)$/);
  // Saved without its execution count (outputs cleared): its place in the notebook.
  const cleared = siteWhere({ file: "/tmp/ipykernel_42/1.py", line: 3, line_exact: false, cell: { ...cell, execution_count: null, copies: 2 } }, (p) => p.split("/").pop() ?? p);
  assert.equal(cleared.text, "train.ipynb cell 2:3*");
  assert.match(cleared.title, /2 notebook cells under the source roots hold this code/);
});

test("a site without a stack is told apart by the annotations it ran in", () => {
  const where = siteWhere({ file: null, line: null, ops: ["aten::to"], annotations: ["## sparse_data_dist ##", "## recat ##"] });
  assert.deepEqual(where.notes.map((n) => n.text), ["in ## sparse_data_dist ##, ## recat ##"]);
  // A site with a line says where it is: no annotation note.
  assert.equal(siteWhere({ file: "t.py", line: 3, line_exact: true, annotations: ["## fwd ##"] }).notes.length, 0);
});

test("a sync inside a library the line called names the library's line under it, as the CLI does", () => {
  // trainer.train() runs the Trainer's NaN check and the model's mask check: two sites of
  // one line, told apart (and advised) by the library code that read.
  const site = {
    file: "w1_trainer.py",
    line: 36,
    line_exact: true,
    library: { file: "transformers/trainer.py", line: 1957, def_line: 1827, line_exact: false, func: "_run_epoch", candidates: [1879, 1888, 1897, 1901, 1906, 1907, 1920] },
  };
  // The loop was running when profiling started: its recorded line is its callback's call,
  // so the function's line stands for it; seven candidates name nothing to check.
  assert.deepEqual(siteWhere(site, (p) => p).notes, [{ id: "library", text: "synced in transformers/trainer.py:1827* (_run_epoch)" }]);
  const mask = { ...site, library: { file: "transformers/masking_utils.py", line: 332, def_line: 332, line_exact: false, func: "_ignore_bidirectional_mask_sdpa", candidates: [345, 353, 354, 356] } };
  assert.equal(siteWhere(mask).notes[0].text, "synced in transformers/masking_utils.py:332* (_ignore_bidirectional_mask_sdpa; candidate lines 345, 353, 354, 356)");
  const exact = { ...site, library: { ...site.library, line: 2257, line_exact: true, func: "_maybe_log_save_evaluate" } };
  assert.equal(siteWhere(exact).notes[0].text, "synced in transformers/trainer.py:2257 (_maybe_log_save_evaluate)");
  assert.deepEqual(siteWhere({ ...site, library: null }).notes, []);
});

test("a script's top level at the line profiling started is said to have been running, not defined there", () => {
  // model.generate(...) in a loop that calls prof.step(): the module's frame shows the
  // prof.step() line; it has no def line, and it is no definition.
  const top = siteWhere({ file: "gen.py", line: 21, def_line: null, func: "<module>", line_exact: false, source_read: true });
  assert.match(top.title, /already running/);
  assert.match(top.title, /in a loop may stand above it/);
  assert.doesNotMatch(top.title, /where the function is defined/);
});

test("two sites reading through one library helper say which library code each fix is about", async () => {
  const { keyLibrary } = await import("../src/sites.js");
  const helper = { file: "lightning/fabric/utilities/apply_func.py", line: 134, line_exact: true, func: "to_item" };
  const bar = { file: "train.py", line: 57, line_exact: true, library: helper, key: "train.py:57:aten::item@lightning/pytorch/trainer/connectors/logger_connector/result.py:metrics" };
  assert.deepEqual(keyLibrary(bar.key), { file: "lightning/pytorch/trainer/connectors/logger_connector/result.py", func: "metrics" });
  assert.equal(
    siteWhere(bar).notes[0].text,
    "synced in lightning/fabric/utilities/apply_func.py:134 (to_item), under lightning/pytorch/trainer/connectors/logger_connector/result.py (metrics)",
  );
  // Where the key names the same code as the library line, nothing is added; a user's path
  // with an @ before the library part is read from the last one.
  const own = { ...bar, key: "/home/a@b/train.py:57:aten::item@lightning/fabric/utilities/apply_func.py:to_item" };
  assert.equal(siteWhere(own).notes[0].text, "synced in lightning/fabric/utilities/apply_func.py:134 (to_item)");
});

test("a read just after an unrun synchronize says the host waits there first, as the CLI does", () => {
  const site = { file: "train_gpt2.py", line: 521, line_exact: true, latent: true, after_sync: { file: "train_gpt2.py", line: 515, func: "<module>", code: "torch.cuda.synchronize()", guard: "device_type == 'cuda'" } };
  assert.deepEqual(siteWhere(site).notes, [
    { id: "after-sync", text: "after torch.cuda.synchronize() (line 515, not run here): on a GPU the host waits there first, so this read costs little until that synchronize goes" },
  ]);
  assert.deepEqual(siteWhere({ ...site, after_sync: null }).notes, []);
});

test("a helper called from several lines names them with their counts, as the CLI does", async () => {
  const { callersText } = await import("../src/sites.js");
  const site = { file: "w.py", line: 5, line_exact: true, callers: [
    { file: "w.py", line: 16, func: "<module>", line_exact: true, count: 4 },
    { file: "w.py", line: 17, func: "<module>", line_exact: true, count: 4 },
    { file: "loop.py", line: 19, func: "fit", line_exact: false, count: 2 },
  ] };
  assert.equal(callersText(site), "called from line 16 (4), line 17 (4), loop.py:19* (2)");
  assert.deepEqual(siteWhere(site).notes, [{ id: "callers", text: "called from line 16 (4), line 17 (4), loop.py:19* (2)" }]);
  // One caller is the loop that runs it: the stack says so, no note.
  assert.equal(callersText({ ...site, callers: site.callers.slice(0, 1) }), null);
  const many = { ...site, callers: [1, 2, 3, 4, 5, 6].map((n) => ({ file: "w.py", line: n, func: "f", line_exact: true, count: n })) };
  assert.equal(callersText(many), "called from line 1 (1), line 2 (2), line 3 (3), line 4 (4), and 2 more lines (11)");
});

test("callers of one line told apart by their % tests say the test", async () => {
  const { callersText } = await import("../src/sites.js");
  // nerf-pytorch: one line reached every step and from the test-set render every N steps.
  const site = { file: "w.py", line: 9, line_exact: true, callers: [
    { file: "w.py", line: 14, func: "render", line_exact: true, count: 5, periodic_guard: null },
    { file: "w.py", line: 14, func: "render", line_exact: true, count: 1, periodic_guard: "step % 4 == 0" },
  ] };
  assert.equal(callersText(site), "called from line 14 (5), line 14 (1, under `if step % 4 == 0:`)");
  // The same test for all: the site's own note says it, not each caller.
  const same = { ...site, callers: site.callers.map((c) => ({ ...c, periodic_guard: "step % 4 == 0" })) };
  assert.equal(callersText(same), "called from line 14 (5), line 14 (1)");
});

test("a site whose syncs ran several lines of one library function names each with its count", async () => {
  const { siteWhere, libraryText } = await import("../src/sites.js");
  const library = { file: "stable_baselines3/ppo/ppo.py", line: 230, line_exact: true, func: "train" };
  const lines = [{ line: 230, count: 4 }, { line: 231, count: 4 }, { line: 292, count: 1 }];
  const site = { file: "train_sb3.py", line: 33, line_exact: true, key: "train_sb3.py:33:aten::item@stable_baselines3/ppo/ppo.py:train", library, library_lines: lines };
  const note = siteWhere(site).notes.find((n) => n.id === "library");
  assert.equal(note.text, "synced in stable_baselines3/ppo/ppo.py (train) at lines 230 (4), 231 (4), 292 (1)");
  // One line: as before.
  assert.equal(libraryText(library, "train_sb3.py", (p) => p, null, []), "synced in stable_baselines3/ppo/ppo.py:230 (train)");
  const many = Array.from({ length: 8 }, (_, i) => ({ line: 10 + i, count: 1 }));
  assert.match(libraryText(library, "x.py", (p) => p, null, many), /at lines 10 \(1\), 11 \(1\), 12 \(1\), 13 \(1\), 14 \(1\), 15 \(1\), 2 more$/);
});

test("an unread file in a package folder says a library not installed here is taken for your code", async () => {
  const { inexactWhy } = await import("../src/sites.js");
  assert.match(inexactWhy({ file: "rlpkg/algo.py", line: 4, def_line: 4, source_read: false }), /if its package is a library .* run TensorBoard where it is installed/);
  // A script of its own, or an absolute path: no such word.
  assert.doesNotMatch(inexactWhy({ file: "train.py", line: 4, def_line: 4, source_read: false }), /package/);
  assert.doesNotMatch(inexactWhy({ file: "/home/me/p/train.py", line: 4, def_line: 4, source_read: false }), /package/);
});
