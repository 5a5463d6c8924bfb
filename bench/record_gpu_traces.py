"""Record the demo workloads on a CUDA GPU and bundle the traces with the package (issue 12).

    python bench/record_gpu_traces.py [--size large] [--steps 5] [--out tb_syncfinder/demo/traces]
                                      [--timed-steps 50] [--warmup-steps 10] [--rounds 5]

Profiles ``cnn_baseline``, ``cnn_optimized``, ``seg_baseline`` and ``seg_optimized`` exactly as
``tb-syncfinder demo`` does (``with_stack``, ``with_modules``, CUDA sync records), writes each
as ``<run>.pt.trace.json.gz`` plus ``versions.json`` (torch, CUDA, cuDNN, GPU, driver, size,
commit) into ``--out``. Frame paths of the demo workloads are stored relative to the package
(``tb_syncfinder/demo/seg.py``); ``tb-syncfinder demo`` points them at the user's installation
when it copies the traces into a logdir, so the source lines resolve on every machine.
Then it analyses each trace with the engine and prints what it found, as a sanity check.

The default size is ``large`` (``GPU_RECORD_SIZE``): GPU-bound on an H100, so removing the
syncs shows in the step time. At ``small`` the runs are CPU-bound there (baseline and
optimized take about the same time). The profiled ``ProfilerStep`` spans measure the host,
not the GPU, so the runs are also timed without the profiler: ``--warmup-steps`` then
``--timed-steps`` steps per run, between two ``torch.cuda.synchronize()``, the four runs
interleaved in each of ``--rounds`` rounds (so a slow spell of the machine hits them all),
median per run. Written to ``unprofiled_step_times.json`` beside the traces.

The traces name lines of ``tb_syncfinder/demo/*.py``: after recording, update
``tb_syncfinder/demo/traces/README.md`` (provenance, SHA-256) and check
``tests/test_bundled_gpu_traces.py``.

Exits with status 2 and a clear message when no CUDA device is available.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from tb_syncfinder.demo.runner import (
    BUNDLED_TRACES_DIR,
    DEFAULT_STEPS,
    DEMO_DIR,
    GPU_RECORD_SIZE,
    RUNS,
    QuietProfilerOutput,
    profile_run,
    workload,
)

REPO = Path(__file__).resolve().parents[1]
UNPROFILED_FILE = "unprofiled_step_times.json"

PORTABLE_PREFIX = "tb_syncfinder/demo/"


def portable_paths(text: str) -> str:
    """Replace this machine's absolute demo directory by the package-relative prefix."""
    local = json.dumps(str(DEMO_DIR) + "/")[1:-1]
    return text.replace(local, PORTABLE_PREFIX)


def driver_version() -> str | None:
    try:
        output = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return output.strip().splitlines()[0] if output.strip() else None


