import assert from "node:assert/strict";
import { test } from "node:test";
import { countNames, fileLine, formatBytes, formatCount, formatDeltaUs, formatPct, formatUs, shortPath, siteFallbackLabel, spanLabels } from "../src/format.js";

test("durations pick µs, ms or s and keep three significant digits", () => {
  assert.equal(formatUs(0), "0 µs");
  assert.equal(formatUs(0.25), "0.25 µs");
  assert.equal(formatUs(7.5), "7.5 µs");
  assert.equal(formatUs(850), "850 µs");
  assert.equal(formatUs(999.4), "999 µs");
  assert.equal(formatUs(1500), "1.50 ms");
  assert.equal(formatUs(12_345), "12.3 ms");
  assert.equal(formatUs(4_700), "4.70 ms");
  assert.equal(formatUs(250_000), "250 ms");
  assert.equal(formatUs(1_250_000), "1.25 s");
  assert.equal(formatUs(-2_000), "\u22122.00 ms");
});

test("missing durations render as a dash instead of NaN", () => {
  for (const v of [null, undefined, NaN, Infinity]) assert.equal(formatUs(v), "\u2013");
});

test("deltas carry an explicit sign", () => {
  assert.equal(formatDeltaUs(1200), "+1.20 ms");
  assert.equal(formatDeltaUs(-350), "\u2212350 µs");
  assert.equal(formatDeltaUs(0), "\u00b10 µs");
});

test("percentages of a 0..1 share, tiny non-zero shares shown as <0.1 %", () => {
  assert.equal(formatPct(0), "0 %");
  assert.equal(formatPct(0.0004), "<0.1 %");
  assert.equal(formatPct(0.004), "0.4 %");
  assert.equal(formatPct(0.1234), "12 %");
  assert.equal(formatPct(0.05), "5 %");
  assert.equal(formatPct(1), "100 %");
  assert.equal(formatPct(-0.45), "\u221245 %");
  assert.equal(formatPct(null), "\u2013");
});

test("counts group thousands and show fractional per-step values with two decimals", () => {
  assert.equal(formatCount(12345), "12,345");
  assert.equal(formatCount(3), "3");
  assert.equal(formatCount(2.5), "2.5");
  assert.equal(formatCount(0.333333), "0.33");
  assert.equal(formatCount(12.04), "12");
  assert.equal(formatCount(1234.56), "1,235");
});

test("bytes use binary units", () => {
  assert.equal(formatBytes(8), "8 B");
  assert.equal(formatBytes(4096), "4.0 KiB");
  assert.equal(formatBytes(3 * 1024 * 1024), "3.0 MiB");
});


test("short paths keep the last components of posix and windows paths", () => {
  assert.equal(shortPath("/home/me/proj/train/loss.py"), "\u2026/train/loss.py");
  assert.equal(shortPath("C:\\work\\proj\\model.py"), "\u2026/proj/model.py");
  assert.equal(shortPath("train.py"), "train.py");
  assert.equal(fileLine("a.py", 3), "a.py:3");
  assert.equal(fileLine("a.py", null), "a.py");
  assert.equal(fileLine(null, 3), "(no source)");
});

test("repeated blocking calls are counted, first-seen order kept", () => {
  assert.deepEqual(countNames(["cudaMalloc", "cudaFree", "cudaMalloc"]), [
    { name: "cudaMalloc", count: 2 },
    { name: "cudaFree", count: 1 },
  ]);
  assert.deepEqual(countNames(null), []);
});

test("a site without a source line is named by its operator, else its API call", () => {
  assert.equal(siteFallbackLabel({ file: null, ops: ["aten::conv2d", "aten::convolution"], apis: ["cudaMalloc"] }), "aten::conv2d");
  assert.equal(siteFallbackLabel({ file: null, ops: [], apis: ["cudaDeviceSynchronize"] }), "cudaDeviceSynchronize");
  assert.equal(siteFallbackLabel({}), "(unknown)");
});

