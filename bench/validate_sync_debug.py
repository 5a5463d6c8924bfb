"""Check the engine against PyTorch's own sync detector on the demo workloads (issues 6, 12)
and on one workload per code shape of issue 10.

    python bench/validate_sync_debug.py [--device auto|cuda|cpu] [--size SIZE] [--steps N]
                                        [--only all|demo|shapes] [--out results.md]

``--size`` defaults to the size the bundled GPU traces are recorded at (``GPU_RECORD_SIZE``,
``large``) on a GPU, and to ``small`` on a CPU (``large`` is far too slow there).

For each demo run (``cnn_baseline``, ``cnn_optimized``, ``seg_baseline``, ``seg_optimized``)
and each shape run (``shape_inline_loop``: an inline loop in a main() already running when
profiling started; ``shape_mask_backward``: a boolean mask's backward; ``shape_step_method``:
float()/int()/if/.tolist() in a step method; ``shape_library``: a sync inside a library
installed in a site-packages folder, called from the user's function):

1. warn half (CUDA only): run the workload under ``torch.cuda.set_sync_debug_mode("warn")``,
   catch every warning with its Python stack, and keep the innermost workload line of each;
2. profile half: profile the same steps as ``tb-syncfinder demo`` does and analyse the trace
   with the engine; its sites (real syncs on a GPU, ``latent`` ones on a CPU) give lines;
3. compare the two sets of lines: recall (warned lines the engine found), precision (engine
   lines torch warned about), and each miss or extra with the reason the engine gives for it
   (its kind, operator and API), plus the ``# sync: <what>`` markers written in the workload
   source as a third, hand-written reference.

On a machine without CUDA, step 1 cannot run (the detector is CUDA-only): the script says so,
and compares the engine's latent sites with the source markers instead. Prints a markdown
report; ``--out`` also writes it to a file.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import tempfile
import textwrap
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# Analyse with this checkout's engine, not whichever tb_syncfinder is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from tb_syncfinder.demo.runner import (  # noqa: E402
    DEFAULT_STEPS,
    DEMO_DIR,
    GPU_RECORD_SIZE,
    RUNS,
    WAIT_STEPS,
    WARMUP_STEPS,
    QuietProfilerOutput,
    profile_run,
    resolve_device,
    workload,
)

WORKLOAD_FILES = ("cnn.py", "seg.py")
# Marker words whose line really syncs on the CPU too, as a latent finding: a blocking
# host-to-device copy is a no-op when the "device" is the CPU.
CPU_MARKERS = {
    "item",
    "nonzero",
    "unique",
    "mask",
    "mask_backward",
    "float",
    "int",
    "if",
    "generate",
    "tolist",  # seen as its recorded call (with_stack), not as an operator
}
# Why a site the engine reports can be absent from torch's warnings: the detector only warns
# where PyTorch calls its guarded synchronizing helpers, not on every blocking CUDA call.
EXTRA_REASONS = {
    "allocator_sync": "cudaFree/cudaMalloc from the caching allocator: not covered by "
    "set_sync_debug_mode",
    "blocking_host_to_device": "blocking copy from pageable host memory: the host waits for "
    "the copy, which torch's detector does not always report as a sync",
    "explicit_sync": "explicit synchronize call; check whether torch warned at another line",
}

Line = tuple[str, int]  # (workload file name, line number)


@dataclass
class RunCheck:
    run: str
    device: str
    markers: dict[Line, str] = field(default_factory=dict)
    warned: Counter = field(default_factory=Counter)  # Line -> warnings
    warn_examples: dict[Line, str] = field(default_factory=dict)
    warned_elsewhere: list[str] = field(default_factory=list)  # warnings with no workload frame
    engine: dict[Line, dict] = field(default_factory=dict)  # Line -> site summary
    engine_unplaced: list[str] = field(default_factory=list)  # sites with no workload line
    warn_ran: bool = False
    # Where this run's workload lines are: file names in one folder (the demo's by default).
    files: tuple[str, ...] = WORKLOAD_FILES
    root: Path | None = None
    profiler_overhead: int = 0  # the profiler's own syncs, kept out of the sites


def workload_markers(run: str, on_cpu: bool) -> dict[Line, str]:
    """The ``# sync: <what>`` lines of the functions this run executes."""
    name = f"{run.split('_')[0]}.py"
    wanted_function = "baseline" if run.endswith("_baseline") else "optimized"
    markers = {}
    current_function = ""
    for number, text in enumerate(
        (DEMO_DIR / name).read_text(encoding="utf-8").splitlines(), start=1
    ):
        found = re.match(r"def (\w+)", text)
        if found:
            current_function = found.group(1)
        marker = re.search(r"#\s*sync:\s*(\w+)", text)
        if marker and wanted_function in current_function:
            if not on_cpu or marker.group(1) in CPU_MARKERS:
                markers[(name, number)] = marker.group(1)
    return markers


