// @ts-check
import { cellPlace } from "./format.js";
/**
 * Python stacks: ordering for display and the "open this frame" action. Pure.
 */

/**
 * A frame as the report stores it; `cell`: the notebook cell of a Jupyter cell's frame.
 * @typedef {{file: string, line: number | null, func: string, user: boolean, cell?: {notebook: string, index: number, execution_count: number | null} | null}} Frame
 */

/**
 * Split a stack (innermost first, as the report stores it) into the user's frames, shown
 * first, and library frames (torch, site-packages, built-ins), folded by default. The
 * relative order inside each group is kept; `index` is the frame's depth in the original.
 * @param {Frame[] | null | undefined} stack
 * @returns {{user: (Frame & {index: number})[], library: (Frame & {index: number})[]}}
 */
export function splitStack(stack) {
  const user = [];
  const library = [];
  (stack || []).forEach((f, index) => (f.user ? user : library).push({ ...f, index }));
  return { user, library };
}

/**
 * The text copied to the clipboard for a frame: `path:line` (path alone without a line); a
 * Jupyter cell's frame by its notebook cell (`train.ipynb In[4]:6`), as IPython names it:
 * ipykernel's file for the cell never exists.
 * @param {{file: string, line?: number | null, cell?: {notebook: string, index?: number | null, execution_count?: number | null} | null}} frame
 * @returns {string}
 */
export function frameLocation(frame) {
  const place = cellPlace(frame.cell) ?? frame.file;
  return frame.line ? `${place}:${frame.line}` : place;
}

/**
 * The message VS Code's TensorBoard integration understands, as the PyTorch Profiler tab
 * sends it: `{filename, line}` with a 0-based line; for a Jupyter cell's frame, its
 * notebook (a line of the cell is none of the notebook file's).
 * @param {{file: string, line?: number | null, cell?: {notebook: string} | null}} frame
 * @returns {{filename: string, line: number}}
 */
export function vscodeMessage(frame) {
  if (frame.cell?.notebook) return { filename: frame.cell.notebook, line: 0 };
  return { filename: frame.file, line: Math.max(0, (frame.line ?? 1) - 1) };
}

/**
 * Whether a frame is something an editor can open (a real file, not `<built-in ...>` or
 * `nn.Module: Linear_0`).
 * @param {{file: string}} frame
 * @returns {boolean}
 */
export function isOpenable(frame) {
  const f = frame.file || "";
  return f !== "" && !f.startsWith("<") && !f.startsWith("nn.Module");
}

/**
 * What the line of the sync's own frame is. Modern traces record where a function is
 * *defined* (`def_line`), not the line that made the call; the sync's call line is in its
 * source. The frame of the source's function gets `def` when its line is that def line,
 * `running` when it is neither that nor the exact line found to sync (the function was
 * already running when profiling started, and shows the line it was at then), and `call`:
 * the sync's line. Other frames are left unmarked: their line is a def line too,
 * except for a function already running when profiling started, which shows the line it was
 * at, and the trace does not say which. Legacy traces (frames with call lines) get no marks.
 * @template {{file: string, line: number | null, func: string}} F
 * @param {F[]} frames
 * @param {{file?: string | null, line?: number | null, line_exact?: boolean, def_line?: number | null, func?: string | null} | null | undefined} source
 * @returns {(F & {role: "def" | "running" | null, call: number | null})[]}
 */
export function frameLines(frames, source) {
  const base = (/** @type {string | null | undefined} */ f) => (f || "").split(/[\\/]/).pop();
  const own = source
    ? frames.findIndex((f) => f.func === source.func && base(f.file) === base(source.file))
    : -1;
  const atDef =
    own >= 0 && source?.def_line !== null && source?.def_line !== undefined && frames[own].line === source.def_line;
  const line = source?.line;
  // Not its def line, yet not the line found to sync: a function already running when
  // profiling started, recorded at the line it was at then (a loop's `main()`).
  const running = own >= 0 && !atDef && source?.line_exact === true && line !== null && line !== undefined && frames[own].line !== line;
  return frames.map((f, i) => ({
    ...f,
    role: i !== own ? null : atDef ? "def" : running ? "running" : null,
    call: (atDef || running) && i === own && line !== null && line !== undefined && line !== f.line ? line : null,
  }));
}

/**
 * @typedef {{file: string, line: number | null, func: string, resolved_path?: string | null, def_line?: number | null}} RunBy
 */

/**
 * Which Python stack the detail shows for a sync, and what to say about it. A sync's own
 * stack when it has one (`from: "own"`). A backward-pass sync runs in autograd's backward
 * thread, which records no stack on a GPU: the report then carries the stack of the forward
 * operator it is the gradient of (`forward_stack`, `forward_op`), shown as such
 * (`from: "forward"`), naming the backward operator (`backwardOp`: the sync's operator
 * without autograd's `evaluate_function:` prefix). `runBy` is the line that ran the
 * backward pass (`source.run_by`, `loss.backward()`), whatever the stack; `from: null`
 * with no `runBy` is a trace recorded without stacks.
 * @param {{stack?: Frame[] | null, forward_stack?: Frame[] | null, forward_op?: string | null,
 *   op?: string | null, source?: {run_by?: RunBy | null} | null} | null | undefined} sync
 * @returns {{from: "own" | "forward" | null, frames: Frame[], forwardOp: string | null,
 *   backwardOp: string | null, runBy: RunBy | null}}
 */
export function stackToShow(sync) {
  const own = sync?.stack || [];
  const forward = sync?.forward_stack || [];
  const runBy = sync?.source?.run_by?.file ? sync.source.run_by : null;
  if (own.length) return { from: "own", frames: own, forwardOp: null, backwardOp: null, runBy };
  if (forward.length) {
    const backwardOp = (sync?.op || "").replace(/^autograd::engine::evaluate_function:\s*/, "") || null;
    return { from: "forward", frames: forward, forwardOp: sync?.forward_op || null, backwardOp, runBy };
  }
  return { from: null, frames: [], forwardOp: null, backwardOp: null, runBy };
}
