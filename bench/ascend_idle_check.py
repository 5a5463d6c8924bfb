"""The engine's NPU idle after each sync next to what torch_npu's own analysis measured.

    python bench/ascend_idle_check.py TRACE_VIEW_JSON [...]

torch_npu writes, beside the NPU's tasks ("Ascend Hardware"), its own reading of them in an
"Overlap Analysis" process: "Computing", "Communication" and "Free" spans, from the NPU's
first task of the step to its last. Per trace this prints:

- the NPU's busy time as the engine reads it (every task but a stream's wait for an event
  and the profiler's placeholders; ``catalogue.NPU_IDLE_TASK_TYPES``), per profiled step,
  beside torch_npu's "Computing" plus "Communication (Not Overlapped)";
- per sync: the engine's idle after it (``gpu_idle_after_us``: from the sync's end until the
  NPU is busy again, at most to the step's end) and, where the sync ends inside torch_npu's
  analysed span, what is left of the "Free" span it ends in (the same quantity as torch_npu
  reads it). Outside that span torch_npu says nothing: "-".

The published recordings used in docs/validation.md (section 9) are MindStudio Insight's
test data (``Ascend/msinsight``, ``test/data/pytorch/text/level2/rank*_ascend_pt``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tb_syncfinder import analyze
from tb_syncfinder.catalogue import NPU_IDLE_TASK_TYPES, NPU_TASK_PROCESS


def _union_us(spans: list[tuple[float, float]]) -> float:
    total, lo, hi = 0.0, None, None
    for a, b in sorted(spans):
        if hi is None or a > hi:
            if hi is not None:
                total += hi - lo  # type: ignore[operator]
            lo, hi = a, b
        elif b > hi:
            hi = b
    return total + (hi - lo if hi is not None else 0.0)  # type: ignore[operator]


def _spans(events: list[dict[str, Any]], pids: set[Any], names: set[str] | None = None):
    return [
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur") or 0.0))
        for e in events
        if e.get("ph") == "X" and e.get("pid") in pids and (names is None or e["name"] in names)
    ]


def check(path: str) -> None:
    raw = json.loads(Path(path).read_text())
    events = raw if isinstance(raw, list) else raw["traceEvents"]
    names = {
        e["pid"]: (e.get("args") or {}).get("name")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    hardware = {pid for pid, name in names.items() if name == NPU_TASK_PROCESS}
    overlap = {pid for pid, name in names.items() if name == "Overlap Analysis"}
    tasks = [
        e
        for e in events
        if e.get("ph") == "X"
        and e.get("pid") in hardware
        and (e.get("args") or {}).get("Task Type") not in NPU_IDLE_TASK_TYPES
    ]
    busy = _union_us(_spans(tasks, hardware))
    theirs = _union_us(_spans(events, overlap, {"Computing", "Communication(Not Overlapped)"}))
    free = sorted(_spans(events, overlap, {"Free"}))
    analysed = _spans(events, overlap)
    report = analyze(path)
    steps = max(report.summary.step_count, 1)
    print(f"{path}")
    print(
        f"  NPU busy per step: {busy / steps / 1000:.2f} ms as the engine counts it (every "
        f"task but event waits and placeholders); torch_npu's Computing + Communication (Not "
        f"Overlapped) "
        f"{theirs / steps / 1000:.2f} ms"
    )
    lo = min((a for a, _ in analysed), default=None)
    hi = max((b for _, b in analysed), default=None)
    for sync in report.syncs:
        end = sync.end_us or sync.ts_us + sync.host_wait_us
        left = next((b - end for a, b in free if a - 1 <= end < b), None)
        inside = lo is not None and lo <= end <= hi  # type: ignore[operator]
        theirs_text = f"{left:.1f} us" if left is not None else ("0 (busy)" if inside else "-")
        print(
            f"  {sync.kind:<20} {sync.op or sync.api:<28} idle after: engine "
            f"{sync.gpu_idle_after_us:8.1f} us, torch_npu's Free left {theirs_text}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", help="torch_npu trace_view.json files")
    for path in parser.parse_args(argv).traces:
        check(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
