"""``tb-syncfinder demo``: profile the demo workloads, summarise them, open TensorBoard.

The CLI module (``tb_syncfinder/cli.py``) wires the ``demo`` subcommand to
``add_arguments`` and ``run``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from tb_syncfinder.demo.runner import (
    BUNDLED_PREFIX,
    BUNDLED_TRACES_DIR,
    DEFAULT_STEPS,
    DemoError,
    DemoRun,
    add_bundled_gpu_runs,
    bundled_versions,
    run_demo,
)

DEFAULT_LOGDIR = "syncfinder-demo-logs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``demo`` subcommand's options."""
    parser.add_argument(
        "--logdir",
        default=DEFAULT_LOGDIR,
        help=f"where the runs are written (default: ./{DEFAULT_LOGDIR})",
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cuda", "cpu"),
        default="auto",
        help="device to train on; auto = CUDA when available (default: auto)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="TensorBoard port (default: 6006, or the next free one)",
    )
    parser.add_argument(
        "--bind-all",
        action="store_true",
        help="serve TensorBoard on all network interfaces, not only localhost",
    )
    parser.add_argument(
        "--no-tensorboard",
        action="store_true",
        help="write the runs and print the report summary, without starting TensorBoard",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="profiled (active) steps per run (default: "
        + ", ".join(f"{size} {steps}" for size, steps in DEFAULT_STEPS.items())
        + ")",
    )
    parser.add_argument(
        "--size",
        choices=tuple(DEFAULT_STEPS),
        default="small",
        help="workload size (default: small); large keeps a data-centre GPU busy, so the "
        "syncs' cost shows in the step time, and is far too slow for a CPU",
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _site_label(site) -> str:
    where = f"at {os.path.basename(site.file)}:{site.line}" if site.file else "(no Python stack)"
    # An explicit synchronize has no operator: name the API the host waited in.
    what = site.ops[0] if site.ops else (site.apis[0] if site.apis else "?")
    what = what.replace("autograd::engine::evaluate_function: ", "")  # a backward op
    label = f"{site.kind} {what} {where} x{site.count}"
    if not site.latent:
        from tb_syncfinder.outputs.text import format_us  # as the report writes it

        # In all, as the count beside it: the saving after it is per step, and says so.
        label += f", host wait {format_us(site.host_wait_us)} in all"
        # What the sites are listed by (a 0.07 ms wait above a 0.25 ms one read as
        # unsorted): what fixing each saves per step, as the report ranks them.
        if site.gpu_idle_measured and site.predicted_saving_per_step_us is not None:
            how = "~" if site.saving_method == "replay" else "≤"
            label += f", saves {how}{format_us(site.predicted_saving_per_step_us)} a step"
    return label


def _summarize_run(run: DemoRun) -> list[str]:
    """One line per run with what the engine found, then one line per site."""
    from tb_syncfinder import analyze
    from tb_syncfinder.outputs.text import format_us

    report = analyze(run.path)
    errors = [trace for trace in report.traces if trace.error]
    lines = []
    if errors:
        lines += [f"  {run.name}: cannot analyse {t.path}: {t.error}" for t in errors]
    summary = report.summary
    if summary.sync_count:
        lines.append(
            f"  {run.name:<20} {_count(summary.sync_count, 'sync')} in "
            f"{_count(len(report.sites), 'site')}, "
            f"host wait {format_us(summary.host_wait_us)}, "
            f"GPU idle after them {format_us(summary.gpu_idle_us)}, "
            f"over {_count(summary.step_count, 'step')}"
        )
        lines += [f"      {_site_label(site)}" for site in report.sites]
    elif report.latent:
        lines.append(
            f"  {run.name:<20} no real syncs (CPU trace); {len(report.latent)} latent: "
            f"would sync on a GPU, at {_count(len(report.latent_sites), 'site')}"
        )
        lines += [f"      {_site_label(site)}" for site in report.latent_sites]
    elif not errors:
        lines.append(f"  {run.name:<20} no syncs, latent or real")
    return lines


def print_summary(runs: list[DemoRun], out: Callable[[str], None] = print) -> None:
    out("What the Sync Advisor finds:")
    for run in runs:
        try:
            lines = _summarize_run(run)
        except Exception as error:  # one broken run must not hide the others
            lines = [f"  {run.name}: analysis failed: {type(error).__name__}: {error}"]
        for line in lines:
            out(line)


def _trains_on_cpu(device: str) -> bool:
    import torch

    return device == "cpu" or (device == "auto" and not torch.cuda.is_available())


def run(args: argparse.Namespace) -> int:
    """Run the demo; 0 on success, 2 when it cannot run as asked."""
    logdir = Path(args.logdir).resolve()
    if not args.no_tensorboard and args.port is not None and _port_taken(args.port, args.bind_all):
        # Said before a minute of profiling, not after it (TensorBoard would fail to bind).
        print(
            f"tb-syncfinder demo: port {args.port} is taken: give another with --port, or "
            "leave --port out for the first free port from 6006",
            file=sys.stderr,
        )
        return 2
    print(f"Profiling the Sync Advisor demo into {logdir} ...")
    if args.size == "large" and _trains_on_cpu(args.device):
        print(
            "Note: --size large is sized for a data-centre GPU; on a CPU each step takes "
            "tens of seconds (--size small: well under a second)."
        )
    try:
        runs = run_demo(logdir, device=args.device, steps=args.steps, size=args.size)
    except DemoError as error:
        print(f"tb-syncfinder demo: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # e.g. a logdir that cannot be written
        print(f"tb-syncfinder demo: cannot write the runs into {logdir}: {error}", file=sys.stderr)
        return 2
    if runs and runs[0].device == "cpu":
        print(
            "Trained on the CPU: nothing really syncs, so the findings are latent: the "
            "operators that would make the host wait on a GPU, at the same source lines."
        )
        try:
            bundled = add_bundled_gpu_runs(logdir)
        except (OSError, EOFError, UnicodeDecodeError) as error:
            print(
                f"The bundled GPU traces in {BUNDLED_TRACES_DIR} cannot be read ({error}); "
                "showing the CPU runs only."
            )
            bundled = None
        if bundled:
            versions = bundled_versions()
            gpu = versions.get("gpu", "a GPU")
            print(
                f"Added {len(bundled)} real GPU runs recorded on {gpu} "
                f"(torch {versions.get('torch', '?')}): " + ", ".join(run.name for run in bundled)
            )
            runs += bundled
        elif bundled is not None:
            print(
                f"No bundled GPU traces in {BUNDLED_TRACES_DIR} (this installation ships "
                "none); showing the CPU runs only."
            )
    print_summary(runs)
    print("Reports on the command line:")
    for demo_run in runs:
        print(f"  tb-syncfinder report {demo_run.path}")
    names = {demo_run.name: demo_run.path for demo_run in runs}
    print("Baseline vs optimized (the syncs gone):")
    for workload in ("cnn", "seg"):
        for prefix in ("", BUNDLED_PREFIX):
            base, new = (
                names.get(f"{prefix}{workload}_baseline"),
                names.get(f"{prefix}{workload}_optimized"),
            )
            if base and new:
                print(f"  tb-syncfinder compare {base} {new}")
    if args.no_tensorboard:
        return 0
    return _serve(logdir, args.port, args.bind_all)


def _port_taken(port: int, bind_all: bool) -> bool:
    """Whether TensorBoard could not bind ``port`` now (on every address with --bind-all)."""
    from tb_syncfinder.demo.serve import port_is_free

    return not port_is_free(port, "0.0.0.0" if bind_all else "localhost")


def _serve(logdir: Path, port: int | None, bind_all: bool) -> int:
    from tb_syncfinder.demo.serve import (
        PLUGIN_NAME,
        PORT_TAKEN,
        TensorBoardError,
        exit_reason,
        start_tensorboard,
    )

    print(
        f"Starting TensorBoard on port {port} ..."
        if port is not None
        else "Starting TensorBoard ..."
    )
    try:
        # No --sync_advisor_* flags: the plugin finds the demo sources by itself, exactly as
        # when the user later runs plain `tensorboard --logdir` on these runs. Without
        # --port, a free port from 6006 up (tried again should it be taken meanwhile).
        board = start_tensorboard(logdir, port, bind_all=bind_all)
    except TensorBoardError as error:
        print(f"tb-syncfinder demo: {error}", file=sys.stderr)
        if port is not None and any(words in str(error) for words in PORT_TAKEN):
            print(
                f"tb-syncfinder demo: port {port} is taken: give another with --port, or "
                "leave --port out for the first free port from 6006",
                file=sys.stderr,
            )
        return 2
    # A ``kill`` (SIGTERM) stops TensorBoard as Ctrl-C does, instead of orphaning it.
    previous_handler = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        if PLUGIN_NAME not in board.plugins():
            print(
                f"warning: TensorBoard does not list the {PLUGIN_NAME} plugin; is "
                "tb-syncfinder installed in this Python environment?",
                file=sys.stderr,
            )
        print(f"Sync Advisor: {board.sync_advisor_url}")
        print("Press Ctrl-C to stop TensorBoard.")
        status = board.process.wait()
        print(
            f"TensorBoard exited with status {status}:\n{exit_reason(board.output())}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("\nStopping TensorBoard.")
        return 0
    finally:
        board.stop()
        signal.signal(signal.SIGTERM, previous_handler)


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
