"""`tb-syncfinder report` on a logdir of several traces: in one process against this
machine's analysis processes (``--jobs``), end to end, in one run.

    python bench/bench_local_processes.py [-n 5] [--jobs 2] [TRACE ...]

For each logdir (copies of each TRACE, default the 9.8, 25.8 and 53.7 MB A100 traces of
../shared, two and four copies each), runs ``report --format json --no-summaries`` as a
fresh process with ``--jobs 1`` (one process), ``--jobs N`` and the default (which decides
by the traces' JSON whether processes pay), interleaved, and prints the medians, the
ratio to one process and whether the outputs were the same bytes. What it shows sizes
``fanout.PROCESSES_MIN_JSON_BYTES``: below some JSON, the processes' start costs more
than they save. Benchmarks print; they never fail.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "traces" / "real"
DEFAULT_TRACES = [
    REAL / "a100_nccl_event_sync.pt.trace.json.gz",
    REAL / "a100_item_heavy_rank0.pt.trace.json.gz",
    REAL / "a100_df_index_resolver.pt.trace.json.gz",
]


def _logdir(folder: Path, trace: Path, copies: int) -> Path:
    run = folder / f"{trace.name.split('.')[0]}_x{copies}" / "job"
    run.mkdir(parents=True)
    for rank in range(copies):
        shutil.copy(trace, run / f"rank{rank}.pt.trace.json.gz")
    return run.parent


def _report(logdir: Path, jobs: str | None, out: Path) -> float:
    command = [sys.executable, "-m", "tb_syncfinder", "report", str(logdir)]
    command += ["--format", "json", "--no-summaries", "-o", str(out)]
    if jobs is not None:
        command += ["--jobs", jobs]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    start = time.perf_counter()
    subprocess.run(command, check=False, env=env, stdout=subprocess.DEVNULL, cwd=out.parent)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("-n", type=int, default=5, help="rounds (median reported)")
    parser.add_argument("--jobs", type=int, default=2, help="processes of the --jobs N runs")
    parser.add_argument("--copies", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args()
    traces = args.traces or [t for t in DEFAULT_TRACES if t.exists()]
    if not traces:
        print("no traces: give some, or put ../shared beside the clone")
        return 0
    from tb_syncfinder.discovery import find_traces
    from tb_syncfinder.fanout import local_processes
    from tb_syncfinder.windows import json_bytes

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cores} cores, load average {os.getloadavg()[0]:.2f}; median of {args.n} rounds")
    subjects = {"one process": "1", f"--jobs {args.jobs}": str(args.jobs), "default": None}
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for trace in traces:
            for copies in args.copies:
                logdir = _logdir(Path(tmp), trace, copies)
                json_mb = copies * (json_bytes(str(trace)) or 0) / 1e6
                chosen = local_processes(find_traces(str(logdir)))
                times: dict[str, list[float]] = {name: [] for name in subjects}
                outputs: dict[str, bytes] = {}
                for _ in range(args.n):
                    for name, jobs in subjects.items():
                        out = Path(tmp) / f"out_{len(outputs)}.json"
                        times[name].append(_report(logdir, jobs, out))
                        outputs[name] = out.read_bytes() if out.exists() else b""
                        out.unlink(missing_ok=True)
                same = len(set(outputs.values())) == 1
                medians = {name: statistics.median(ts) for name, ts in times.items()}
                rows.append((logdir.name, json_mb, chosen, medians, same))
                cells = "  ".join(f"{name} {m:.2f} s" for name, m in medians.items())
                print(f"{logdir.name:34} {json_mb:7.1f} MB  default={chosen}  {cells}  same={same}")
    print()
    print("| logdir | JSON | default's processes | one process | " + " | ".join(list(subjects)[1:]))
    print("|---|---|---|---|" + "---|" * (len(subjects) - 1))
    for name, json_mb, chosen, medians, same in rows:
        one = medians["one process"]
        cells = " | ".join(
            f"{medians[s]:.2f} s ({medians[s] / one:.2f}x)" for s in list(subjects)[1:]
        )
        print(f"| {name} | {json_mb:.0f} MB | {chosen} | {one:.2f} s | {cells} |")
        if not same:
            print(f"  !! {name}: the outputs differ between the subjects")
    return 0


if __name__ == "__main__":
    sys.exit(main())