test("epoch-millisecond spans read as local date-times, to the ms only when two would clash", () => {
  const local = (ms) => {
    const d = new Date(ms);
    const p = (n, w = 2) => String(n).padStart(w, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  };
  const labels = spanLabels(["1700000000000", "1700000100000", null]);
  assert.equal(labels.get("1700000000000"), local(1700000000000));
  assert.equal(labels.get("1700000100000"), local(1700000100000));
  assert.equal(labels.size, 2);
  assert.match(labels.get("1700000000000"), /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);
  const close = spanLabels(["1700000000000", "1700000000001"]);
  assert.equal(close.get("1700000000001"), `${local(1700000000001)}.001`);
  assert.equal(close.get("1700000000000"), `${local(1700000000000)}.000`);
  // Other span names (a number too short to be a time, a word) stay as they are.
  assert.deepEqual([...spanLabels(["2", "warmup"]).values()], ["2", "warmup"]);
  // torch 2's tensorboard_trace_handler names spans by time.time_ns(): 19 digits, a date
  // too (the Lightning walk's Span menu listed 1795878150541300067).
  const ns = spanLabels(["1700000000000123456", "1700000100000654321"]);
  assert.equal(ns.get("1700000000000123456"), local(1700000000000));
  assert.equal(ns.get("1700000100000654321"), local(1700000100000));
});

test("how the savings were obtained gives the saving's note, not the profiler's", async () => {
  const { howObtainedText } = await import("../src/format.js");
  const how = "predicted by replaying";
  const profiler = "The profiler's own overhead is about 3 ms of the host's time per step here.";
  assert.equal(howObtainedText({ saving_how: how, saving_note: null }), `How obtained: ${how}`);
  assert.equal(howObtainedText({ saving_how: how, saving_note: "a window" }), `How obtained: ${how} (a window)`);
  assert.equal(howObtainedText({ saving_how: how, saving_note: null, profiler_note: profiler }), `How obtained: ${how}`);
  assert.equal(
    howObtainedText({ saving_how: how, saving_note: "a window", profiler_note: profiler }),
    `How obtained: ${how} (a window)`,
  );
});

test("a note the plugin wrote in ASCII reads in the dashboard's unit", async () => {
  const { withMicro } = await import("../src/format.js");
  assert.equal(withMicro("saves 287 us per step, 4.0 us each; 1.50 ms"), "saves 287 µs per step, 4.0 µs each; 1.50 ms");
  assert.equal(withMicro("status quo: users"), "status quo: users");
});

test("a site whose device idle is unread shows no idle and no saving, not zeros or a bound", async () => {
  const { idleText, savingText } = await import("../src/format.js");
  const npu = { gpu_idle_us: 0, gpu_idle_measured: false, predicted_saving_per_step_us: 520, saving_method: "bound" };
  assert.equal(idleText(npu), "\u2013");
  assert.equal(savingText(npu), "\u2013");
  const gpu = { ...npu, gpu_idle_measured: true };
  assert.equal(idleText(gpu), "0 µs");
  assert.equal(savingText(gpu), "≤520 µs");
  // A report from before the field: measured, as it always was.
  assert.equal(idleText({ gpu_idle_us: 10 }), "10 µs");
});

test("copies a ROCm trace cannot judge are said as the CLI says them, and nothing without them", async () => {
  const { unjudgedUploadsText } = await import("../src/format.js");
  assert.equal(unjudgedUploadsText([{ unjudged_uploads: 0 }]), null);
  assert.equal(unjudgedUploadsText(undefined), null);
  const text = unjudgedUploadsText([{ unjudged_uploads: 2, unjudged_upload_host_us: 5000 }, { error: "bad", unjudged_uploads: 9 }]);
  assert.match(text, /^Not judged: 2 asynchronous host-to-device copies \(5\.00 ms of host time in the calls\): ROCm traces/);
});

test("a span is named as the PyTorch Profiler tab numbers it: its place in the worker's spans", async () => {
  const { profilerSpanName } = await import("../src/format.js");
  const spans = ["1764118459000", "1764118451000"];
  assert.equal(profilerSpanName(spans, "1764118451000"), "1");
  assert.equal(profilerSpanName(spans, "1764118459000"), "2");
  assert.equal(profilerSpanName(spans, "nope"), null);
});

test("a site syncing in some steps says in how many and the most in one", async () => {
  const { spreadText } = await import("../src/format.js");
  assert.equal(spreadText({ count: 21, per_step: 3.5, steps_with_syncs: 3, max_per_step: 7 }), "in 3 of 6 steps, up to 7 in one");
  assert.equal(spreadText({ count: 3, per_step: 0.5, steps_with_syncs: 3, max_per_step: 1 }), "in 3 of 6 steps");
  assert.equal(spreadText({ count: 6, per_step: 1, steps_with_syncs: 6, max_per_step: 1 }), "");
  assert.equal(spreadText({ count: 6, per_step: 6, steps_with_syncs: 0, max_per_step: 0 }), "");
  assert.equal(
    spreadText({ count: 3, per_step: 0.5, steps_with_syncs: 3, max_per_step: 1, periodic_guard: "i % 2 == 0" }),
    "in 3 of 6 steps: already every N steps (under if i % 2 == 0:)",
  );
  // nanoGPT's log_interval = 1: the guard let the read through on every step.
  assert.equal(
    spreadText({ count: 6, per_step: 1, steps_with_syncs: 6, max_per_step: 1, periodic_guard: "i % n == 0" }),
    "under if i % n == 0:, true in every profiled step",
  );
  // PyTorch-Ignite's handler run every N events: its decorator is the test.
  assert.equal(
    spreadText({ count: 2, per_step: 0.5, steps_with_syncs: 2, max_per_step: 1, periodic_guard: "@trainer.on(Events.ITERATION_COMPLETED(every=2))" }),
    "in 2 of 4 steps: already every N steps (under @trainer.on(Events.ITERATION_COMPLETED(every=2)))",
  );
});

test("an epoch's read after its loop that steps the profiler is once a pass of the epoch loop, as the CLI says", async () => {
  const { spreadText, guardStatement } = await import("../src/format.js");
  const guard = "for epoch in range(epochs):";
  assert.equal(guardStatement(guard), guard);
  assert.equal(
    spreadText({ count: 2, per_step: 0.4, steps_with_syncs: 2, max_per_step: 1, periodic_guard: guard }),
    "in 2 of 5 steps: already every N steps (once a pass of for epoch in range(epochs):, after its loop that steps the profiler)",
  );
  assert.equal(
    spreadText({ count: 5, per_step: 1, steps_with_syncs: 5, max_per_step: 1, periodic_guard: guard }),
    "",
  );
});

test("a job's site read on some ranks alone says so per rank's own steps, as the CLI says", async () => {
  const { spreadText, ranksText } = await import("../src/format.js");
  // Rank 0 alone logs its loss each step: 0.5 a step over both ranks' steps, not every second step.
  const rankZero = { count: 5, per_step: 0.5, steps_with_syncs: 5, max_per_step: 1, job_ranks: 2, ranks: [{ rank: 0, count: 5, steps: 5, steps_with_syncs: 5 }] };
  assert.equal(spreadText(rankZero), "on rank 0 only, of the 2 ranks traced: 1.0 a step there");
  const some = { count: 4, per_step: 0.25, steps_with_syncs: 4, max_per_step: 1, job_ranks: 4, ranks: [{ rank: 1, count: 2, steps: 4, steps_with_syncs: 2 }, { rank: 3, count: 2, steps: 4, steps_with_syncs: 2 }] };
  assert.equal(ranksText(some), "on 2 of the 4 ranks traced: rank 1: 0.5 a step, in 2 of its 4 steps; rank 3: 0.5 a step, in 2 of its 4 steps");
  // Alike on every rank: nothing by rank; the steps' spread as before.
  const alike = { count: 6, per_step: 1, steps_with_syncs: 6, max_per_step: 1, job_ranks: 2, ranks: [{ rank: 0, count: 3, steps: 3, steps_with_syncs: 3 }, { rank: 1, count: 3, steps: 3, steps_with_syncs: 3 }] };
  assert.equal(spreadText(alike), "");
  const guarded = { ...rankZero, periodic_guard: "step % 10 == 0" };
  assert.equal(spreadText(guarded), "on rank 0 only, of the 2 ranks traced: 1.0 a step there: already every N steps (under if step % 10 == 0:)");
});

test("a helper's read called under a periodic test is already every N steps, as the CLI says", async () => {
  const { spreadText, periodicGuardOf } = await import("../src/format.js");
  const site = { file: "w.py", count: 2, per_step: 0.5, steps_with_syncs: 2, max_per_step: 1, periodic_guard: null, callers: [{ file: "w.py", line: 24, func: "<module>", line_exact: true, count: 2, periodic_guard: "step % 2 == 0" }] };
  assert.deepEqual(periodicGuardOf(site), ["step % 2 == 0", ", around its call at line 24"]);
  assert.equal(spreadText(site), "in 2 of 4 steps: already every N steps (under if step % 2 == 0:, around its call at line 24)");
  // A caller without the test: nothing is said of it.
  const mixed = { ...site, callers: [...site.callers, { file: "w.py", line: 30, func: "f", line_exact: true, count: 1, periodic_guard: null }] };
  assert.deepEqual(periodicGuardOf(mixed), [null, ""]);
});

test("a test around a call further out is said with that call's line", async () => {
  const { spreadText, periodicGuardOf } = await import("../src/format.js");
  // imagenet's AverageMeter.__str__, under ProgressMeter.display, under the loop's test.
  const caller = { file: "main.py", line: 504, func: "<listcomp>", line_exact: true, count: 20, periodic_guard: "i % args.print_freq == 0", periodic_guard_file: "main.py", periodic_guard_line: 358 };
  const site = { file: "main.py", count: 20, per_step: 20 / 11, steps_with_syncs: 5, max_per_step: 4, periodic_guard: null, callers: [caller] };
  assert.deepEqual(periodicGuardOf(site), ["i % args.print_freq == 0", ", around the call at line 358 that leads here"]);
  assert.equal(spreadText(site), "in 5 of 11 steps, up to 4 in one: already every N steps (under if i % args.print_freq == 0:, around the call at line 358 that leads here)");
  const elsewhere = { ...site, callers: [{ ...caller, periodic_guard_file: "train.py" }] };
  assert.deepEqual(periodicGuardOf(elsewhere), ["i % args.print_freq == 0", ", around the call at train.py:358 that leads here"]);
});

test("reads right after other reads are said as the CLI says them", async () => {
  const { afterReadText } = await import("../src/format.js");
  assert.equal(afterReadText({ count: 4, after_read_count: 0 }), null);
  assert.equal(
    afterReadText({ file: "w.py", count: 4, after_read_count: 4, after_read: { file: "w.py", line: 14, func: "<module>", line_exact: true } }),
    "right after the read at line 14, nothing queued between: on a GPU the host waits there first, so this read costs little until that one goes",
  );
  assert.equal(
    afterReadText({ file: "w.py", count: 4, after_read_count: 4, after_read: { file: "u.py", line: 3, func: "f" } }),
    "right after the read at u.py:3*, nothing queued between: on a GPU the host waits there first, so this read costs little until that one goes",
  );
  assert.equal(
    afterReadText({ file: "main.py", count: 20, after_read_count: 15, after_read: null }),
    "15 of these 20 reads come right after another read, nothing queued between: on a GPU only the first read of each such run waits",
  );
  // build-nanogpt's logged line: two reads of one line, after an unrun synchronize.
  const after_sync = { file: "train.py", line: 515, func: "<module>", code: "torch.cuda.synchronize()" };
  const before = { file: "train.py", line: 521, func: "<module>", line_exact: true };
  assert.equal(
    afterReadText({ file: "train.py", line: 521, count: 5, after_read_count: 5, after_read: before, after_sync }),
    "right after another read on this line too, nothing queued between: it costs little while that one stays",
  );
  assert.equal(
    afterReadText({ file: "train.py", line: 521, count: 5, after_read_count: 5, after_read: before }),
    "right after another read on this line, nothing queued between: on a GPU the host waits there first, so this read costs little until that one goes",
  );
  assert.equal(
    afterReadText({ file: "train.py", line: 483, count: 4, after_read_count: 2, after_read: null, after_sync }),
    "2 of these 4 reads come right after another read too, nothing queued between: on a GPU only the first read of each such run waits",
  );
});

test("a fix for a library's own code says it is an edit there, in the text report's words", async () => {
  const { libraryCodeText } = await import("../src/format.js");
  assert.equal(
    libraryCodeText({ title: "Keep the value on the device", library_code: "ultralytics" }),
    "An edit of ultralytics' own code: no setting of it is known to avoid this.",
  );
  assert.equal(
    libraryCodeText({ library_code: "transformers" }),
    "An edit of transformers' own code: no setting of it is known to avoid this.",
  );
  assert.equal(libraryCodeText({ library_code: "timm" }), "An edit of timm's own code: no setting of it is known to avoid this.");
  assert.equal(libraryCodeText({ title: "x" }), "");
  assert.equal(libraryCodeText(null), "");
});

test("a library's own every-N-steps test is said, and its fix points at the setting behind it", async () => {
  const { libraryCodeText, spreadText } = await import("../src/format.js");
  const site = {
    count: 3,
    per_step: 0.6,
    steps_with_syncs: 3,
    max_per_step: 1,
    library: { file: "open_clip_train/train.py", line: 32, periodic_guard: "i % log_every_n_steps == 0" },
    advice: { title: "Keep the value on the device", library_code: "open_clip_train" },
  };
  assert.equal(
    spreadText(site),
    "in 3 of 5 steps: already every N steps (under if i % log_every_n_steps == 0: in the library's code)",
  );
  assert.equal(
    libraryCodeText(site.advice, site),
    "An edit of open_clip_train's own code, which reads it only under if i % log_every_n_steps == 0: the setting of open_clip_train behind that test reads it less often.",
  );
  // The site's own test comes first.
  assert.equal(spreadText({ ...site, periodic_guard: "step % 10 == 0" }), "in 3 of 5 steps: already every N steps (under if step % 10 == 0:)");
});

test("a library's read under a test of its arguments names that test, as the CLI does", async () => {
  const { libraryCodeText } = await import("../src/format.js");
  const advice = { library_code: "transformer_lens" };
  assert.equal(
    libraryCodeText(advice, { library: { setting_guard: "freq_penalty > 0" } }),
    "An edit of transformer_lens' own code, which reads it only where freq_penalty > 0 holds: the argument or setting of transformer_lens behind that test may avoid it.",
  );
  assert.equal(libraryCodeText(advice, { library: {} }), "An edit of transformer_lens' own code: no setting of it is known to avoid this.");
});
