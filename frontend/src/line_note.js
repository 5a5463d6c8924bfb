// @ts-check
/**
 * The note shown above a site whose line is not the exact line of the syncing call
 * (`line_exact: false`), worded from what the trace and the source say. Pure.
 *
 * The engine keeps the recorded line when it cannot prove the call line: either the line a
 * function is defined on (all a modern trace records for a frame that started while
 * profiling, `line == def_line`), or, for a frame that was already running when profiling
 * started (a training loop's `<module>` or `main`), the line it was at then.
 */

/** How to let the plugin read a file it cannot find. */
export const SOURCE_ROOT_HINT =
  "If the trace was recorded on another machine or in a container, start TensorBoard with " +
  "--sync_advisor_path_map FROM=TO (e.g. /workspace=/home/me/project) or " +
  "--sync_advisor_source_root DIR, or run it from the project's directory.";

/** How to let the plugin read a Jupyter cell's code: from the notebook that holds it. */
export const NOTEBOOK_HINT =
  "Save the notebook with the cell as it ran, and start TensorBoard from the notebook's " +
  "folder or with --sync_advisor_source_root DIR.";

// ipykernel's name for a cell's code (<tmp>/ipykernel_<pid>/<hash of its text>.py): a file
// that never exists; the plugin reads the cell from a notebook under the source roots.
const KERNEL_CELL = /(?:^|[/\\])ipykernel_\d+[/\\]\d+\.py$/;

/**
 * Whether `file` is ipykernel's name for a Jupyter cell's code.
 * @param {string | null | undefined} file
 */
export function isKernelCell(file) {
  return !!file && KERNEL_CELL.test(file);
}

/**
 * @param {{line: number | null | undefined, defLine: number | null | undefined, func?: string | null, readable: boolean, recordedLine?: number | null, file?: string | null}} args
 *   `readable`: whether the plugin could read the source file. `recordedLine`: set when the
 *   file no longer has the function where the trace recorded it (it changed since
 *   profiling); `line` is then the function's first line in the file as it is now.
 *   `file`: the recorded file (a Jupyter cell's is read from its notebook).
 * @returns {{text: string, hint: string | null}}
 */
export function inexactLineNote({ line, defLine, func, readable, recordedLine = null, file = null }) {
  const where = `Line ${line ?? "?"}`;
  const fn = func === "<module>" ? "the script's top level" : func ? `${func}()` : "the function";
  if (recordedLine !== null && recordedLine !== undefined && (defLine === null || defLine === undefined)) {
    return {
      text:
        `${where} is the line the trace recorded: the file found here has no ${fn} there, nor ` +
        "one function of that name elsewhere. It changed since profiling, or it is another " +
        "file of that name.",
      hint: SOURCE_ROOT_HINT,
    };
  }
  if (recordedLine !== null && recordedLine !== undefined) {
    return {
      text:
        `${where} is where ${fn} is defined in the file as it is now; the trace recorded it at ` +
        `line ${recordedLine}: the file changed since profiling, so the lines of its calls ` +
        "shown are candidates, not the call that synced.",
      hint: null,
    };
  }
  const atDef = line !== null && line !== undefined && line === defLine;
  if (!readable && isKernelCell(file)) {
    return {
      text:
        `${where} is the line the trace recorded for ${fn}, not the call that synced: it ran in a ` +
        "Jupyter cell, and no notebook under the source roots holds that cell as it ran.",
      hint: NOTEBOOK_HINT,
    };
  }
  if (!readable) {
    // Unread, the engine claims a def line only where the trace shows the frame entered
    // while profiling ran; otherwise the line may be where an already running frame was.
    const recordedUnread = atDef
      ? `${where} is where ${fn} is defined: the trace records no call line`
      : `${where} is the line the trace recorded for ${fn}: where it starts, or, if it was already running when profiling started, the line it was at then`;
    return {
      text: `${recordedUnread}, and the source file could not be read to find the call.`,
      hint: SOURCE_ROOT_HINT,
    };
  }
  const recorded = atDef
    ? `${where} is where ${fn} is defined: the trace records no call line`
    : `${where} is the line the frame was at when recorded (${fn} was already running when profiling started): the sync is in a call it made after that, which in a loop may stand above it`;
  return {
    text: `${recorded}, and the source does not single out one call that syncs.`,
    hint: null,
  };
}