def git_commit() -> str | None:
    """This checkout's commit, with ``+dirty`` when the demo files differ from it."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "tb_syncfinder/demo"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    # Only the workload sources matter: the traces being written are not "dirty" code.
    changed = [line for line in dirty.splitlines() if "/traces/" not in line]
    return commit + ("+dirty" if changed else "") if commit else None


def versions(size: str, steps: int) -> dict:
    gpu = torch.cuda.get_device_name(0)
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": gpu,
        "driver": driver_version(),
        "python": platform.python_version(),
        "worker": re.sub(r"[^A-Za-z0-9_]+", "_", gpu).strip("_").lower() or "gpu",
        "size": size,
        "steps": steps,
        "commit": git_commit(),
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_run(run: str, size: str, device: torch.device, warmup: int, steps: int) -> float:
    """Milliseconds per step of one run without the profiler: the wall time of ``steps``
    steps after ``warmup`` steps, between two device synchronizations (the GPU's queue is
    empty at both ends, so the time covers the GPU's work, not only the host's)."""
    if warmup < 1 or steps < 1:
        raise ValueError("need at least one warm-up step and one timed step")
    train, workload_size = workload(run, size)
    marks: list[float] = []
    done = 0

    def on_step() -> None:
        nonlocal done
        done += 1
        if done in (warmup, warmup + steps):
            synchronize(device)
            marks.append(time.perf_counter())

    train(device, workload_size, warmup + steps, on_step)
    if len(marks) != 2:
        raise RuntimeError(f"{run}: {done} steps ran, expected {warmup + steps}")
    return (marks[1] - marks[0]) * 1000 / steps


def time_unprofiled(
    runs: tuple[str, ...],
    size: str,
    device: torch.device,
    warmup: int = 10,
    steps: int = 50,
    rounds: int = 5,
    timer: Callable[[str, str, torch.device, int, int], float] = time_run,
) -> dict:
    """Each run's step time with no profiler: in every round the runs one after the other
    (interleaved, so drift of the machine hits them all alike), the median over rounds."""
    per_run: dict[str, list[float]] = {run: [] for run in runs}
    for _ in range(rounds):
        for run in runs:
            per_run[run].append(timer(run, size, device, warmup, steps))
    return {
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "device": device.type,
        "torch": torch.__version__,
        "size": size,
        "warmup_steps": warmup,
        "steps_timed": steps,
        "rounds": rounds,
        "runs": {
            run: {"median_ms": statistics.median(times), "rounds_ms": times}
            for run, times in per_run.items()
        },
    }


def saving_lines(times: dict) -> list[str]:
    """``cnn: baseline 4.30 ms, optimized 4.43 ms per step (saving -3.0%)`` per workload."""
    lines = []
    runs = times["runs"]
    for workload_name in ("cnn", "seg"):
        base = runs.get(f"{workload_name}_baseline")
        new = runs.get(f"{workload_name}_optimized")
        if base and new:
            before, after = base["median_ms"], new["median_ms"]
            saving = (before - after) / before if before else 0.0
            lines.append(
                f"{workload_name}: baseline {before:.2f} ms, optimized {after:.2f} ms per step "
                f"unprofiled (saving {saving:+.1%})"
            )
    return lines


def summarize(path: Path) -> str:
    from tb_syncfinder import analyze

    report = analyze(str(path))
    summary = report.summary
    sites = ", ".join(
        f"{s.kind}@{Path(s.file).name if s.file else '?'}:{s.line} x{s.count}" for s in report.sites
    )
    return (
        f"{summary.sync_count} syncs, host wait {summary.host_wait_us / 1000:.2f} ms, "
        f"GPU idle after {summary.gpu_idle_us / 1000:.2f} ms; sites: {sites or 'none'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=tuple(DEFAULT_STEPS), default=GPU_RECORD_SIZE)
    parser.add_argument("--steps", type=int, default=None, help="profiled (active) steps")
    parser.add_argument("--out", type=Path, default=BUNDLED_TRACES_DIR)
    parser.add_argument("--timed-steps", type=int, default=50, help="unprofiled, per round")
    parser.add_argument("--warmup-steps", type=int, default=10, help="before the timed steps")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    args = parser.parse_args(argv)
    if min(args.timed_steps, args.warmup_steps, args.rounds) < 1:
        parser.error("--timed-steps, --warmup-steps and --rounds must be at least 1")
    if not torch.cuda.is_available():
        print(
            f"record_gpu_traces: no CUDA device is available to torch {torch.__version__}; "
            "the bundled GPU traces can only be recorded on a machine with an NVIDIA GPU "
            "and a CUDA build of torch.",
            file=sys.stderr,
        )
        return 2
    steps = args.steps or DEFAULT_STEPS[args.size]
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    with tempfile.TemporaryDirectory(prefix="tb-syncfinder-record-") as logdir:
        for run in RUNS:
            with QuietProfilerOutput():
                result = profile_run(run, logdir, device, steps, args.size)
            if len(result.traces) != 1:
                print(f"{run}: expected one trace, got {result.traces}", file=sys.stderr)
                return 1
            text = gzip.decompress(Path(result.traces[0]).read_bytes()).decode("utf-8")
            target = args.out / f"{run}.pt.trace.json.gz"
            target.write_bytes(gzip.compress(portable_paths(text).encode("utf-8"), 9))
            print(
                f"{run}: {target} ({target.stat().st_size / 1e6:.2f} MB) "
                f"in {result.seconds:.1f} s; {summarize(Path(result.path))}"
            )
    info = versions(args.size, steps)
    (args.out / "versions.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    print(f"versions: {json.dumps(info)}")
    times = time_unprofiled(
        RUNS, args.size, device, args.warmup_steps, args.timed_steps, args.rounds
    )
    (args.out / UNPROFILED_FILE).write_text(json.dumps(times, indent=1) + "\n", encoding="utf-8")
    for line in saving_lines(times):
        print(line)
    print(
        f"Now update {args.out / 'README.md'} (provenance, SHA-256) and run "
        "tests/test_bundled_gpu_traces.py."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
