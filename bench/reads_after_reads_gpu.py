"""The truth behind ``Sync.after_read`` on real GPU traces: of the blocking syncs of traces
recorded on an H100/H200 (the project's fixtures and ``../shared``), those that come right
after another sync on their thread with nothing queued between (``cost.reads_right_after``,
the rule a CPU-only report applies to its latent reads) against all the others: their host
wait, as the GPU run measured it.

    python bench/reads_after_reads_gpu.py [TRACE ...]
"""

from __future__ import annotations

import glob
import os
import statistics
import sys

from tb_syncfinder.cost import reads_right_after
from tb_syncfinder.detect import detect_syncs
from tb_syncfinder.reader import read_trace
from tb_syncfinder.timeline import build_timeline

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = sorted(
    glob.glob(os.path.join(HERE, "tests", "gpu_*", "*.pt.trace.json.gz"))
    + glob.glob(os.path.join(HERE, "..", "shared", "traces", "h100_demo", "*.pt.trace.json.gz"))
)


def _waits(path: str) -> tuple[list[float], list[float]]:
    tl = build_timeline(read_trace(path))
    episodes = detect_syncs(tl)
    after = reads_right_after(episodes)
    first, second = [], []
    for episode, before in zip(episodes, after, strict=True):
        wait = float(sum(call.event.dur for call in episode.calls))
        (second if before is not None else first).append(wait)
    return first, second


def _line(name: str, waits: list[float]) -> str:
    if not waits:
        return f"  {name:<34} {0:>6}"
    return (
        f"  {name:<34} {len(waits):>6}  median {statistics.median(waits):>9.1f} us"
        f"  mean {statistics.fmean(waits):>9.1f} us  max {max(waits):>9.1f} us"
    )


def main(paths: list[str]) -> None:
    all_first: list[float] = []
    all_second: list[float] = []
    for path in paths:
        first, second = _waits(path)
        all_first += first
        all_second += second
        if second:
            print(os.path.relpath(path, HERE))
            print(_line("syncs after another, nothing queued", second))
            print(_line("the others", first))
    print(f"all {len(paths)} traces")
    print(_line("syncs after another, nothing queued", all_second))
    print(_line("the others", all_first))


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT)
