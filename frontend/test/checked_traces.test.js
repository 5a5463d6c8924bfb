import test from "node:test";
import assert from "node:assert/strict";
import { checkedTraces, recordedNothing } from "../src/hotspots.js";

const real = { path: "a.pt.trace.json.gz", error: null, event_count: 8550, device: "cuda", has_gpu_activity: true, steps: 5 };
const empty = { path: "e.pt.trace.json", error: null, event_count: 0, device: "cpu", has_gpu_activity: false, has_runtime: false, steps: 0 };
const stoppedEarly = { path: "m.pt.trace.json", error: null, event_count: 4, device: null, step_markers: false, host_events_per_step: 0 };
const broken = { path: "b.pt.trace.json", error: "invalid JSON" };
const cpuOnly = { path: "c.pt.trace.json", error: null, event_count: 300, device: "cpu", step_markers: true, host_events_per_step: 40 };

test("a trace of [] or metadata only is not counted among the files checked", () => {
  assert.equal(recordedNothing(empty), true);
  assert.equal(recordedNothing(stoppedEarly), true);
  assert.equal(recordedNothing(real), false);
  assert.equal(recordedNothing(cpuOnly), false);
  assert.deepEqual(checkedTraces([real, empty, stoppedEarly, broken, cpuOnly]).map((t) => t.path), ["a.pt.trace.json.gz", "c.pt.trace.json"]);
  assert.deepEqual(checkedTraces(undefined), []);
});

test("an empty trace on a device is counted: it is the device's, not nothing", () => {
  assert.equal(recordedNothing({ ...empty, has_runtime: true }), false);
  assert.equal(recordedNothing({ ...empty, device: "cuda" }), false);
});

test("traces without step markers whose record_function spans repeat are told how to count them", async () => {
  const { annotationStepsHint } = await import("../src/hotspots.js");
  globalThis.document = {
    createElement: (tag) => ({ tag, children: [], attrs: {}, setAttribute(k, v) { this.attrs[k] = v; }, appendChild(c) { this.children.push(c); }, append(...c) { this.children.push(...c); } }),
    createTextNode: (text) => ({ text }),
  };
  try {
    const hint = annotationStepsHint([{ step_markers: false, step_annotation_hint: "train_step", step_annotation_hint_count: 6 }]);
    assert.ok(hint);
    const text = JSON.stringify(hint);
    assert.match(text, /--step-annotation 'train_step'/);
    assert.match(text, /--sync_advisor_step_annotation 'train_step'/);
    assert.match(text, /Or count its 6 /);
    assert.equal(annotationStepsHint([{ step_markers: false, step_annotation_hint: null }]), null);
    assert.equal(annotationStepsHint([{ step_annotation_hint: "a" }, { step_annotation_hint: "b" }]), null);
  } finally {
    delete globalThis.document;
  }
});

test("steps taken from a record_function are said, and a pattern's several names warned of", async () => {
  const { annotationStepsNote } = await import("../src/hotspots.js");
  globalThis.document = {
    createElement: (tag) => ({ tag, children: [], attrs: {}, setAttribute(k, v) { this.attrs[k] = v; }, appendChild(c) { this.children.push(c); }, append(...c) { this.children.push(...c); } }),
    createTextNode: (text) => ({ text }),
  };
  try {
    assert.equal(annotationStepsNote([{ step_markers: true }]), null);
    const one = JSON.stringify(annotationStepsNote([{ steps_from_annotation: "train_step", step_annotation_names: ["train_step"] }]));
    assert.match(one, /record_function\(\\"train_step\\"\)/);
    assert.match(one, /in 1 trace without ProfilerStep markers\./);
    assert.doesNotMatch(one, /matched/);
    const several = JSON.stringify(
      annotationStepsNote([{ steps_from_annotation: "Optimizer.*", step_annotation_names: ["Optimizer.zero_grad#SGD.zero_grad", "Optimizer.step#SGD.step"] }]),
    );
    assert.match(several, /It matched 2 names \(Optimizer.zero_grad#SGD.zero_grad, Optimizer.step#SGD.step\)/);
  } finally {
    delete globalThis.document;
  }
});