def workload_line(
    frames: list[traceback.FrameSummary], check: RunCheck | None = None
) -> Line | None:
    """The innermost frame in a workload file of the run (frames outermost first)."""
    files = check.files if check is not None else WORKLOAD_FILES
    root = check.root if check is not None else None
    for frame in reversed(frames):
        path = Path(frame.filename)
        if path.name not in files:
            continue
        if path.parent.name == "demo" if root is None else path.resolve().parent == root.resolve():
            return (path.name, frame.lineno)
    return None


def run_under_sync_debug(check: RunCheck, size: str, steps: int) -> None:
    """Run the workload with torch's detector in warn mode, recording the line of each
    warning raised in the steps the profiler records (not the set-up or warm-up steps)."""
    train, workload_size = workload(check.run, size)
    device = torch.device("cuda")
    first_active = WAIT_STEPS + WARMUP_STEPS
    completed_steps = 0

    def on_step() -> None:
        nonlocal completed_steps
        completed_steps += 1

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if not first_active <= completed_steps < first_active + steps:
            return  # outside the profiled steps: the trace cannot hold it
        frames = traceback.extract_stack()[:-1]
        where = workload_line(frames)
        if where is None:
            check.warned_elsewhere.append(f"{filename}:{lineno}: {str(message)[:120]}")
        else:
            check.warned[where] += 1
            check.warn_examples.setdefault(where, str(message).splitlines()[0][:120])

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            train(device, workload_size, first_active + steps, on_step)
            torch.cuda.synchronize()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    check.warn_ran = True


def engine_sites(check: RunCheck, logdir: str, device: torch.device, size: str, steps: int):
    from tb_syncfinder import analyze

    with QuietProfilerOutput():
        result = profile_run(check.run, logdir, device, steps, size)
    report = analyze(result.path)
    for trace in report.traces:
        if trace.error:
            raise SystemExit(f"{check.run}: cannot analyse {trace.path}: {trace.error}")
    record_sites(check, report, device)


def record_sites(check: RunCheck, report, device: torch.device) -> None:
    """The engine's sites by workload line (a backward pass's at the line that ran it)."""
    check.profiler_overhead = report.profiler_overhead.count
    sites = report.sites if device.type == "cuda" else report.latent_sites
    for site in sites:
        where = site.run_by if site.backward and site.run_by is not None else site
        name = Path(where.file).name if where.file else None
        ops = ", ".join(site.ops)
        if name in check.files and where.line is not None:
            check.engine[(name, where.line)] = {
                "kind": site.kind,
                "ops": ops,
                "count": site.count,
                "apis": ", ".join(site.apis),
                "host_wait_us": site.host_wait_us,
                "line_exact": site.line_exact,
                "note": (f"backward of line {site.line}" if site.backward else "")
                + (f"; library {site.library.file}:{site.library.line}" if site.library else "")
                + ("" if site.line_exact else f"; inexact, candidates {site.candidates}"),
            }
        else:
            check.engine_unplaced.append(f"{site.kind} {ops} at {site.file}:{site.line}")


