import assert from "node:assert/strict";
import { test } from "node:test";
import { tokenizePython } from "../src/highlight.js";
import { frameLocation, isOpenable, splitStack, stackToShow, vscodeMessage } from "../src/stack.js";
import { chooseTheme } from "../src/theme.js";

const stack = [
  { file: "<built-in method item of Tensor object>", line: null, func: "item", user: false },
  { file: "train/loss.py", line: 12, func: "compute_loss", user: true },
  { file: "torch/nn/modules/module.py", line: 1520, func: "_call_impl", user: false },
  { file: "train.py", line: 40, func: "main", user: true },
];

test("user frames come first in stack order, library frames are kept aside", () => {
  const { user, library } = splitStack(stack);
  assert.deepEqual(user.map((f) => f.func), ["compute_loss", "main"]);
  assert.deepEqual(library.map((f) => f.index), [0, 2]);
  assert.deepEqual(splitStack(null), { user: [], library: [] });
});

test("VS Code gets a 0-based line, the clipboard gets path:line", () => {
  assert.deepEqual(vscodeMessage(stack[1]), { filename: "train/loss.py", line: 11 });
  assert.deepEqual(vscodeMessage({ file: "a.py", line: null }), { filename: "a.py", line: 0 });
  assert.equal(frameLocation(stack[1]), "train/loss.py:12");
  assert.equal(frameLocation({ file: "a.py", line: null }), "a.py");
  // A Jupyter cell's frame: its notebook cell, never ipykernel's file for it.
  const cellFrame = { file: "/tmp/ipykernel_7/123.py", line: 6, cell: { notebook: "/w/train.ipynb", index: 2, execution_count: 4 } };
  assert.equal(frameLocation(cellFrame), "/w/train.ipynb In[4]:6");
  assert.deepEqual(vscodeMessage(cellFrame), { filename: "/w/train.ipynb", line: 0 });
});

test("built-ins and module markers are not openable files", () => {
  assert.equal(isOpenable(stack[0]), false);
  assert.equal(isOpenable({ file: "nn.Module: Linear_0" }), false);
  assert.equal(isOpenable(stack[1]), true);
});

test("a backward sync without a stack of its own shows its forward op's stack and the line that ran it", () => {
  // As the report has the demo's IndexBackward0 sync: autograd's backward thread records no
  // stack; the forward aten::index's stack and the loss.backward() line are on the sync.
  const forwardStack = [
    { file: "tb_syncfinder/demo/seg.py", line: 71, func: "baseline_loss", user: true },
    { file: "tb_syncfinder/demo/seg.py", line: 114, func: "baseline_step", user: true },
  ];
  const runBy = { file: "tb_syncfinder/demo/seg.py", line: 127, def_line: 114, func: "baseline_step", line_exact: true };
  const backward = {
    op: "autograd::engine::evaluate_function: IndexBackward0",
    stack: [],
    forward_op: "aten::index",
    forward_stack: forwardStack,
    source: { file: "tb_syncfinder/demo/seg.py", line: 82, def_line: 71, func: "baseline_loss", backward: true, run_by: runBy },
  };
  assert.deepEqual(stackToShow(backward), {
    from: "forward",
    frames: forwardStack,
    forwardOp: "aten::index",
    backwardOp: "IndexBackward0",
    runBy,
  });
  // Its own stack, when recorded (a CPU trace's backward thread), comes first.
  const own = stackToShow({ ...backward, stack });
  assert.equal(own.from, "own");
  assert.equal(own.frames, stack);
  assert.equal(own.runBy, runBy);
  // A forward op whose name the report lacks is not invented.
  assert.equal(stackToShow({ ...backward, forward_op: null }).forwardOp, null);
});

test("only a sync with no stack, no forward stack and no run-by line has nothing to show", () => {
  assert.deepEqual(stackToShow({ stack: [], forward_stack: [], source: { run_by: null } }), {
    from: null,
    frames: [],
    forwardOp: null,
    backwardOp: null,
    runBy: null,
  });
  assert.equal(stackToShow(null).from, null);
  assert.equal(stackToShow({ stack }).from, "own");
  assert.equal(stackToShow({ stack }).runBy, null);
  const runBy = { file: "train.py", line: 9, func: "main" };
  assert.deepEqual(stackToShow({ stack: [], source: { run_by: runBy } }).runBy, runBy);
});

