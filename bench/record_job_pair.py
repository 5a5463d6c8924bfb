"""Record the two-rank job of ``bench/job_workload.py`` on one CUDA GPU: the traces and
unprofiled step times behind "predicted vs measured job saving" in docs/validation.md
(issue 17).

    python bench/record_job_pair.py --out DIR [--steps 5] [--rounds 5] [--timed-steps 30]
        [--warmup-steps 5] [--host-ratio 1.5] [--threads 4]

Two processes (gloo, CUDA tensors, both on device 0) run every variant in turn:

1. **Calibrate** (GPU only): both ranks time their GPU step together (the GPU is shared;
   the other rank's model runs a sixteenth of the late rank's batch), then one pass of the
   host's data pipeline; ``host_passes`` makes the host's work per step ``--host-ratio``
   times the late rank's GPU step, so that the fixed job is bound by the host and a
   read-back costs the GPU work still queued.
2. **Profile** each variant as the demo does (``with_stack``, ``record_shapes``, CUDA sync
   records; one wait and one warm-up step, then ``--steps``): ``DIR/<variant>/rank<N>.pt.
   trace.json.gz``, one run folder per variant, frame paths relative to the repository.
3. **Warn half**: the same steps under ``torch.cuda.set_sync_debug_mode("warn")``; the lines
   of the workload that torch warns at, per rank.
4. **Time without the profiler**: ``--warmup-steps`` then ``--timed-steps`` steps between two
   device synchronizations, the variants alternated in each of ``--rounds`` rounds; the job's
   step is the slower rank's.

Writes ``DIR/job_pair.json``; ``python bench/validate_job_pair.py DIR`` then prints the
report's predicted job saving next to the measured one. On a CPU (``--device cpu``) the job
runs with CPU tensors as a check of this script; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import job_workload as jw  # noqa: E402
import savings_workloads as wl  # noqa: E402
from record_savings_pairs import _sync, _timed, markers, portable, versions  # noqa: E402

WORKLOAD_FILE = Path(jw.__file__).resolve()
WAIT, WARMUP = 1, 1
WORLD = 2
RESULT_FILE = "job_pair.json"


def calibrate(device: torch.device, size: wl.PairSize, ratio: float) -> tuple[wl.PairSize, dict]:
    """``host_passes`` (the same on both ranks) from the GPU step timed with both ranks on
    the GPU at once."""
    generator = torch.Generator().manual_seed(dist.get_rank())
    model, optimizer = wl.mlp(device, size)
    x, labels = wl.host_batch(generator, size, 0)
    batch = jw.gpu_batch(dist.get_rank(), size)
    x, labels = x[:batch], labels[:batch]
    x, labels = x.to(device), labels.to(device)

    def gpu_step() -> None:
        wl.backward_step(optimizer, wl.forward_loss(model, x, labels))

    for _ in range(3):
        gpu_step()
    _sync(device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(10):
        gpu_step()
    _sync(device)
    gpu_shared_ms = (time.perf_counter() - started) * 100
    dist.barrier()
    # The late rank's GPU step sets the host's work, the same on every rank.
    heavy = torch.tensor([gpu_shared_ms if dist.get_rank() == jw.LATE_RANK else 0.0])
    dist.all_reduce(heavy, op=dist.ReduceOp.MAX)
    wl.host_batch(generator, size, 0)
    base = _timed(lambda: wl.host_batch(generator, size, 0), 5)
    per_pass = max((_timed(lambda: wl.host_batch(generator, size, 4), 5) - base) / 4, 1e-3)
    passes = torch.tensor([int(min(max(round((ratio * float(heavy) - base) / per_pass), 0), 400))])
    dist.all_reduce(passes, op=dist.ReduceOp.MAX)
    info = {
        "host_ratio_target": ratio,
        "gpu_step_shared_ms": gpu_shared_ms,
        "late_rank_gpu_step_ms": float(heavy),
        "host_base_ms": base,
        "host_pass_ms": per_pass,
        "host_passes": int(passes.item()),
    }
    return wl.with_host_passes(size, int(passes.item()), 0), info


def profile(
    variant: str, rank: int, device: torch.device, size: wl.PairSize, steps: int, out: Path
) -> str:
    activities = [torch.profiler.ProfilerActivity.CPU]
    options = {}
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        try:
            options["experimental_config"] = torch._C._profiler._ExperimentalConfig(
                enable_cuda_sync_events=True
            )
        except (AttributeError, TypeError):
            pass
    run = out / variant
    run.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="job-pair-") as tmp:
        raw = Path(tmp) / f"rank{rank}.pt.trace.json"
        dist.barrier()
        with torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=steps, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
            record_shapes=True,
            with_stack=True,
            **options,
        ) as profiler:
            jw.train(variant, rank, device, size, WAIT + WARMUP + steps, profiler.step)
        _sync(device)
        text = raw.read_text(encoding="utf-8")
    target = run / f"rank{rank}.pt.trace.json.gz"
    target.write_bytes(gzip.compress(portable(text).encode("utf-8"), 9))
    return str(target.relative_to(out))


def warned_lines(
    variant: str, rank: int, device: torch.device, size: wl.PairSize, steps: int
) -> dict[str, int]:
    counts: Counter = Counter()
    done = 0

    def on_step() -> None:
        nonlocal done
        done += 1

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if not WAIT + WARMUP <= done < WAIT + WARMUP + steps:
            return
        frames = [
            f for f in traceback.extract_stack()[:-1] if Path(f.filename).resolve() == WORKLOAD_FILE
        ]
        counts[str(frames[-1].lineno) if frames else "elsewhere"] += 1

    dist.barrier()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            jw.train(variant, rank, device, size, WAIT + WARMUP + steps, on_step)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    _sync(device)
    return dict(counts)


def time_variant(
    variant: str, rank: int, device: torch.device, size: wl.PairSize, warmup: int, steps: int
) -> float:
    marks: list[float] = []
    done = 0

    def on_step() -> None:
        nonlocal done
        done += 1
        if done in (warmup, warmup + steps):
            _sync(device)
            marks.append(time.perf_counter())

    dist.barrier()
    jw.train(variant, rank, device, size, warmup + steps, on_step)
    return (marks[1] - marks[0]) * 1000 / steps


def cores_for(rank: int) -> list[int]:
    """Whole physical cores (a core's hyperthreads together) for each rank, split evenly: a
    rank's threads that spin while it waits must not slow the other's on a sibling thread."""
    allowed = sorted(os.sched_getaffinity(0))
    groups: dict[str, list[int]] = {}
    for cpu in allowed:
        try:
            key = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
            siblings = key.read_text().strip()
        except OSError:
            siblings = str(cpu)
        groups.setdefault(siblings, []).append(cpu)
    ordered = list(groups.values())
    mine = ordered[rank * len(ordered) // WORLD : (rank + 1) * len(ordered) // WORLD]
    return sorted(c for group in mine for c in group) or allowed


def worker(rank: int, settings: dict) -> None:
    out = Path(settings["out"])
    # Each rank on its own half of the cores: two ranks' data pipelines and gloo threads on
    # the same cores made one rank's host 30 % slower than the other's and its steps jitter.
    share = cores_for(rank)
    os.sched_setaffinity(0, share)
    torch.set_num_threads(min(settings["threads"], len(share)))
    device = torch.device(settings["device"])
    if device.type == "cuda":
        torch.cuda.set_device(0)  # both ranks on the one GPU
    dist.init_process_group("gloo", init_method=settings["init"], rank=rank, world_size=WORLD)
    size = jw.SIZES[settings["size"]]
    result: dict = {"rank": rank, "cores": share, "variants": {}}
    try:
        if device.type == "cuda":
            size, result["calibration"] = calibrate(device, size, settings["host_ratio"])
            print(f"rank {rank} calibration:", json.dumps(result["calibration"]), flush=True)
        result["size"] = size.__dict__
        for variant in jw.VARIANTS:
            started = time.perf_counter()
            row = {"trace": profile(variant, rank, device, size, settings["steps"], out)}
            row["profile_s"] = round(time.perf_counter() - started, 2)
            if device.type == "cuda":
                row["warned"] = warned_lines(variant, rank, device, size, settings["steps"])
            row["rounds_ms"] = []
            result["variants"][variant] = row
        for _ in range(settings["rounds"]):
            for variant in jw.VARIANTS:
                result["variants"][variant]["rounds_ms"].append(
                    time_variant(
                        variant,
                        rank,
                        device,
                        size,
                        settings["warmup_steps"],
                        settings["timed_steps"],
                    )
                )
    except Exception as error:  # the other rank's figures and the traces are still written
        result["error"] = f"{type(error).__name__}: {error}"
        traceback.print_exc()
    (out / f"rank{rank}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    dist.destroy_process_group()


def merge(out: Path, settings: dict, size_name: str) -> dict:
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]
    info: dict = {
        "versions": versions(size_name),
        "markers": {str(k): v for k, v in markers(WORKLOAD_FILE).items()},
        "settings": {k: v for k, v in settings.items() if k not in ("out", "init")},
        "late_rank": jw.LATE_RANK,
        "calibration": [r.get("calibration") for r in ranks],
        "size": ranks[0].get("size"),
        "errors": {str(r["rank"]): r["error"] for r in ranks if "error" in r},
        "variants": {},
    }
    for variant in jw.VARIANTS:
        rows = [r["variants"].get(variant, {}) for r in ranks]
        per_rank = [row.get("rounds_ms", []) for row in rows]
        job_rounds = [max(pair) for pair in zip(*per_rank, strict=False)]
        info["variants"][variant] = {
            "run": variant,
            "traces": [row.get("trace") for row in rows],
            "warned": [row.get("warned") for row in rows],
            "rank_rounds_ms": per_rank,
            "rounds_ms": job_rounds,
            "median_ms": statistics.median(job_rounds) if job_rounds else None,
        }
    return info


def cuda_present() -> bool:
    """Whether a CUDA device is there, asked in a child so that this process stays free of
    CUDA."""
    import subprocess

    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe]).returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--size", choices=tuple(jw.SIZES), default=None)
    parser.add_argument("--steps", type=int, default=5, help="profiled (active) steps")
    parser.add_argument("--timed-steps", type=int, default=30)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--host-ratio", type=float, default=1.5)
    parser.add_argument("--threads", type=int, default=4, help="intra-op threads per rank")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not cuda_present():
        print(
            "record_job_pair: no CUDA device; use --device cpu to check the script", file=sys.stderr
        )
        return 2
    size_name = args.size or ("gpu" if args.device == "cuda" else "tiny")
    args.out.mkdir(parents=True, exist_ok=True)
    # A CUDA parent must not fork (its children could not initialise CUDA): spawn there. On
    # the CPU, forked children inherit what the profiler's first start imports.
    start_method = "spawn" if args.device == "cuda" else "fork"
    if start_method == "fork":
        import torch._inductor  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="job-pair-rdzv-") as rendezvous:
        settings = {
            "out": str(args.out.resolve()),
            "init": "file://" + os.path.join(rendezvous, "store"),
            "device": args.device,
            "size": size_name,
            "steps": args.steps,
            "timed_steps": args.timed_steps,
            "warmup_steps": args.warmup_steps,
            "rounds": args.rounds,
            "host_ratio": args.host_ratio,
            "threads": args.threads,
        }
        mp.start_processes(worker, args=(settings,), nprocs=WORLD, start_method=start_method)
    info = merge(args.out, settings, size_name)
    (args.out / RESULT_FILE).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    for name in (WORKLOAD_FILE, Path(wl.__file__)):
        shutil.copy(name, args.out / Path(name).name)
    for variant, row in info["variants"].items():
        print(
            f"{variant}: job step {row['median_ms']} ms (per rank {row['rank_rounds_ms']}); "
            f"warned {row['warned']}",
            flush=True,
        )
    if info["errors"]:
        print("errors:", info["errors"], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
