"""What the many-ranks stage adds to analysing a job's ranks one by one.

    python bench/bench_ranks.py [-n 5] [--ranks 8] [--steps 60]

Two 8-rank jobs are written to a temporary folder:

* ``real``: the real NCCL rank of ``../shared/traces/real/a100_nccl_event_sync`` (40k
  events, 21 collectives) copied once per rank, with that rank's ``distributedInfo`` and a
  host per 4 ranks (skipped when the shared traces are absent);
* ``fixture``: the builder's NCCL-shaped job of ``tests/nccl_job.py`` (a late rank, two hosts
  with skewed clocks), ``--steps`` steps long.

Times (best of N), per job: the engine's ``analyze_trace`` of every rank (which, since the
job stage is wired, includes each rank's extraction), ``extract_rank`` on each rank's
timeline (the per-trace extraction, run while the timeline is in memory; the timeline build
is the engine's and not counted; the collective arguments are the reader's), the job stage
(grouping, matching, clocks, waits, fallback causes), and the stage as
``engine.report_runs`` runs it (``jobs.job_stage``: plus late arrivals, peer waits, the
relabelled syncs and the job JSON). Prints the ratios and PASS/MISS for the target:
grouping and matching under 10 % of the one-by-one analysis.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from tb_syncfinder import jobs, ranks  # noqa: E402
from tb_syncfinder.collectives import ReaderArgs, extract_rank  # noqa: E402
from tb_syncfinder.engine import Options, analyze_trace  # noqa: E402
from tb_syncfinder.reader import read_trace  # noqa: E402
from tb_syncfinder.timeline import build_timeline  # noqa: E402

REAL_NAME = "a100_nccl_event_sync.pt.trace.json.gz"
CANDIDATES = [
    Path("/work/shared/traces/real") / REAL_NAME,
    REPO.parent / "shared" / "traces" / "real" / REAL_NAME,
]
TARGET = 0.10  # the job stage at most this share of the one-by-one analysis


def write_real_job(folder: Path, world: int) -> list[Path] | None:
    template = next((p for p in CANDIDATES if p.is_file()), None)
    if template is None:
        return None
    doc = json.loads(gzip.decompress(template.read_bytes()))
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(world):
        info = dict(doc["distributedInfo"], rank=r, world_size=world, pg_count=1)
        info["pg_config"] = [dict(info["pg_config"][0], pg_size=world, ranks=list(range(world)))]
        doc["distributedInfo"] = info
        doc["host_name"] = f"node{r // 4}"
        path = folder / f"rank{r}.pt.trace.json.gz"
        path.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
        paths.append(path)
    return paths


def write_fixture_job(folder: Path, world: int, steps: int) -> list[Path]:
    from nccl_job import JobSpec, write_job

    spec = JobSpec(
        world=world,
        steps=steps,
        late={(3, s): 4000.0 for s in range(2, steps, 3)},
        host_skew_us=(0.0, 2500.0),
    )
    return list(write_job(folder, spec).values())


def best(repeat: int, call: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return min(times), result


def bench_job(name: str, paths: list[Path], repeat: int) -> dict[str, float]:
    options = Options()
    resolver = options.resolver()
    t_analyze, results = best(
        repeat, lambda: [analyze_trace(str(p), options, resolver) for p in paths]
    )
    timelines = []
    for p in paths:
        data = read_trace(str(p))
        timelines.append(
            (
                build_timeline(data),
                data.distributed_info,
                ReaderArgs(data.base_time_ns, data.host_name),
            )
        )

    def extract() -> list[Any]:
        return [
            extract_rank(tl, info, comm=comm, syncs=res.syncs)
            for (tl, info, comm), res in zip(timelines, results, strict=True)
        ]

    t_extract, traces = best(repeat, extract)

    def job_stage() -> Any:
        run = ranks.analyze_ranks(traces)
        for job in run.jobs:
            ranks.job_causes(job)
        return run

    t_job, run = best(repeat, job_stage)
    (job,) = run.jobs
    # What report_runs runs per run since the stage is wired (engine -> jobs.job_stage):
    # the above plus late arrivals, peer waits, the relabelled syncs and the job object.
    # analyze_trace now extracts each rank too (its result carries the RankTrace).
    assert all(r.rank is not None for r in results)

    def wired() -> Any:
        stage = jobs.job_stage(results)
        return stage.to_json() if stage is not None else None

    t_wired, _ = best(repeat, wired)
    print(
        f"\n{name}: {len(paths)} ranks, {sum(len(t.collectives) for t in traces)} "
        f"collectives, {len(job.collectives)} matched, groups "
        f"{[(g.group, g.status) for g in job.groups]}"
    )
    print(f"  analyze_trace, rank by rank   {t_analyze * 1e3:9.1f} ms")
    print(
        f"  extract_rank (per trace)      {t_extract * 1e3:9.1f} ms  {t_extract / t_analyze:6.1%}"
    )
    print(f"  job stage (group+match+...)   {t_job * 1e3:9.1f} ms  {t_job / t_analyze:6.1%}")
    print(f"  job stage as wired (jobs.py)  {t_wired * 1e3:9.1f} ms  {t_wired / t_analyze:6.1%}")
    ratio = t_wired / t_analyze
    print(
        f"  grouping and matching add {ratio:.1%} to the one-by-one analysis "
        f"(target < {TARGET:.0%}): {'PASS' if ratio < TARGET else 'MISS'}"
    )
    print(f"  with the per-trace extraction: {(t_job + t_extract) / t_analyze:.1%}")
    return {
        "analyze_s": t_analyze,
        "extract_s": t_extract,
        "job_s": t_job,
        "wired_s": t_wired,
        "ratio": ratio,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--repeat", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args(argv)
    ratios = []
    with tempfile.TemporaryDirectory(prefix="bench_ranks_") as tmp:
        real = write_real_job(Path(tmp) / "real", args.ranks)
        if real is None:
            print("real: skipped (../shared/traces/real not available)")
        else:
            ratios.append(
                bench_job("real (a100_nccl_event_sync x ranks)", real, args.repeat)["ratio"]
            )
        fixture = write_fixture_job(Path(tmp) / "fixture", args.ranks, args.steps)
        ratios.append(bench_job("fixture (tests/nccl_job.py)", fixture, args.repeat)["ratio"])
    return 0 if all(r < TARGET for r in ratios) else 1


if __name__ == "__main__":
    sys.exit(main())