test("tokens concatenate back to the exact line, markup included", () => {
  const lines = [
    'loss = criterion(out, y)  # <img src=x onerror=window.__xss=1>',
    "    idx = torch.nonzero(mask).squeeze(1)",
    "s = f'{x!r}' + \"<script>alert(1)</script>\" + r'\\d'",
    "def <img src=x onerror=alert(1)>(): return 0x1F, 1e-3, 10_000",
    "",
    "unterminated = 'abc",
  ];
  for (const line of lines) {
    const tokens = tokenizePython(line);
    assert.equal(tokens.map((t) => t.text).join(""), line);
  }
});

test("keywords, strings, numbers, comments and calls are told apart", () => {
  const t = tokenizePython("if x.item() > 0: return 'a'  # done");
  const of = (type) => t.filter((x) => x.type === type).map((x) => x.text);
  assert.deepEqual(of("kw"), ["if", "return"]);
  assert.deepEqual(of("call"), ["item"]);
  assert.deepEqual(of("num"), ["0"]);
  assert.deepEqual(of("str"), ["'a'"]);
  assert.deepEqual(of("com"), ["# done"]);
});

test("TensorBoard's dark mode wins over the system preference when readable", () => {
  assert.equal(chooseTheme({ parentDark: true, prefersDark: false }), "dark");
  assert.equal(chooseTheme({ parentDark: false, prefersDark: true }), "light");
  assert.equal(chooseTheme({ parentDark: null, prefersDark: true }), "dark");
  assert.equal(chooseTheme({ parentDark: null, prefersDark: false }), "light");
  assert.equal(chooseTheme({ parentDark: true, prefersDark: true, override: "light" }), "light");
});

test("stack lines say which is a def line and where the sync's call is", async () => {
  const { frameLines } = await import("../src/stack.js");
  const stack = [
    { file: "<built-in>", line: null, func: "unique", user: false },
    { file: "tb_syncfinder/demo/seg.py", line: 71, func: "baseline_loss", user: true },
    { file: "tb_syncfinder/demo/seg.py", line: 114, func: "baseline_step", user: true },
  ];
  const source = { file: "/abs/tb_syncfinder/demo/seg.py", line: 76, def_line: 71, func: "baseline_loss" };
  const lines = frameLines(stack, source);
  assert.deepEqual(lines.map((f) => [f.func, f.role, f.call]), [
    ["unique", null, null],
    ["baseline_loss", "def", 76],
    ["baseline_step", null, null], // a def line, or a running frame's line: unknown
  ]);
  // Legacy traces carry call lines: the sync's frame line is its call line, no marks.
  const legacy = frameLines([{ file: "train.py", line: 42, func: "step", user: true }], { file: "train.py", line: 42, def_line: 40, func: "step" });
  assert.deepEqual(legacy.map((f) => [f.role, f.call]), [[null, null]]);
  assert.deepEqual(frameLines(stack, null).map((f) => f.role), [null, null, null]);
});

test("a frame already running when profiling started shows the sync's line beside the one it was at", async () => {
  const { frameLines } = await import("../src/stack.js");
  // record_real_shapes.py: main() was at line 81 (on_step()) when profiling started; the
  // source found the sync at line 79. Both lines shown, each said for what it is.
  const stack = [
    { file: "torch/_tensor.py", line: 1, func: "item", user: false },
    { file: "bench/record_real_shapes.py", line: 81, func: "resnet50_all_options", user: true },
  ];
  const source = { file: "bench/record_real_shapes.py", line: 79, line_exact: true, def_line: 60, func: "resnet50_all_options" };
  assert.deepEqual(frameLines(stack, source).map((f) => [f.func, f.role, f.call]), [
    ["item", null, null],
    ["resnet50_all_options", "running", 79],
  ]);
  // Not exact: the header's note says what the line is; no claim in the stack.
  assert.deepEqual(frameLines(stack, { ...source, line_exact: false }).map((f) => f.role), [null, null]);
});
