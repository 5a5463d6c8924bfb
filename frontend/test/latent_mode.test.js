import assert from "node:assert/strict";
import { test } from "node:test";
import { latentMode, withStackSnippet } from "../src/hotspots.js";

test("a run with runtime calls but no device rows read (an NPU's) shows its syncs, not latent ones", () => {
  // torch_npu's Level1/Level2 traces: AscendCL calls, the NPU's task rows not read. The
  // dashboard showed "Latent sync sites 0" over a run whose CLI report had 3 sites.
  assert.equal(latentMode({ has_gpu_activity: false, has_runtime: true }, { latent: false }), false);
  // A CPU-only run (neither): its latent findings are what there is.
  assert.equal(latentMode({ has_gpu_activity: false, has_runtime: false }, { latent: false }), true);
  assert.equal(latentMode({ has_gpu_activity: false }, { latent: false }), true); // an older plugin's answer
  assert.equal(latentMode({ has_gpu_activity: true, has_runtime: true }, { latent: false }), false);
  assert.equal(latentMode({ has_gpu_activity: true }, { latent: true }), true);
});

test("the with_stack snippet is torch_npu's on an NPU run, the CPU's alone on a CPU-only one", () => {
  const npu = withStackSnippet("npu");
  assert.match(npu, /torch_npu\.profiler\.profile\(/);
  assert.match(npu, /ProfilerActivity\.NPU/);
  assert.match(npu, /ProfilerLevel\.Level1/);
  assert.doesNotMatch(npu, /CUDA/);
  assert.match(withStackSnippet("cpu"), /activities=\[ProfilerActivity\.CPU\],/);
  // Traces Lightning's PyTorchProfiler wrote: its own profiler, which passes with_stack on.
  const lightning = withStackSnippet("cpu", true);
  assert.match(lightning, /Trainer\(profiler=PyTorchProfiler\(/);
  assert.match(lightning, /with_stack=True/);
  assert.match(withStackSnippet("npu", true), /torch_npu\.profiler\.profile/);
  assert.match(withStackSnippet("cuda"), /ProfilerActivity\.CUDA/);
  assert.match(withStackSnippet(undefined), /with_stack=True/);
});

test("a worker's two spans keep the end that tells them apart when the chart cuts their labels", async () => {
  const { groupLabelText } = await import("../src/hotspots.js");
  const a = groupLabelText("hostA \u00b7 2025-11-26 00:54:11", 20);
  const b = groupLabelText("hostA \u00b7 2025-11-26 00:57:40", 20);
  assert.equal(a.length, 20);
  assert.notEqual(a, b);
  assert.ok(a.endsWith("00:54:11") && a.startsWith("host"), a);
  assert.equal(groupLabelText("worker0", 20), "worker0");
  assert.equal(groupLabelText("a-very-long-worker-name", 10), "a-very-lo\u2026");
});
