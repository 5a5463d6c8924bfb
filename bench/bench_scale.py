"""The Ray fan-out against the local path on the same files, in one run.

    python bench/bench_scale.py [--copies 6] [--workers 2] [--ranks 1000]

1. Copies of the 54 MB A100 trace: serial time on this process, as many analysis processes
   of this machine as ``--workers`` (their start included), then the Ray map on a local
   cluster of ``--workers`` CPUs (started first, its start-up printed apart). Prints traces
   per second per worker and the map's time over serial time / workers (goal: <= 1.1).
2. A generated logdir of ``--ranks`` small rank traces, end to end through
   ``tb-syncfinder report`` (local, then --ray, which reads so little JSON on this machine
   without starting a cluster), and once more reading the summaries the --ray run wrote.
Needs the ray extra (pip install 'ray>=2.10', or '.[ray]' in the clone). Benchmarks print;
they never fail.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]
TRACE = REPO.parent / "shared" / "traces" / "real" / "a100_df_index_resolver.pt.trace.json.gz"


def _copies(folder: Path, count: int) -> None:
    run = folder / "job"
    run.mkdir(parents=True)
    for rank in range(count):
        shutil.copy(TRACE, run / f"rank{rank}.pt.trace.json.gz")


def map_speed(copies: int, workers: int) -> None:
    import ray

    from tb_syncfinder.discovery import find_traces
    from tb_syncfinder.engine import Options, analyze_runs
    from tb_syncfinder.fanout import process_mapper, ray_mapper

    with tempfile.TemporaryDirectory() as tmp:
        _copies(Path(tmp), copies)
        refs = find_traces(tmp)
        options = Options(contexts=False)
        start = time.perf_counter()
        analyze_runs(refs, options)
        serial = time.perf_counter() - start
        # This machine's analysis processes (what `report` uses without Ray), their start
        # included: no cluster to start.
        start = time.perf_counter()
        analyze_runs(refs, options, mapper=process_mapper(workers))
        processes = time.perf_counter() - start

        start = time.perf_counter()
        package_parent = str(REPO)
        ray.init(
            address="local",  # a cluster of its own, as --ray starts (never another's)
            num_cpus=workers,
            include_dashboard=False,
            logging_level="ERROR",
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": package_parent}},
        )
        cluster_start = time.perf_counter() - start
        try:
            # Warm the workers (imports) as a long-running cluster would be.
            ray.get(
                [
                    ray.remote(lambda: __import__("tb_syncfinder.engine")).remote()
                    for _ in range(workers)
                ]
            )
            start = time.perf_counter()
            analyze_runs(refs, options, mapper=ray_mapper())
            mapped = time.perf_counter() - start
        finally:
            ray.shutdown()
    ideal = serial / workers
    print(f"{copies} copies of {TRACE.name} ({TRACE.stat().st_size / 1e6:.1f} MB gz each)")
    print(f"  serial, this process    {serial:7.2f} s  {copies / serial:6.2f} traces/s")
    print(
        f"  Ray map, {workers} workers      {mapped:7.2f} s  "
        f"{copies / mapped / workers:6.2f} traces/s per worker"
    )
    print(f"  cluster start (apart)   {cluster_start:7.2f} s")
    print(
        f"  {workers} local processes       {processes:7.2f} s  "
        f"{copies / processes / workers:6.2f} traces/s per process (their start included)"
    )
    print(f"  map / (serial / workers) = {mapped / ideal:.2f}  (goal <= 1.1)")


def _rank_logdir(folder: Path, ranks: int) -> Path:
    from kineto_builder import KinetoTraceBuilder, item_sync

    b = KinetoTraceBuilder()
    for n in range(1, 4):
        with b.step(n):
            for _ in range(20):
                b.kernel(dur=200)
            item_sync(b, stack=[("train.py", 8, "train_step")])
    first = b.write(folder / "job" / "rank0.pt.trace.json.gz")
    for rank in range(1, ranks):
        shutil.copy(first, folder / "job" / f"rank{rank}.pt.trace.json.gz")
    return folder


def _timed(args: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tb_syncfinder", "report", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    tally = [line for line in done.stderr.splitlines() if " traces: " in line]
    return time.perf_counter() - start, (tally[-1] if tally else done.stderr[-200:])


def many_ranks(ranks: int, workers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = _rank_logdir(Path(tmp), ranks)
        size = sum(p.stat().st_size for p in root.rglob("*.gz"))
        out = ["--json", "-o", os.devnull]
        print(
            f"{ranks} rank traces of {size / ranks / 1e3:.0f} KB gz each, end to end "
            "(process start and cluster start included)"
        )
        local, _ = _timed([str(root), "--no-summaries", *out])
        print(f"  local                   {local:7.2f} s  {ranks / local:7.1f} traces/s")
        on_ray, tally = _timed([str(root), "--ray", "--ray-workers", str(workers), *out])
        print(
            f"  --ray, {workers} workers        {on_ray:7.2f} s  {ranks / on_ray:7.1f} "
            f"traces/s   ({tally.split(': ', 1)[-1]})"
        )
        again, tally = _timed([str(root), *out])
        print(
            f"  from the summaries      {again:7.2f} s  {ranks / again:7.1f} traces/s"
            f"   ({tally.split(': ', 1)[-1]})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ranks", type=int, default=1000)
    args = parser.parse_args()
    try:
        import ray  # noqa: F401
    except ImportError:
        print("needs the ray extra: pip install 'tb-syncfinder[ray]'")
        return 0
    if TRACE.exists():
        map_speed(args.copies, args.workers)
    else:
        print(f"{TRACE} not here: the 54 MB part is skipped")
    many_ranks(args.ranks, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
