"""Check the engine against PyTorch's own sync detector on the demo workloads (issues 6, 12).

    python bench/validate_sync_debug.py [--device auto|cuda|cpu] [--size SIZE] [--steps N]
                                        [--out results.md]

``--size`` defaults to the size the bundled GPU traces are recorded at (``GPU_RECORD_SIZE``,
``large``) on a GPU, and to ``small`` on a CPU (``large`` is far too slow there).

For each demo run (``cnn_baseline``, ``cnn_optimized``, ``seg_baseline``, ``seg_optimized``):

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
import re
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tb_syncfinder.demo.runner import (
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
CPU_MARKERS = {"item", "nonzero", "unique", "mask", "mask_backward"}
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


def workload_line(frames: list[traceback.FrameSummary]) -> Line | None:
    """The innermost frame in a demo workload file (frames outermost first)."""
    for frame in reversed(frames):
        path = Path(frame.filename)
        if path.name in WORKLOAD_FILES and path.parent.name == "demo":
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
    sites = report.sites if device.type == "cuda" else report.latent_sites
    for site in sites:
        name = Path(site.file).name if site.file else None
        ops = ", ".join(site.ops)
        if name in WORKLOAD_FILES and site.line is not None:
            check.engine[(name, site.line)] = {
                "kind": site.kind,
                "ops": ops,
                "count": site.count,
                "apis": ", ".join(site.apis),
                "host_wait_us": site.host_wait_us,
                "line_exact": site.line_exact,
            }
        else:
            check.engine_unplaced.append(f"{site.kind} {ops} at {site.file}:{site.line}")


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
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    if args.size is None:
        args.size = GPU_RECORD_SIZE if device.type == "cuda" else "small"
    steps = args.steps or DEFAULT_STEPS[args.size]
    if device.type != "cuda":
        print(
            "note: no CUDA device: the set_sync_debug_mode (warn) half needs CUDA and is "
            "skipped; comparing the engine's latent sites with the source markers.",
            file=sys.stderr,
        )
    checks = []
    with tempfile.TemporaryDirectory(prefix="tb-syncfinder-validate-") as logdir:
        for run in RUNS:
            check = RunCheck(run, device.type, markers=workload_markers(run, device.type != "cuda"))
            if device.type == "cuda":
                run_under_sync_debug(check, args.size, steps)
            engine_sites(check, logdir, device, args.size, steps)
            checks.append(check)
    text = render(checks, device.type, args.size)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
