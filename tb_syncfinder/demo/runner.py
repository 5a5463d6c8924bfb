"""Profile the demo workloads: one run folder per workload variant, as TensorBoard reads them.

Each run is profiled the way the Sync Advisor works best: ``with_stack`` (Python stacks, for
the source line), ``with_modules`` (nn.Module path), ``record_shapes``, ``profile_memory``, a
wait/warmup/active schedule so the first, slow iteration is not measured, and CUDA sync
records (``enable_cuda_sync_events``) when profiling a GPU on a torch build that has them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tb_syncfinder.demo import cnn, seg

RUNS = ("cnn_baseline", "cnn_optimized", "seg_baseline", "seg_optimized")
DEFAULT_STEPS = {"tiny": 2, "small": 5, "large": 5}
WAIT_STEPS = 1
WARMUP_STEPS = 1
# The files tensorboard_trace_handler writes; only these are removed when a run is redone.
_TRACE_FILE = re.compile(r".*\.pt\.trace\.json(\.gz)?$")
DEMO_DIR = Path(__file__).resolve().parent
BUNDLED_TRACES_DIR = DEMO_DIR / "traces"
BUNDLED_PREFIX = "gpu_"
# Frame paths in bundled traces are stored relative to the package ("tb_syncfinder/demo/..."),
# resolved by the demo's source pack wherever the package is installed.
PORTABLE_DEMO_PATH = "tb_syncfinder/demo/"

Workload = Callable[[torch.device, object, int, Callable[[], None]], object]


@dataclass
class DemoRun:
    """One profiled run: where its traces are and how long profiling it took."""

    name: str
    path: str
    device: str
    traces: list[str] = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0


class DemoError(Exception):
    """A demo that cannot run as asked (e.g. ``--device cuda`` without a GPU)."""


def workload(run: str, size: str) -> tuple[Workload, object]:
    """The training function of a demo run and its size settings."""
    module = {"cnn": cnn, "seg": seg}[run.split("_")[0]]
    train = module.train_baseline if run.endswith("_baseline") else module.train_optimized
    return train, module.SIZES[size]


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when a device is present; ``cuda`` without one is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DemoError(
            "--device cuda: no CUDA device is available to this torch "
            f"({torch.__version__}); use --device cpu or auto"
        )
    if name not in ("cuda", "cpu"):
        raise DemoError(f"--device {name}: expected auto, cuda or cpu")
    return torch.device(name)


def _experimental_config(device: torch.device):
    """CUPTI sync records (``cuda_sync`` events) where this torch build supports them."""
    if device.type != "cuda":
        return None
    try:
        return torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    except (AttributeError, TypeError):  # older torch: no such option
        return None


def _clear_run_traces(run_dir: Path) -> None:
    """Remove the traces a previous demo wrote, so a run holds one span, not a history."""
    if run_dir.is_dir():
        for path in run_dir.iterdir():
            if path.is_file() and _TRACE_FILE.match(path.name):
                path.unlink()


def profile_run(
    run: str, logdir: str | Path, device: torch.device, steps: int, size: str
) -> DemoRun:
    """Profile one workload variant into ``logdir/run``; ``steps`` is the active step count."""
    if run not in RUNS:
        raise DemoError(f"unknown demo run {run!r}; expected one of {', '.join(RUNS)}")
    train, workload_size = workload(run, size)
    run_dir = Path(logdir) / run
    run_dir.mkdir(parents=True, exist_ok=True)
    _clear_run_traces(run_dir)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    options = {}
    experimental_config = _experimental_config(device)
    if experimental_config is not None:
        options["experimental_config"] = experimental_config
    started = time.perf_counter()
    with torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(
            wait=WAIT_STEPS, warmup=WARMUP_STEPS, active=steps, repeat=1
        ),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            str(run_dir), worker_name=f"demo_{device.type}", use_gzip=True
        ),
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
        with_modules=True,
        **options,
    ) as profiler:
        train(device, workload_size, WAIT_STEPS + WARMUP_STEPS + steps, profiler.step)
    if device.type == "cuda":
        torch.cuda.synchronize()
    traces = sorted(str(p) for p in run_dir.iterdir() if _TRACE_FILE.match(p.name))
    return DemoRun(
        name=run,
        path=str(run_dir),
        device=device.type,
        traces=traces,
        seconds=time.perf_counter() - started,
        steps=steps,
    )


def run_demo(
    logdir: str | Path,
    device: str = "auto",
    steps: int | None = None,
    size: str = "small",
    runs: tuple[str, ...] = RUNS,
    progress: Callable[[str], None] = print,
) -> list[DemoRun]:
    """Profile every demo run into ``logdir``, printing one progress line per run."""
    if size not in DEFAULT_STEPS:
        raise DemoError(f"--size {size}: expected one of {', '.join(DEFAULT_STEPS)}")
    if steps is None:
        steps = DEFAULT_STEPS[size]
    if steps < 1:
        raise DemoError(f"--steps {steps}: need at least 1 profiled step")
    torch_device = resolve_device(device)
    results = []
    for index, run in enumerate(runs, start=1):
        with QuietProfilerOutput():
            result = profile_run(run, logdir, torch_device, steps, size)
        progress(
            f"[{index}/{len(runs)}] {run:<14} {steps} steps on {torch_device.type} "
            f"in {result.seconds:4.1f} s -> {result.path}"
        )
        results.append(result)
    return results


def bundled_gpu_traces(directory: Path = BUNDLED_TRACES_DIR) -> dict[str, Path]:
    """The real GPU traces shipped with the package (run name -> file), if any."""
    if not directory.is_dir():
        return {}
    found = {}
    for run in RUNS:
        path = directory / f"{run}.pt.trace.json.gz"
        if path.is_file():
            found[run] = path
    return found


def bundled_versions(directory: Path = BUNDLED_TRACES_DIR) -> dict:
    """torch / CUDA / GPU versions recorded beside the bundled traces ({} when absent)."""
    try:
        return json.loads((directory / "versions.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def add_bundled_gpu_runs(logdir: str | Path, directory: Path = BUNDLED_TRACES_DIR) -> list[DemoRun]:
    """Copy the bundled GPU traces into ``logdir`` as ``gpu_<run>`` runs, as they are: their
    frames name the workloads by the portable ``tb_syncfinder/demo/x.py``, which the demo's
    source pack (``demo.sources``) resolves in whichever installation reads them (a copy
    pointing at this installation's path broke once the package was installed elsewhere)."""
    import shutil

    added = []
    worker = bundled_versions(directory).get("worker", "gpu")
    for run, path in bundled_gpu_traces(directory).items():
        run_dir = Path(logdir) / f"{BUNDLED_PREFIX}{run}"
        run_dir.mkdir(parents=True, exist_ok=True)
        _clear_run_traces(run_dir)
        target = run_dir / f"{worker}.pt.trace.json.gz"
        shutil.copyfile(path, target)
        added.append(
            DemoRun(name=run_dir.name, path=str(run_dir), device="cuda", traces=[str(target)])
        )
    return added


# Keep the lines above the ``train(...)`` call in ``profile_run`` (line 125) where they are:
# the bundled GPU traces record that line, as they record lines of cnn.py and seg.py.

# What torch's profiler writes to the process's stderr (file descriptor 2, from C++) around
# each profiled run, whatever the run does: a user sees it between the demo's own lines.
PROFILER_NOISE = re.compile(
    r"^USDT:.*\] profiler_(start|stop)\s*$"
    r"|CPUAllocator\.cpp:\d+\] Memory block of unknown size was allocated before the profiling"
)
# A Python warning torch's profiler gives once per schedule (seen with torch 2.11 on CUDA).
PROFILER_WARNING = r"Warning: Profiler clears events at the end of each cycle"


class QuietProfilerOutput:
    """``with QuietProfilerOutput():`` around profiling captures file descriptor 2 and, on
    leaving, passes on what was written there except the profiler's own start/stop lines and
    allocator notice (``PROFILER_NOISE``), which say nothing about the run; errors and other
    warnings still reach stderr, after the run. Where fd 2 cannot be redirected, nothing is
    captured."""

    def __enter__(self) -> QuietProfilerOutput:
        import os
        import sys
        import tempfile
        import warnings

        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.filterwarnings("ignore", message=PROFILER_WARNING)
        self._saved: int | None = None
        self._capture = tempfile.TemporaryFile()
        try:
            sys.stderr.flush()
            self._saved = os.dup(2)
            os.dup2(self._capture.fileno(), 2)
        except (OSError, ValueError):
            if self._saved is not None:
                os.close(self._saved)
            self._saved = None
        return self

    def __exit__(self, *exc_info: object) -> None:
        import os
        import sys

        try:
            if self._saved is not None:
                try:
                    sys.stderr.flush()
                finally:
                    os.dup2(self._saved, 2)
                    os.close(self._saved)
                self._capture.seek(0)
                text = self._capture.read().decode("utf-8", "replace")
                kept = [
                    line
                    for line in text.splitlines(keepends=True)
                    if not PROFILER_NOISE.search(line)
                ]
                if kept:
                    sys.stderr.write("".join(kept))
                    sys.stderr.flush()
        finally:
            self._capture.close()
            self._warnings.__exit__(*exc_info)


# The size bench/record_gpu_traces.py records the bundled GPU traces at (and
# bench/validate_sync_debug.py validates): GPU-bound on an H100, so that baseline vs optimized
# shows a saving in the step time. The traces bundled now are of this size (see traces/README.md).
GPU_RECORD_SIZE = "large"
