import assert from "node:assert/strict";
import { test } from "node:test";
import { inexactLineNote, SOURCE_ROOT_HINT } from "../src/line_note.js";

test("a line equal to the def line is where the function is defined", () => {
  const note = inexactLineNote({ line: 4, defLine: 4, func: "train_step", readable: true });
  assert.match(note.text, /^Line 4 is where train_step\(\) is defined/);
  assert.doesNotMatch(note.text, /already running|could not be read/);
  assert.equal(note.hint, null);
});

test("a line other than the def line is the line the running frame was at when recorded", () => {
  for (const defLine of [null, 1, 30]) {
    const note = inexactLineNote({ line: 26, defLine, func: "<module>", readable: true });
    assert.match(note.text, /^Line 26 is the line the frame was at when recorded/);
    assert.match(note.text, /the script's top level was already running/);
    assert.doesNotMatch(note.text, /is defined/);
    assert.equal(note.hint, null);
  }
});

test("the source root hint comes only when the file could not be read", () => {
  const atDef = inexactLineNote({ line: 4, defLine: 4, func: "train_step", readable: false });
  assert.match(atDef.text, /is defined.*could not be read/);
  assert.equal(atDef.hint, SOURCE_ROOT_HINT);
  assert.match(SOURCE_ROOT_HINT, /--sync_advisor_source_root/);
  assert.match(SOURCE_ROOT_HINT, /--sync_advisor_path_map/);
  // Unread and not shown entered while profiling: no claim that it is a def line.
  const running = inexactLineNote({ line: 26, defLine: null, func: "main", readable: false });
  assert.match(running.text, /line the trace recorded for main\(\): where it starts, or.*already running.*could not be read/);
  assert.doesNotMatch(running.text, /is defined/);
  assert.equal(running.hint, SOURCE_ROOT_HINT);
  const readable = inexactLineNote({ line: 26, defLine: null, func: "main", readable: true });
  assert.doesNotMatch(readable.text, /could not be read/);
});

test("a file changed since profiling says so, with the line the trace recorded", () => {
  const note = inexactLineNote({ line: 4, defLine: 4, func: "train_step", readable: true, recordedLine: 2 });
  assert.match(note.text, /^Line 4 is where train_step\(\) is defined in the file as it is now/);
  assert.match(note.text, /recorded it at line 2: the file changed since profiling/);
  assert.doesNotMatch(note.text, /trace records no call line|already running/);
  assert.equal(note.hint, null);
});

test("a file without the function at all says the recorded line is all there is", () => {
  const note = inexactLineNote({ line: 40, defLine: null, func: "train_step", readable: true, recordedLine: 40 });
  assert.match(note.text, /^Line 40 is the line the trace recorded: the file found here has no train_step\(\) there/);
  assert.match(note.text, /changed since profiling, or it is another file/);
  assert.doesNotMatch(note.text, /is defined|already running/);
  assert.equal(note.hint, SOURCE_ROOT_HINT);
});

test("an unread Jupyter cell's line says no notebook holds the cell, with how to give it one", async () => {
  const { inexactLineNote, isKernelCell, NOTEBOOK_HINT } = await import("../src/line_note.js");
  const note = inexactLineNote({ line: 3, defLine: 3, func: "train_step", readable: false, file: "/tmp/ipykernel_42/2312009515.py" });
  assert.match(note.text, /ran in a Jupyter cell, and no notebook under the source roots holds that cell as it ran/);
  assert.equal(note.hint, NOTEBOOK_HINT);
  assert.ok(isKernelCell("C:\\Users\\me\\AppData\\Local\\Temp\\ipykernel_7\\1.py"));
  assert.ok(!isKernelCell("/w/ipykernel_helpers.py"));
  // A script's file keeps the source-root note.
  assert.doesNotMatch(inexactLineNote({ line: 3, defLine: 3, readable: false, file: "/w/train.py" }).text, /Jupyter/);
});