# --- issue 10's code shapes -------------------------------------------------------------
# Each workload is ``main(device, steps, profiler)``: it runs ``SHAPE_WARMUP + steps``
# iterations inside ``with profiler() as prof:`` and calls ``prof.step()`` once per
# iteration, as a training script does. In the profile half ``profiler`` makes a
# torch.profiler.profile whose schedule records the last ``steps``; in the warn half it
# makes a stand-in that turns on torch's sync detector for the same block and keeps the
# warnings of the same steps. Data is made on the device: no host-to-device copies.
SHAPE_WARMUP = 1
SHAPE_SOURCES: dict[str, str] = {
    "shape_inline_loop": """\
        import torch
        import torch.nn.functional as F


        def main(device, steps, profiler):
            w = torch.randn(8, 4, device=device, requires_grad=True)
            log = []
            with profiler() as prof:
                for _ in range(steps):
                    x = torch.randn(64, 8, device=device)
                    y = torch.randint(0, 4, (64,), device=device)
                    loss = F.cross_entropy(x @ w, y)
                    loss.backward()
                    acc = ((x @ w).argmax(1) == y).float().sum().item()  # sync: item
                    log.append(loss.item())  # sync: item
                    prof.step()
            return log
        """,
    "shape_mask_backward": """\
        import torch
        from torch import nn


        def masked_loss(logits, labels):
            keep = labels != 0
            picked = logits[keep]  # sync: mask
            return picked.log_softmax(1).mean()


        def main(device, steps, profiler):
            model = nn.Linear(8, 5).to(device)
            with profiler() as prof:
                for _ in range(steps):
                    x = torch.randn(64, 8, device=device)
                    labels = torch.randint(0, 3, (64,), device=device)
                    loss = masked_loss(model(x), labels)
                    loss.backward()  # sync: mask_backward
                    prof.step()
        """,
    "shape_step_method": """\
        import torch
        import torch.nn.functional as F
        from torch import nn


        class Trainer:
            def __init__(self, device):
                self.model = nn.Linear(8, 4).to(device)

            def train_step(self, x, y):
                out = self.model(x)
                loss = F.cross_entropy(out, y)
                acc = (out.argmax(1) == y).float().mean()
                with torch.profiler.record_function("metrics"):
                    self.loss = loss.item()  # sync: item
                    self.acc = float(acc)  # sync: float
                    top = out[:4].max(1).values.tolist()  # sync: tolist
                    if acc >= 0:  # sync: if
                        self.hits = int(out.argmax(1).sum())  # sync: int
                return top


        def main(device, steps, profiler):
            trainer = Trainer(device)
            with profiler() as prof:
                for _ in range(steps):
                    x = torch.randn(64, 8, device=device)
                    y = torch.randint(0, 4, (64,), device=device)
                    trainer.train_step(x, y)
                    prof.step()
        """,
    "shape_library": """\
        import torch
        from torch import nn
        from fakegen import generation


        def main(device, steps, profiler):
            model = nn.Linear(8, 8).to(device)
            with profiler() as prof:
                for _ in range(steps):
                    x = torch.randn(4, 8, device=device)
                    out = generation.generate(model, x)  # sync: generate
                    prof.step()
            return out
        """,
}
# A library installed in a site-packages folder: its stopping check reads a flag back per
# generated token, as Hugging Face's generate() does.
LIBRARY_SOURCES = {
    "fakegen/__init__.py": "",
    "fakegen/generation.py": """\
        import torch


        def _should_stop(scores):
            return bool((scores.abs() > 1e9).any())


        @torch.no_grad()
        def generate(model, x, max_new_tokens=4):
            for _ in range(max_new_tokens):
                x = torch.tanh(model(x))
                if _should_stop(x):
                    break
            return x
        """,
}
SHAPE_RUNS = tuple(SHAPE_SOURCES)


class ShapeWorkloads:
    """The shape workloads written into a folder (and the library into a site-packages
    folder on sys.path) while the block runs."""

    def __init__(self, folder: Path) -> None:
        self.root = folder / "shapes"
        self.site_packages = folder / "lib" / "site-packages"

    def __enter__(self) -> ShapeWorkloads:
        self.root.mkdir(parents=True)
        for run, source in SHAPE_SOURCES.items():
            (self.root / f"{run}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        for relative, source in LIBRARY_SOURCES.items():
            path = self.site_packages / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source), encoding="utf-8")
        sys.path.insert(0, str(self.site_packages))
        return self

    def __exit__(self, *exc: object) -> None:
        sys.path.remove(str(self.site_packages))
        for name in [m for m in sys.modules if m.startswith(("fakegen", "bench_shape_"))]:
            del sys.modules[name]

    def main(self, run: str) -> Callable:
        path = self.root / f"{run}.py"
        spec = importlib.util.spec_from_file_location(f"bench_shape_{run}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module.main

    def check(self, run: str, device: str, on_cpu: bool) -> RunCheck:
        check = RunCheck(run, device, files=(f"{run}.py",), root=self.root)
        for number, text in enumerate(
            (self.root / f"{run}.py").read_text(encoding="utf-8").splitlines(), start=1
        ):
            marker = re.search(r"#\s*sync:\s*(\w+)", text)
            if marker and (not on_cpu or marker.group(1) in CPU_MARKERS):
                check.markers[(f"{run}.py", number)] = marker.group(1)
        return check


class _WarnWindow:
    """Stands in for the profiler in the warn half: torch's detector in warn mode inside the
    with block, warnings kept for the steps the profiler would record."""

    def __init__(self, check: RunCheck, steps: int) -> None:
        self.check = check
        self.steps = steps
        self.done = 0
        self._catch = warnings.catch_warnings()

    def __enter__(self) -> _WarnWindow:
        self._catch.__enter__()
        warnings.simplefilter("always")
        warnings.showwarning = self._record
        torch.cuda.set_sync_debug_mode("warn")
        return self

    def step(self) -> None:
        self.done += 1

    def __exit__(self, *exc: object) -> None:
        torch.cuda.set_sync_debug_mode(0)
        self._catch.__exit__(*exc)

    def _record(self, message, category, filename, lineno, file=None, line=None) -> None:
        if not SHAPE_WARMUP <= self.done < SHAPE_WARMUP + self.steps:
            return
        where = workload_line(traceback.extract_stack()[:-1], self.check)
        if where is None:
            self.check.warned_elsewhere.append(f"{filename}:{lineno}: {str(message)[:120]}")
        else:
            self.check.warned[where] += 1
            self.check.warn_examples.setdefault(where, str(message).splitlines()[0][:120])


def run_shape(
    shapes: ShapeWorkloads, check: RunCheck, logdir: str, device: torch.device, steps: int
) -> None:
    """Both halves of one shape run (the warn half only on CUDA)."""
    main = shapes.main(check.run)
    total = SHAPE_WARMUP + steps
    if device.type == "cuda":
        main(device, total, lambda: _WarnWindow(check, steps))
        torch.cuda.synchronize()
        check.warn_ran = True
    run_dir = Path(logdir) / check.run
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)

    def profiler() -> torch.profiler.profile:
        return torch.profiler.profile(
            activities=activities,
            with_stack=True,
            schedule=torch.profiler.schedule(wait=0, warmup=SHAPE_WARMUP, active=steps, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(
                str(run_dir), worker_name=f"shape_{device.type}", use_gzip=True
            ),
        )

    main(device, total, profiler)
    from tb_syncfinder import analyze

    report = analyze(str(run_dir), source_roots=[str(shapes.root)])
    for trace in report.traces:
        if trace.error:
            raise SystemExit(f"{check.run}: cannot analyse {trace.path}: {trace.error}")
    record_sites(check, report, device)


def ratio(part: int, whole: int) -> str:
    return "n/a (empty)" if whole == 0 else f"{part}/{whole} = {part / whole:.0%}"


def render(checks: list[RunCheck], device: str, size: str | None = None) -> str:
    cuda = device == "cuda"
    out = [f"# Sync Advisor vs torch.cuda.set_sync_debug_mode (device: {device})", ""]
    out.append(
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
        + (f"GPU {torch.cuda.get_device_name(0)}" if cuda else "no GPU")
        + (f", demo size {size}" if size else "")
    )
    out.append("")
    if not cuda:
        out += [
            "**The warn-mode half needs CUDA** (`set_sync_debug_mode` only watches CUDA calls):",
            "it did not run here. Below, the engine's *latent* sites on the CPU trace are",
            "compared with the `# sync:` markers written in the workload source.",
            "",
        ]
    reference = "torch warned" if cuda else "source markers"
    out.append(f"| run | {reference} | engine sites | found | recall | precision |")
    out.append("|---|---|---|---|---|---|")
    details = []
    for check in checks:
        truth = set(check.warned) if cuda else set(check.markers)
        found = truth & set(check.engine)
        out.append(
            f"| {check.run} | {len(truth)} | {len(check.engine)} | {len(found)} | "
            f"{ratio(len(found), len(truth))} | {ratio(len(found), len(check.engine))} |"
        )
        for line in sorted(truth | set(check.engine) | set(check.markers)):
            site = check.engine.get(line)
            status = (
                "found"
                if line in truth and site
                else "MISSED"
                if line in truth
                else "extra"
                if site
                else "marker only"
            )
            reason = ""
            if status == "extra":
                reason = EXTRA_REASONS.get(site["kind"], "not warned about: investigate")
                if not cuda:
                    reason = "engine site without a marker: investigate"
            elif status == "MISSED":
                reason = check.warn_examples.get(line, "no engine site on this line")
            elif status == "marker only":
                reason = "marked in the source, neither warned nor found"
            engine_text = (
                f"{site['kind']} ({site['ops']}; {site['apis'] or '-'}) x{site['count']}"
                + (f" [{site['note'].lstrip('; ')}]" if site.get("note") else "")
                if site
                else "-"
            )
            details.append(
                f"| {check.run} | {line[0]}:{line[1]} | {check.markers.get(line, '-')} | "
                f"{check.warned.get(line, 0) if check.warn_ran else 'n/a'} | {engine_text} | "
                f"{status} | {reason} |"
            )
        for text in check.engine_unplaced:
            details.append(
                f"| {check.run} | - | - | - | {text} | extra (no workload line) | "
                "outside the workload files |"
            )
        for text in check.warned_elsewhere:
            details.append(f"| {check.run} | - | - | {text} | - | warned outside the workload | |")
        if check.profiler_overhead:
            details.append(
                f"| {check.run} | - | - | - | {check.profiler_overhead} profiler "
                "sync(s) | profiler overhead | kept out of the sites |"
            )
    out += [
        "",
        "| run | line | marker | torch warnings | engine site | status | why |",
        "|---|---|---|---|---|---|---|",
        *details,
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--size", choices=tuple(DEFAULT_STEPS), default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument(
        "--only",
        choices=("all", "demo", "shapes"),
        default="all",
        help="the demo runs, issue 10's shape workloads, or both",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    if args.size is None:
        args.size = GPU_RECORD_SIZE if device.type == "cuda" else "small"
    steps = args.steps or DEFAULT_STEPS[args.size]
    on_cpu = device.type != "cuda"
    if on_cpu:
        print(
            "note: no CUDA device: the set_sync_debug_mode (warn) half needs CUDA and is "
            "skipped; comparing the engine's latent sites with the source markers.",
            file=sys.stderr,
        )
    checks = []
    with tempfile.TemporaryDirectory(prefix="tb-syncfinder-validate-") as logdir:
        if args.only in ("all", "demo"):
            for run in RUNS:
                check = RunCheck(run, device.type, markers=workload_markers(run, on_cpu))
                if device.type == "cuda":
                    run_under_sync_debug(check, args.size, steps)
                engine_sites(check, logdir, device, args.size, steps)
                checks.append(check)
        if args.only in ("all", "shapes"):
            with ShapeWorkloads(Path(logdir)) as shapes:
                for run in SHAPE_RUNS:
                    check = shapes.check(run, device.type, on_cpu)
                    run_shape(shapes, check, str(Path(logdir) / "traces"), device, steps)
                    checks.append(check)
    text = render(checks, device.type, args.size)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
