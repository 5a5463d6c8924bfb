"""``tb-syncfinder``: report, compare and demo on the command line.

Exit status: 0 fine; 1 a ``--max-syncs-per-step`` gate (or ``compare --fail-on-regression``)
failed; 2 unusable input (missing path, no traces, every trace unreadable, bad option, or a
gate given with a trace it could not read), with the reason on stderr. On CPU-only traces
the gates count latent syncs (operators that would synchronize on a GPU).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, NoReturn

from tb_syncfinder import __version__

PROG = "tb-syncfinder"
# The registry's formats a report prints in (the annotated trace has its own --annotate).
FORMATS = ("table", "json", "csv", "sarif")
DEFAULT_TOP = 20


class UsageError(Exception):
    """Unusable input: the message is printed on stderr and the exit status is 2."""


class NothingReadable(UsageError):
    """No trace of the input could be read; ``report_set`` holds each one's error (written
    to ``-o`` all the same: a CI step that uploads or parses it then finds why)."""

    def __init__(self, message: str, report_set: Any) -> None:
        super().__init__(message)
        self.report_set = report_set


# --- argument parsing ----------------------------------------------------------------


def _path_map_item(text: str) -> tuple[str, str]:
    from tb_syncfinder.source import parse_path_map

    try:
        (pair,) = parse_path_map([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return pair


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a time above 0, got {text}")
    return value


def _step_ms(text: str) -> float:
    """A step time in ms within what the plugin's field also takes (each echoed as given)."""
    from tb_syncfinder.models import UNPROFILED_STEP_MAX_MS, UNPROFILED_STEP_MIN_MS

    value = _positive_float(text)
    if not UNPROFILED_STEP_MIN_MS <= value <= UNPROFILED_STEP_MAX_MS:
        raise argparse.ArgumentTypeError(
            f"expected a step time from {UNPROFILED_STEP_MIN_MS:g} to "
            f"{UNPROFILED_STEP_MAX_MS:.0f} ms, got {text}"
        )
    return value


def _window_mb(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of megabytes, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"expected 0 (never split) or a positive number of megabytes, got {text}"
        )
    return value


def _add_jobs_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "-j",
        "--jobs",
        type=_non_negative,
        default=0,
        metavar="N",
        help="analysis processes on this machine (default 0: one per core, up to 8, where "
        "several traces hold more than 64 MB of JSON between them; 1: none, in this process)",
    )


def _add_step_annotation_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--step-annotation",
        default=None,
        metavar="NAME",
        help="in traces without ProfilerStep markers (no prof.step()), count the spans of "
        "this record_function name as the steps (a shell pattern such as 'step_*' for "
        "names with a number); without it such a trace is one step",
    )


def _add_source_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source-root",
        action="append",
        default=[],
        metavar="DIR",
        help="directory to look for the profiled source files in, to find exact call lines "
        "(repeatable; the current directory is always searched)",
    )
    parser.add_argument(
        "--path-map",
        action="append",
        default=[],
        type=_path_map_item,
        metavar="FROM=TO",
        help="rewrite a path prefix recorded in the trace (e.g. /workspace=/home/me/proj), "
        "for traces recorded on another machine (repeatable)",
    )
    parser.add_argument(
        "--window-mb",
        type=_window_mb,
        default=None,
        metavar="MB",
        help="analyse a trace of more than MB megabytes of JSON in windows of whole steps, "
        "one at a time, in bounded memory (default: sized from the memory available; "
        "0: always read whole)",
    )


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the table: auto = on a terminal unless NO_COLOR is set (default)",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the output to FILE instead of standard output ('-': standard output); "
        "unless a format is given, FILE's extension picks it (.json, .csv, .sarif, .txt; "
        "compare writes .json or text)",
    )


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's, breaking lines at spaces only: ``pip install 'tb-syncfinder[ray]'``
    came out as ``'tb-`` / ``syncfinder[ray]'``, which does not paste back (the same for
    any hyphenated command)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        lines = textwrap.wrap(
            _whole_commands(text), width, break_on_hyphens=False, break_long_words=False
        )
        return [line.replace(_GLUE, " ") for line in lines]

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return textwrap.fill(
            _whole_commands(text),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        ).replace(_GLUE, " ")


# Joins the words of a command in help text while it is wrapped (no line break inside
# ``pip install 'ray>=2.10'``, which is pasted whole); a space again once wrapped.
_GLUE = "\0"


def _whole_commands(text: str) -> str:
    import re

    text = " ".join(text.split())
    return re.sub(r"pip install '[^']*'", lambda m: m.group(0).replace(" ", _GLUE), text)


_REPORT_EXIT = (
    "exit status: 0 fine; 1 when --max-syncs-per-step is exceeded; 2 for unusable input "
    "(the reason is printed), and when a gate was asked for and a trace could not be read. "
    "A Ray cluster that goes away during a --ray run ends the process with Ray's status 1 "
    "and its own message, nothing written"
)
_COMPARE_EXIT = (
    "exit status: 0 fine; 1 with --fail-on-regression when a site is new or worse; 2 for "
    "unusable input, and with --fail-on-regression when a trace could not be read or the "
    "two reports name sites in two key formats"
)


class _CommandParser(argparse.ArgumentParser):
    """A command's parser that takes its paths before, between and after options
    (``report a.gz --json b.gz``), as most tools do: a CI step that appends a flag after a
    glob was refused with "unrecognized arguments"."""

    _intermixing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # argparse's intermixed parse calls this in its turn; and it drops what follows
        # "--" (``report -- -x.json``), which the plain parse keeps as paths.
        if self._intermixing or (args is not None and "--" in args):
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        formatter_class=_HelpFormatter,
        description="Find host-device synchronizations in PyTorch profiler (Kineto) traces: "
        "their cost, source line and fix.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)

    report = commands.add_parser(
        "report",
        formatter_class=_HelpFormatter,
        epilog=_REPORT_EXIT,
        help="analyse a trace file, run folder or logdir and print the syncs",
        description="Analyse a trace file (.json / .json.gz), a run folder or a logdir of runs "
        "and list the synchronization sites by cost. A logdir with several runs "
        "(folders of traces, as the PyTorch Profiler tab lists them) is reported "
        "run by run: the table has a section per run and an overview line per "
        "run; the JSON report merges the runs' sites (use --run to pick one) and "
        "lists each run's own summary in its 'runs' field; CSV rows carry a 'run' "
        "column and are per run; SARIF results name their run when there are "
        "several.",
    )
    report.add_argument(
        "path",
        metavar="PATH",
        nargs="+",
        help="trace file, run folder or logdir; several (a shell glob of trace files) are "
        "reported together, the traces of one folder as one run",
    )
    report.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="NAME",
        dest="runs",
        help="only this run of the logdir (its name as the PyTorch Profiler tab shows it; "
        "repeatable); an unknown name exits 2 listing the runs found",
    )
    report.add_argument(
        "--worker",
        action="append",
        default=[],
        metavar="NAME",
        dest="workers",
        help="only the trace files of this worker (as the tabs name it; a shell pattern: "
        "'*training_step*' for the training traces Lightning's profiler writes beside its "
        "validation ones, whose steps the figures per step would mix in); repeatable",
    )
    report.add_argument(
        "--format", choices=FORMATS, default=None, help="output format (default: table)"
    )
    report.add_argument(
        "--json", action="store_true", help="print the JSON report (same as --format json)"
    )
    _add_source_options(report)
    _add_step_annotation_option(report)
    report.add_argument(
        "--max-syncs-per-step",
        type=_non_negative,
        default=None,
        metavar="N",
        help="exit with status 1 when any step has more than N syncs (a CI gate); each "
        "step is counted within its own trace and run",
    )
    report.add_argument(
        "--latent",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="list operators that would synchronize on a GPU, for CPU-only traces (default: on)",
    )
    report.add_argument(
        "--unprofiled-step-ms",
        type=_step_ms,
        default=None,
        metavar="MS",
        help="your program's mean step time without the profiler (from its own logs): the "
        "report then also predicts what fixing the syncs saves without the profiler (the "
        "trace replayed with the profiler's estimated host overhead taken out, scaled so "
        "that its steps take this time), and the most that fixing every sync can save per "
        "step, that time minus the GPU's busy time per step",
    )
    report.add_argument(
        "--top",
        type=_non_negative,
        default=DEFAULT_TOP,
        metavar="N",
        help=f"sites shown in the table (default {DEFAULT_TOP}; 0 = all)",
    )
    scale = report.add_argument_group(
        "many traces",
        "per-trace summaries are read back instead of parsing a trace again; "
        "Ray spreads the parsing over a cluster (docs/scale.md)",
    )
    _add_jobs_option(scale)
    scale.add_argument(
        "--ray",
        action="store_true",
        help="analyse the traces as Ray tasks, on a local cluster unless --ray-address (or "
        "RAY_ADDRESS) is given, and write their summaries (needs Ray: pip install 'ray>=2.10')",
    )
    scale.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="join this running Ray cluster (implies --ray), e.g. auto or ray://head:10001",
    )
    scale.add_argument(
        "--ray-workers",
        type=_non_negative,
        default=0,
        metavar="N",
        help="CPUs of the local Ray cluster, at most this machine's (default 0: all of "
        "them; a joined cluster has its own)",
    )
    scale.add_argument(
        "--summaries-dir",
        metavar="DIR",
        help="read and write the per-trace summaries in DIR (default: beside each trace, in "
        "its folder's .sync_advisor/)",
    )
    scale.add_argument(
        "--write-summaries",
        action="store_true",
        help="write a summary of each trace analysed, which the next report and the "
        "TensorBoard plugin read instead of the trace (on by default with --ray)",
    )
    scale.add_argument(
        "--no-summaries", action="store_true", help="ignore existing summaries: analyse every trace"
    )
    report.add_argument(
        "--annotate",
        metavar="OUT.json",
        help="also write the trace with an added 'Sync Advisor' track (one trace only), "
        "to open in Perfetto or chrome://tracing",
    )
    _add_output_options(report)
    report.set_defaults(handler=_cmd_report)

    compare = commands.add_parser(
        "compare",
        formatter_class=_HelpFormatter,
        epilog=_COMPARE_EXIT,
        help="compare a baseline run with a new one, site by site",
        description="Compare two runs: each is a report saved with --json, or a trace file, "
        "run folder (or a logdir of one run) to analyse. Sites match by file name, "
        "function, operator and kind, so edits that move lines do not break the match.",
    )
    compare.add_argument("base", metavar="BASE", help="baseline: report JSON or traces")
    compare.add_argument("new", metavar="NEW", help="new run: report JSON or traces")
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.add_argument(
        "--fail-on-regression",
        action="store_true",
        help=(
            "exit with status 1 when a site is new or worse (a CI gate): worse is more syncs "
            "per step, or host wait + GPU idle per step up by more than 10%% (on CPU-only "
            "runs, latent syncs per step)"
        ),
    )
    _add_jobs_option(compare)
    _add_source_options(compare)
    _add_step_annotation_option(compare)
    _add_output_options(compare)
    compare.set_defaults(handler=_cmd_compare)

    demo = commands.add_parser(
        "demo",
        formatter_class=_HelpFormatter,
        help="profile the demo workloads and open them in TensorBoard",
        description="Profile the bundled demo workloads (with syncs, and optimized), print "
        "their reports and start TensorBoard on them.",
    )
    demo.set_defaults(handler=_cmd_demo)
    return parser


def _demo_module() -> Any:
    """The demo CLI, imported only when asked for: it imports torch."""
    import importlib

    return importlib.import_module("tb_syncfinder.demo.cli")


def _find_subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise KeyError(name)


# --- helpers -------------------------------------------------------------------------


def _use_color(choice: str, stream: IO[str]) -> bool:
    if choice == "always":
        return True
    if choice == "never":
        return False
    if os.environ.get("NO_COLOR"):  # https://no-color.org: any non-empty value
        return False
    if os.environ.get("TERM") == "dumb":  # Emacs shells, some CI logs: no escape codes
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _output_color(args: argparse.Namespace) -> bool:
    """Colour for a command's output: to a file (``-o``) only when asked with --color
    always, as a file's reader is seldom a terminal; else as ``_use_color`` says."""
    if args.output and args.color != "always":
        return False
    return _use_color(args.color, sys.stdout)


def _warn_of_unused_options(args: argparse.Namespace) -> None:
    """Options given that will do nothing, said once before the analysis (silently, a
    mistyped --source-root found no line and --ray-workers without --ray ran locally)."""
    # On a remote Ray cluster the roots are the workers' paths, not this machine's.
    for root in [] if getattr(args, "ray_address", None) else args.source_root:
        if not os.path.isdir(root):  # silently, no line of it was ever found
            _warn(f"--source-root {root}: no such directory; source lines are not looked up there")
    if getattr(args, "ray_workers", 0) and not _uses_ray(args):
        _warn("--ray-workers is for a Ray run: add --ray (or --ray-address); analysed locally")
    if getattr(args, "ray_workers", 0) and _uses_ray(args) and not args.ray_address:
        from tb_syncfinder.fanout import usable_cpus  # the local cluster's cap

        if args.ray_workers > (cores := usable_cpus()):
            _warn(f"--ray-workers {args.ray_workers}: this machine has {cores} CPUs, all used")
    if getattr(args, "ray_workers", 0) and getattr(args, "ray_address", None):
        _warn("--ray-workers is for the local cluster --ray starts; a joined cluster has its own")
    if getattr(args, "jobs", 0) and _uses_ray(args):
        _warn("--jobs is for this machine's processes; a Ray run's are its workers (--ray-workers)")


def _engine_options(args: argparse.Namespace) -> Any:
    """The engine's Options from the command line (the demo's sources included, so its runs
    resolve from any folder)."""
    from tb_syncfinder.demo.sources import SOURCE_PACKS
    from tb_syncfinder.engine import Options

    window_mb = getattr(args, "window_mb", None)
    # The timeline context around each sync is for the dashboard's detail view only.
    # The roots named first, then the current directory, which ``--help`` and the README
    # promise is always searched (given roots had replaced it, as the plugin's do).
    here = os.getcwd()
    roots = [*args.source_root]
    if not any(os.path.realpath(root) == os.path.realpath(here) for root in roots):
        roots.append(here)
    return Options(
        source_roots=tuple(roots),
        path_map=tuple(args.path_map),
        contexts=False,
        source_packs=SOURCE_PACKS,
        window_bytes=_window_bytes(window_mb),
        unprofiled_step_us=(
            args.unprofiled_step_ms * 1000.0
            if getattr(args, "unprofiled_step_ms", None) is not None
            else None
        ),
        step_annotation=getattr(args, "step_annotation", None) or None,
    )


def _window_bytes(window_mb: float | None) -> int | None:
    """``--window-mb`` in bytes: None (sized from the memory available), 0 (never split), or
    at least one byte (a fraction of a byte is not 0, which would mean never split)."""
    if window_mb is None:
        return None
    return max(1, int(window_mb * 1e6)) if window_mb > 0 else 0


def _find_refs(path: str) -> list[Any]:
    from tb_syncfinder.discovery import (
        TraceNotFoundError,
        find_traces,
        unread_ascend_folders,
        unread_ascend_reason,
    )

    try:
        refs = find_traces(path)
    except TraceNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not refs:
        message = (
            f"{path}: no traces found (looked for *.pt.trace.json[.gz] files and "
            "*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json)"
        )
        others = _other_json_files(path)
        unread = unread_ascend_folders(path)
        if unread:
            # torch_npu's raw folder holds JSON files of its own (profiler_info.json): no
            # trace under another name.
            message += "; " + "; ".join(f"{f}: {unread_ascend_reason(f, why)}" for f, why in unread)
        elif others:  # prof.export_chrome_trace("trace.json"): any name the user chose
            message += (
                f"; {others[0]} may be a trace under another name: pass the file itself, "
                "or name it NAME.pt.trace.json as tensorboard_trace_handler does"
            )
        raise UsageError(message)
    if os.path.isdir(path):
        from tb_syncfinder.discovery import UNNAMED_TRACE_REASON, unnamed_traces

        # Beside the traces found, a trace under a name of the user's was passed over
        # without a word (accelerate's profile_0.json in one run of a logdir).
        for file in unnamed_traces(path):
            _warn(f"{file}: {UNNAMED_TRACE_REASON}")
    return refs


def _other_json_files(path: str, limit: int = 2000) -> list[str]:
    """JSON files in the folder ``path`` (not below it), a bounded look."""
    if not os.path.isdir(path):
        return []
    found = []
    try:
        with os.scandir(path) as entries:
            for n, entry in enumerate(entries):
                if n >= limit:
                    break
                if entry.name.endswith((".json", ".json.gz")) and entry.is_file():
                    found.append(entry.path)
    except OSError:
        return []
    return sorted(found)


def _find_refs_of(paths: Sequence[str]) -> list[Any]:
    """The traces of several PATHs, each trace once. A run is one folder (``discovery.
    run_folder``): the trace files of one folder (``report run/*.json.gz``) are its traces
    together, under the name a folder PATH gave it (folders first), else the file's; runs
    of the same name in two folders would merge into one report, so they are refused."""
    if len(paths) == 1:
        return _find_refs(paths[0])
    import msgspec

    from tb_syncfinder.discovery import is_remote, run_folder

    def real(path: str) -> str:  # one key per file and folder, whatever links led there
        return path if is_remote(path) else os.path.realpath(path)

    folders_first = sorted(paths, key=lambda p: is_remote(p) or not os.path.isdir(p))
    refs: dict[str, Any] = {}
    name_of_folder: dict[str, str] = {}
    folder_of_name: dict[str, str] = {}
    for path in folders_first:
        for ref in _find_refs(path):
            key = real(ref.path)
            if key in refs:
                continue
            folder = real(run_folder(ref.path))
            name = name_of_folder.setdefault(folder, ref.run)
            known = folder_of_name.setdefault(name, folder)
            if known != folder:
                raise UsageError(
                    f"two runs named {name!r}: {known} and {folder}; report them one at a "
                    "time, or give their logdir"
                )
            refs[key] = ref if ref.run == name else msgspec.structs.replace(ref, run=name)
    return list(refs.values())


def _select_runs(path: str, refs: list[Any], wanted: Sequence[str]) -> list[Any]:
    """The traces of the runs named by ``--run`` (all when none is named)."""
    if not wanted:
        return refs
    found = list(dict.fromkeys(ref.run for ref in refs))
    unknown = [name for name in dict.fromkeys(wanted) if name not in found]
    if unknown:
        raise UsageError(
            f"{path}: no run named {', '.join(repr(n) for n in unknown)}; runs found: "
            + ", ".join(found)
        )
    return [ref for ref in refs if ref.run in wanted]


def _select_workers(path: str, refs: list[Any], patterns: Sequence[str]) -> list[Any]:
    """The traces of the workers ``--worker`` names (shell patterns; all when none)."""
    if not patterns:
        return refs
    import fnmatch

    def named(worker: str, pattern: str) -> bool:
        # A name as it is too: Lightning's hold brackets, a pattern's character class.
        return worker == pattern or fnmatch.fnmatchcase(worker, pattern)

    unmatched = [p for p in patterns if not any(named(r.worker, p) for r in refs)]
    if unmatched:
        found = ", ".join(dict.fromkeys(ref.worker for ref in refs))
        raise UsageError(
            f"{path}: no worker matches {', '.join(repr(p) for p in unmatched)}; workers "
            f"found: {found}"
        )
    return [r for r in refs if any(named(r.worker, p) for p in patterns)]


def _analyze_runs(
    paths: str | Sequence[str], args: argparse.Namespace, wanted: Sequence[str] = ()
) -> Any:
    """The ``ReportSet`` of ``paths`` (each trace analysed once, or read from its summary;
    the selected runs merged and each on its own). UsageError when nothing in them can be
    analysed."""
    from tb_syncfinder.engine import analyze_runs
    from tb_syncfinder.outputs import ReportSet

    paths = [paths] if isinstance(paths, str) else list(paths)
    path = paths[0] if len(paths) == 1 else f"{len(paths)} paths"  # for messages
    refs = _select_runs(path, _find_refs_of(paths), wanted)
    refs = _select_workers(path, refs, getattr(args, "workers", ()))
    runs = list(dict.fromkeys(ref.run for ref in refs))
    if getattr(args, "unprofiled_step_ms", None) is not None and len(runs) > 1:
        # Before the analysis, which would fit every run's traces to one program's step.
        raise UsageError(
            f"--unprofiled-step-ms: {len(runs)} runs here ({', '.join(map(str, runs))}); a "
            "step time is one program's: pick the run it was measured for with --run NAME"
        )
    use_ray = _uses_ray(args)
    store = None
    if not getattr(args, "no_summaries", False):
        from tb_syncfinder.summaries import SummaryStore

        store = SummaryStore(getattr(args, "summaries_dir", None))
    write = store is not None and (use_ray or getattr(args, "write_summaries", False))
    progress = _Progress(len(refs), verbose=use_ray)
    progress.announce_large(refs, bool(getattr(args, "window_mb", None)))
    mapper = None
    if use_ray:
        from tb_syncfinder.fanout import ray_mapper

        mapper = ray_mapper(args.ray_address, args.ray_workers or None, on_cluster=progress.cluster)
    elif len(refs) > 1 and getattr(args, "jobs", 0) != 1:
        from tb_syncfinder.fanout import process_mapper

        mapper = process_mapper(
            getattr(args, "jobs", 0) or None, progress_lines=lambda ref: ref.path in progress.large
        )
    # The engine's progress lines for a large trace; why a summary could not be written;
    # what the analysis processes warn of.
    log_level = "INFO" if progress.large else "WARNING" if write or mapper else None
    try:
        with _package_log_lines(log_level), _stdout_to_stderr(use_ray):
            analysed = analyze_runs(
                refs,
                _engine_options(args),
                mapper=mapper,
                summaries=store,
                write_summaries=write,
                on_result=progress.result,
            )
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: {exc}") from None
    except RuntimeError as exc:  # fanout.FanoutError: no Ray, no cluster
        raise UsageError(str(exc)) from None
    progress.done()
    if write:
        _tell_summaries_written(store, progress.analysed)
    results = analysed.results
    report_set = ReportSet.from_runs(analysed)
    if results and all(r.info.error for r in results):
        reasons = "\n".join(f"  {r.info.path}: {r.info.error}" for r in results)
        raise NothingReadable(f"{path}: no trace could be read:\n{reasons}", report_set)
    # Only findings carry frames into the report: a run without any says nothing.
    with_stacks = _frames_under(report_set.report, "")
    for src, dst in getattr(args, "path_map", ()):
        if with_stacks and not _frames_under(report_set.report, src):
            _warn(
                f"--path-map {src}={dst} matched no frame of the findings; a script's own "
                "frames are recorded relative to its sys.path entry (e.g. train.py): "
                "--source-root DIR finds those"
            )
    return report_set


def _frames_under(report_json: dict[str, Any], prefix: str) -> bool:
    """Whether any recorded frame path of the report's findings starts with ``prefix``."""
    wanted = prefix.replace("\\", "/")
    for key in ("syncs", "latent"):
        for sync in report_json.get(key) or []:
            frames = [*(sync.get("stack") or []), *(sync.get("forward_stack") or [])]
            for frame in frames:
                if str(frame.get("file") or "").replace("\\", "/").startswith(wanted):
                    return True
    return False


def _tell_summaries_written(store: Any, analysed: Sequence[str]) -> None:
    """One line on stderr saying where the summaries of the traces analysed went (a
    warning for those that could not be written)."""
    from tb_syncfinder.summaries import FOLDER, is_remote

    if not analysed:
        return  # every summary was there already (the tally says so)
    paths = [store.path_for(path) for path in analysed]
    written = [p for p in paths if is_remote(p) or os.path.isfile(p)]
    if store.directory is not None:
        where = store.directory
    else:
        folders = list(dict.fromkeys(os.path.dirname(p) for p in (written or paths)))
        where = (
            folders[0]
            if len(folders) == 1
            else f"{FOLDER}/ beside each trace ({len(folders)} folders, first {folders[0]})"
        )
    if written:
        print(
            f"{PROG}: summaries of {len(written)} trace{'s' if len(written) != 1 else ''} "
            f"written to {where}",
            file=sys.stderr,
        )
    if len(written) < len(paths):
        missing = len(paths) - len(written)
        what = "summaries" if missing != 1 else "summary"
        _warn(f"{missing} trace {what} could not be written to {where}")


@contextlib.contextmanager
def _stdout_to_stderr(wanted: bool) -> Iterator[None]:
    """While ``wanted``, what the process writes to its stdout goes to stderr: Ray prints
    its workers' and raylet's messages there ("(raylet) A worker died..."), whatever
    ``log_to_driver`` says, and the report written after would start with them."""
    if not wanted:
        yield
        return
    sys.stdout.flush()
    saved = -1
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        if saved >= 0:
            os.close(saved)  # no stdout or stderr file descriptor: Python's prints only
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    try:
        with contextlib.redirect_stdout(sys.stderr):  # Python's prints, whatever fd 1 is
            yield
    finally:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def _package_log_lines(level: str | None) -> Iterator[None]:
    """While the analysis runs, the package's log lines from ``level`` up ("INFO",
    "WARNING"; None: none) on stderr as the command's own lines: a trace read in windows,
    a summary that could not be written (with why)."""
    if level is None:
        yield
        return
    import logging

    class _Lines(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            text = record.getMessage()
            if record.levelno >= logging.WARNING:
                return f"{PROG}: warning: {text}"
            return f"{PROG}: {text}"

    logger = logging.getLogger("tb_syncfinder")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Lines())
    # The analysis processes' own lines are TensorBoard's log (a process that died, one
    # replaced for its size): here each trace's result already says what befell it.
    handler.addFilter(lambda record: not record.name.startswith("tb_syncfinder.plugin"))
    was = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(was)


def _uses_ray(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "ray", False) or getattr(args, "ray_address", None))


# A trace is large, and its analysis announced, from this much JSON (about 4 s of work);
# files smaller than the first bound are not looked into (a gzip holds up to ~20x).
_LARGE_JSON_BYTES = 128 << 20
_LARGE_FILE_BYTES = 6 << 20


class _Progress:
    """Per-trace progress on stderr as traces finish, when ``verbose`` (a cluster run), and
    a closing tally whenever summaries or a cluster were used."""

    def __init__(self, total: int, verbose: bool) -> None:
        self.total = total
        self.verbose = verbose
        self.seen = 0
        self.from_summaries = 0
        self.failed = 0
        self.analysed: list[str] = []  # traces analysed here (not from a summary), read
        self.started = time.perf_counter()
        self.cluster_note = ""
        self.large: dict[str, int] = {}  # trace path -> bytes of JSON, for the large ones

    def announce_large(self, refs: Sequence[Any], windows_asked: bool) -> None:
        """Say, before a long silence, which traces are large (the analysis takes about a
        minute per GB of JSON) and show the engine's progress lines for them (reading in
        windows, each window done): the terminal stays quiet for the usual small ones."""
        for ref in refs:
            try:
                if os.path.getsize(ref.path) < _LARGE_FILE_BYTES and not windows_asked:
                    continue
            except OSError:
                continue  # the analysis says what is wrong with it
            from tb_syncfinder.windows import json_bytes, size_text

            size = json_bytes(ref.path)
            if size is not None and (size >= _LARGE_JSON_BYTES or windows_asked):
                self.large[ref.path] = size
        if not self.large:
            return
        for path, size in self.large.items():
            if size >= _LARGE_JSON_BYTES:
                print(
                    f"{PROG}: {path}: {size_text(size)} of JSON: about a minute per GB",
                    file=sys.stderr,
                )

    def cluster(self, info: Any) -> None:
        where = info.address or "a local Ray cluster"
        if info.local_instead:
            self.cluster_note = " on this machine"
            print(
                f"{PROG}: Ray: {info.local_instead}: analysed on this machine, without "
                "starting a local cluster (that takes 5-10 s)",
                file=sys.stderr,
            )
            return
        tasks = _count(info.tasks, "task")
        self.cluster_note = f" on {where} ({info.cpus:g} CPUs, {tasks})"
        print(
            f"{PROG}: Ray: {where} ready in {info.start_s:.1f} s, {info.cpus:g} CPUs, {tasks}",
            file=sys.stderr,
        )

    def result(self, result: Any, from_summary: bool) -> None:
        self.seen += 1
        self.from_summaries += from_summary
        info = result.info
        self.failed += bool(info.error)
        if not from_summary and not info.error:
            self.analysed.append(info.path)
        if not self.verbose and info.path in self.large and not from_summary:
            elapsed = time.perf_counter() - self.started
            what = info.error or f"{len(result.syncs)} syncs"
            print(f"{PROG}: {info.path}: done at {elapsed:.1f} s: {what}", file=sys.stderr)
        if not self.verbose:
            return  # the report itself names the traces that failed
        if info.error:
            print(f"{PROG}: [{self.seen}/{self.total}] {info.path}: {info.error}", file=sys.stderr)
        elif self.total > _PROGRESS_EACH_UP_TO:
            # A thousand ranks: a line every tenth of them, the failures each by name.
            step = max(1, self.total // 10)
            if self.seen % step == 0 or self.seen == self.total:
                print(f"{PROG}: [{self.seen}/{self.total}] traces done", file=sys.stderr)
        else:
            how = "summary" if from_summary else "analysed"
            print(
                f"{PROG}: [{self.seen}/{self.total}] {info.path}: {len(result.syncs)} "
                f"syncs ({how})",
                file=sys.stderr,
            )

    def done(self) -> None:
        if not self.verbose and not self.from_summaries:
            return
        analysed = self.total - self.from_summaries - self.failed
        print(
            f"{PROG}: {self.total} traces: {self.from_summaries} from summaries, "
            f"{analysed} analysed{self.cluster_note if analysed + self.failed else ''}, "
            f"{self.failed} failed, in {time.perf_counter() - self.started:.1f} s",
            file=sys.stderr,
        )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


# Up to this many traces, a Ray run says each as it is done; past it, every tenth.
_PROGRESS_EACH_UP_TO = 100


def _rendered(outputs: Any, name: str, report_set: Any, options: Any) -> bytes:
    """The output in format ``name``; a format the runs do not fit (the annotated trace,
    named by ``-o``'s extension, needs one trace) is a usage error, not a traceback."""
    try:
        return outputs.render(name, report_set, options)
    except ValueError as exc:
        raise UsageError(f"--output as {name}: {exc}") from None


def _format_of(path: str | None) -> str | None:
    """The output format whose extension ``path`` ends with (the longest first: an
    annotated trace's ``.sync_advisor.pt.trace.json`` before ``.json``), else None."""
    if not path:
        return None
    from tb_syncfinder.outputs import FORMATS

    name = path.lower()
    if name.endswith(".sarif.json"):  # a common name for SARIF logs
        return "sarif"
    for fmt in sorted(FORMATS.values(), key=lambda f: -len(f.extension)):
        if name.endswith(fmt.extension):
            return fmt.name
    return None


# Extensions of plain text, which the table is: no note that it was written under them.
_TEXT_EXTENSIONS = ("", ".txt", ".text", ".log", ".out")


def _note_unnamed_format(path: str | None, chosen: bool) -> None:
    """Say so where ``-o`` names a file whose extension no format has (``out.md``,
    ``out.html``) and none was chosen: the table is written, which the name does not say."""
    if chosen or not path or _format_of(path):
        return
    extension = os.path.splitext(path)[1].lower()
    if extension not in _TEXT_EXTENSIONS:
        from tb_syncfinder.outputs import FORMATS

        print(
            f"{PROG}: note: no format is named by {extension}: writing the terminal text to "
            f"{path} (--format picks one of {', '.join(f for f in FORMATS if f != 'trace')}; "
            "compare writes text or, with --json, JSON)",
            file=sys.stderr,
        )


def _check_writable(path: str | None, option: str) -> None:
    """UsageError, before any analysis, when ``path`` (given to ``option``) cannot be
    written as a file: a folder, a folder that does not exist, no permission."""
    if not path:
        return
    if os.path.isdir(path):
        raise UsageError(f"cannot write {option} {path}: it is a directory, not a file")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write {option} {path}: no such directory {folder}")
    target = path if os.path.exists(path) else folder
    if not os.access(target, os.W_OK):
        raise UsageError(f"cannot write {option} {path}: permission denied")


def _refuse_inputs(path: str | None, option: str, *reports: dict[str, Any]) -> None:
    """UsageError when ``path`` is one of the traces the reports were made from: ``-o``
    pointed at a trace replaced it with the report, and said nothing."""
    if not path or not os.path.exists(path):
        return
    for report in reports:
        for trace in report.get("traces") or []:
            trace_path = trace.get("path")
            try:
                same = bool(trace_path) and os.path.samefile(path, trace_path)
            except OSError:  # gone, or a remote path
                continue
            if same:
                raise UsageError(
                    f"cannot write {option} {path}: it is one of the traces analysed, and "
                    "would be overwritten; write the output elsewhere"
                )


def _write(data: bytes, output: str | None, option: str = "--output") -> None:
    if output:
        try:
            with open(output, "wb") as handle:
                handle.write(data)
        except OSError as exc:  # the checks up front cannot foresee a full disk
            raise UsageError(
                f"cannot write {option} {output}: {(exc.strerror or str(exc)).lower()}"
            ) from None
        return
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:  # a sys.stdout replaced by one without bytes underneath
        sys.stdout.write(data.decode("utf-8"))
        sys.stdout.flush()
        return
    sys.stdout.flush()  # text written earlier goes first
    stream.write(data)
    stream.flush()


def _warn_of_step_annotation_misfits(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """``--step-annotation`` that found no span in a trace without step markers: said, with
    the name that repeats there, instead of a silent one step per trace. A pattern that
    took the spans of several names is said too: their spans were all counted as steps."""
    from tb_syncfinder.outputs.text import plural

    name = getattr(args, "step_annotation", None)
    if not name:
        return
    from tb_syncfinder.outputs.text import several_step_annotation_names

    traces = [t for t in report.get("traces") or [] if not t.get("error")]
    matched = several_step_annotation_names(traces)
    if matched:
        _warn(
            f"--step-annotation {name!r} matched {len(matched)} record_function names "
            f"({', '.join(matched)}): each span of each is counted as a step; give the one "
            "that spans a training step"
        )
    missed = [t for t in traces if t.get("step_markers") is False]
    if not missed:
        return
    hints = sorted(
        {str(t["step_annotation_hint"]) for t in missed if t.get("step_annotation_hint")}
    )
    _warn(
        f"--step-annotation {name!r}: no record_function span of that name in "
        f"{plural(len(missed), 'trace')} without ProfilerStep markers, each counted as one step"
        + (f" (the names that repeat there: {', '.join(hints)})" if hints else "")
    )


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def _sites_of(
    report_json: dict[str, Any], trace: str, steps: set[Any], most: int = 3, key: str = "syncs"
) -> str:
    """The sites of a trace's syncs in ``steps``, most syncs first: ``train.py:42 (8),
    loss.py:7 (4)`` (the operator or call where a sync has no source line). ``key``: "syncs",
    or "latent" for the latent ones."""
    counts: dict[str, int] = {}
    for sync in report_json.get(key) or []:
        if sync.get("trace") != trace or sync.get("step") not in steps:
            continue
        source = sync.get("source") or {}
        if source.get("file"):
            exact = "" if source.get("line_exact") else "*"  # as the table marks it
            name = f"{os.path.basename(source['file'])}:{source.get('line')}{exact}"
        else:
            name = sync.get("op") or sync.get("api") or "?"
        counts[name] = counts.get(name, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    shown = ", ".join(f"{name} ({count})" for name, count in ranked[:most])
    return shown + (f" and {len(ranked) - most} more" if len(ranked) > most else "")


def step_violations(report_json: dict[str, Any], limit: int) -> list[str]:
    """One line per trace with steps whose sync count exceeds ``limit``, naming the worst
    step and the sites; the whole trace counts as one step when it has no ProfilerStep
    markers. Lines start with ``run NAME:`` when the report's traces come from more than
    one run."""
    from tb_syncfinder.outputs.text import plural

    problems = []
    run_of = {t.get("path"): t.get("run") for t in report_json.get("traces") or []}
    several_runs = len({r for r in run_of.values() if r}) > 1

    def where_run(trace: str | None) -> str:
        return f"run {run_of.get(trace)}: " if several_runs and run_of.get(trace) else ""

    name_of = _trace_names(report_json)
    # A trace without ProfilerStep markers counts as one step (the engine gives it one
    # pseudo-step, so ``steps`` does not tell): its syncs all have no step.
    unmarked = {
        t.get("path") for t in report_json.get("traces") or [] if t.get("step_markers") is False
    }
    # One line per trace, not per step (eight lines a trace for a job of eight steps), with
    # the sites its steps over the limit synced at: what to open.
    over: dict[str, list[dict[str, Any]]] = {}
    for step in report_json.get("steps") or []:
        if int(step.get("sync_count") or 0) > limit:
            over.setdefault(step.get("trace") or "", []).append(step)
    for trace, steps in over.items():
        where = name_of(trace)
        worst = max(steps, key=lambda step: int(step.get("sync_count") or 0))
        most = int(worst.get("sync_count") or 0)
        numbers = {step.get("step") for step in steps}
        if trace in unmarked:
            # Its one pseudo-step is the whole trace: no "step 0" the program had.
            text = (
                f"{where} (no ProfilerStep markers, counted as one step) has "
                f"{plural(most, 'sync')} (limit {limit})"
            )
            numbers = {None}
        elif len(steps) == 1:
            text = f"step {worst.get('step')} of {where} has {plural(most, 'sync')} (limit {limit})"
        else:
            text = (
                f"{len(steps)} steps of {where} have more than {plural(limit, 'sync')}, "
                f"up to {most} (step {worst.get('step')})"
            )
        at = _sites_of(report_json, trace, numbers)
        problems.append(f"{where_run(trace)}{text}{f'; at {at}' if at else ''}")
    traced_steps = {
        t.get("path") for t in (report_json.get("traces") or []) if int(t.get("steps") or 0) > 0
    }
    by_trace: dict[str, int] = {}
    for sync in report_json.get("syncs") or []:
        if sync.get("step") is None and sync.get("trace") not in traced_steps:
            by_trace[sync.get("trace") or ""] = by_trace.get(sync.get("trace") or "", 0) + 1
    for trace, count in by_trace.items():
        if count > limit:
            problems.append(
                f"{where_run(trace)}"
                f"{name_of(trace)} (no ProfilerStep markers, "
                f"counted as one step) has {count} syncs (limit {limit})"
            )
    # A CPU-only trace (a CI runner's) has no sync at all, only latent ones: the operators
    # that would synchronize on a GPU are what the gate can check there. So has torch_npu's
    # at its default level: the operators sync on the NPU, with no wait recorded.
    gated = {
        t.get("path"): "operators that synchronize on the NPU, no wait recorded"
        if t.get("device") == "npu"
        else "operators that would synchronize on a GPU"
        for t in report_json.get("traces") or []
        if _latent_gated(t)
    }
    latent_counts: dict[tuple[str, Any], int] = {}
    for sync in report_json.get("latent") or []:
        trace = sync.get("trace") or ""
        step = sync.get("step")
        if trace in gated and (step is not None or trace in unmarked):
            latent_counts[(trace, step)] = latent_counts.get((trace, step), 0) + 1
    # One line per trace here too, as for measured syncs (a line per step was five lines
    # for the demo's CPU run against one for its GPU run).
    latent_over: dict[str, list[tuple[Any, int]]] = {}
    for (trace, step), count in latent_counts.items():
        if count > limit:
            latent_over.setdefault(trace, []).append((step, count))
    for trace, steps_over in latent_over.items():
        name = name_of(trace)
        what = gated[trace]
        worst_step, most = max(steps_over, key=lambda item: item[1])
        if worst_step is None:
            text = (
                f"{name} (no ProfilerStep markers, counted as one step) has {most} latent "
                f"syncs, {what} (limit {limit})"
            )
        elif len(steps_over) == 1:
            text = f"step {worst_step} of {name} has {most} latent syncs, {what} (limit {limit})"
        else:
            text = (
                f"{len(steps_over)} steps of {name} have more than "
                f"{plural(limit, 'latent sync')} ({what}), up to {most} (step {worst_step})"
            )
        at = _sites_of(report_json, trace, {step for step, _ in steps_over}, key="latent")
        problems.append(f"{where_run(trace)}{text}{f'; at {at}' if at else ''}")
    return problems


def _latent_gated(trace: dict[str, Any]) -> bool:
    """Whether a gate counts a trace's latent syncs: it has no measured one to count (CPU
    only, or torch_npu's without AscendCL calls)."""
    from tb_syncfinder.catalogue import npu_without_calls

    if _unchecked(trace):
        return False
    return trace.get("device") == "cpu" or npu_without_calls(trace)


def _trace_names(report_json: dict[str, Any]) -> Callable[[str], str]:
    """How a gate's line names a trace: its file name, or where several traces share it
    (torch_npu names every rank's ``trace_view.json``), its path below the folder they
    share."""
    by_run: dict[Any, list[str]] = {}
    for t in report_json.get("traces") or []:
        if t.get("path"):
            by_run.setdefault(t.get("run"), []).append(str(t["path"]))
    named: dict[str, str] = {}
    for paths in by_run.values():  # a line names the run too where there are several
        names = [os.path.basename(p) for p in paths]
        if len(set(names)) == len(names):
            named.update(zip(paths, names, strict=True))
            continue
        try:
            shared = os.path.commonpath([os.path.dirname(p) for p in paths])
        except ValueError:  # relative and absolute paths mixed
            shared = ""
        named.update((p, os.path.relpath(p, shared) if shared else p) for p in paths)
    return lambda trace: named.get(trace) or os.path.basename(trace) or "trace"


def _unchecked(trace: dict[str, Any]) -> str | None:
    """Why a gate cannot vouch for a trace: unreadable, or read but empty (a profiler that
    wrote no event passed a gate of 0 syncs as a CPU-only trace, exit 0)."""
    from tb_syncfinder.reader import EMPTY_TRACE

    if trace.get("error"):
        return str(trace["error"])
    return next((r for r in trace.get("repairs") or [] if r.startswith(EMPTY_TRACE)), None)


def _gate_notes(report_json: dict[str, Any], latent: bool = True) -> list[str]:
    """What a gate should say besides its verdict: which traces it could not check, and
    that CPU-only traces are gated on their latent syncs."""
    traces = report_json.get("traces") or []
    notes = [f"cannot check {t.get('path')}: {_unchecked(t)}" for t in traces if _unchecked(t)]
    for device, which, what in (
        ("cpu", "CPU-only trace", "operators that would synchronize on a GPU"),
        ("npu", "torch_npu trace", "operators that synchronize on the NPU, no wait recorded"),
    ):
        gated = [t for t in traces if _latent_gated(t) and t.get("device") == device]
        if gated and latent:
            several = len(gated) > 1
            without = " without AscendCL calls" if device == "npu" else ""
            notes.append(
                f"{len(gated)} {which}{'s' if several else ''}{without}: "
                f"{'their' if several else 'its'} latent syncs ({what}) are counted; "
                "--no-latent leaves them out"
            )
    return notes


# --- commands ------------------------------------------------------------------------


def _cmd_report(args: argparse.Namespace) -> int:
    from tb_syncfinder import outputs
    from tb_syncfinder.engine import with_one_blas_thread

    with_one_blas_thread(os.environ)  # before numpy's first import (the replay's)

    if args.output == "-":
        args.output = None  # the usual name for standard output
    # -o results.sarif wrote the table under that name, and a code-scanning upload failed
    # on it: without --format, the file's extension names the format.
    output_format = "json" if args.json else (args.format or _format_of(args.output) or "table")
    if args.json and args.format not in (None, "json"):
        raise UsageError(f"--json and --format {args.format} contradict each other")
    _note_unnamed_format(args.output, bool(args.json or args.format))
    _check_writable(args.output, "--output")
    _check_writable(args.annotate, "--annotate")
    _warn_of_unused_options(args)
    try:
        report_set = _analyze_runs(args.path, args, args.runs)
    except NothingReadable as exc:
        if args.output or output_format != "table":
            # Still exit 2, but leave the file a CI step reads (SARIF with the errors as
            # notifications, JSON with each trace's error) rather than none at all; the
            # same on standard output (`--json | jq` read an empty stream).
            _refuse_inputs(args.output, "--output", exc.report_set.report)
            options = outputs.RenderOptions(color=False, top=args.top or None)
            _write(_rendered(outputs, output_format, exc.report_set, options), args.output)
        raise
    if not args.latent:
        report_set = report_set.without_latent()
    if args.unprofiled_step_ms is not None:
        if len(report_set.runs) > 1:
            raise UsageError(
                f"--unprofiled-step-ms: {len(report_set.runs)} runs here "
                f"({', '.join(report_set.runs)}); a step time is one program's: pick the run "
                "it was measured for with --run NAME"
            )
        from tb_syncfinder.outputs import ReportSet
        from tb_syncfinder.query import with_unprofiled_step

        step_us = args.unprofiled_step_ms * 1000.0
        summary = report_set.report.get("summary") or {}
        if not summary.get("sync_count") and not any(
            t.get("has_gpu_activity") or t.get("has_runtime")
            for t in report_set.report.get("traces") or []
            if not t.get("error")
        ):
            # A CPU-only trace (or torch_npu's without AscendCL calls) measured no wait: the
            # summary that would show the figure is not printed, so it went unseen.
            _warn(
                "--unprofiled-step-ms: no wait was measured in these traces (CPU-only, or "
                "without runtime calls), so there is no saving to bound; ignored"
            )
        report_set = ReportSet(
            with_unprofiled_step(report_set.report, step_us),
            {name: with_unprofiled_step(run, step_us) for name, run in report_set.runs.items()},
        )
    _warn_of_step_annotation_misfits(args, report_set.report)
    # On stderr in every format, the table's included: its Errors section comes last, so
    # behind `| head` or `-o FILE` an unreadable trace went unseen.
    if not _uses_ray(args):  # a Ray run named them already
        for trace in report_set.report["traces"]:
            if trace.get("error"):
                _warn(f"{trace['path']}: {trace['error']}")
    _refuse_inputs(args.output, "--output", report_set.report)
    _refuse_inputs(args.annotate, "--annotate", report_set.report)
    options = outputs.RenderOptions(color=_output_color(args), top=args.top or None)
    _write(_rendered(outputs, output_format, report_set, options), args.output)

    if args.annotate:
        try:
            annotated = outputs.render("trace", report_set)
        except ValueError as exc:
            raise UsageError(f"--annotate: {exc}") from None
        if args.annotate.endswith(".gz"):
            import gzip

            # A .json.gz that is plain JSON opens in no trace viewer (Perfetto, chrome://tracing
            # read it by its name).
            annotated = gzip.compress(annotated, compresslevel=6, mtime=0)
        _write(annotated, args.annotate, "--annotate")
        print(f"{PROG}: annotated trace written to {args.annotate}", file=sys.stderr)

    if args.max_syncs_per_step is not None:
        for note in _gate_notes(report_set.report, latent=args.latent):
            print(f"{PROG}: gate: {note}", file=sys.stderr)
        problems = step_violations(report_set.report, args.max_syncs_per_step)
        if problems:
            for problem in problems:
                print(f"{PROG}: too many syncs: {problem}", file=sys.stderr)
            return 1
        if any(_unchecked(t) for t in report_set.report.get("traces") or []):
            return 2  # a gate that could not read a trace (a crashed rank's) did not pass
    return 0


def _some(names: list[str]) -> str:
    """The first five names, and how many more."""
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _load_side(path: str, args: argparse.Namespace) -> dict[str, Any]:
    """A report JSON file as is, or the report of analysing a trace / run / logdir."""
    from tb_syncfinder.models import SCHEMA

    if os.path.isfile(path) and not path.endswith(".gz"):
        try:
            with open(path, "rb") as handle:
                head = handle.read(4096)
        except OSError as exc:
            raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
        family = SCHEMA.rsplit("/", 1)[0] + "/"  # "tb_syncfinder.report/": any version
        if family.encode() in head:
            import json

            import msgspec

            from tb_syncfinder.models import Report

            try:
                with open(path, encoding="utf-8") as handle:
                    data = json.load(handle)
            except (OSError, ValueError) as exc:
                raise UsageError(f"{path}: not a readable report ({exc})") from None
            schema = data.get("schema") if isinstance(data, dict) else None
            if schema != SCHEMA:
                if isinstance(schema, str) and schema.startswith(family):
                    raise UsageError(
                        f"{path}: a {schema} report; this version of {PROG} reads {SCHEMA}"
                    )
                raise UsageError(f"{path}: not a {SCHEMA} report")
            try:
                # Every field compare reads, of the type the report writes it: a report
                # edited by hand failed inside the comparison, with a traceback and the
                # exit status of a regression.
                msgspec.convert(data, Report)
            except msgspec.ValidationError as exc:
                raise UsageError(f"{path}: not a valid {SCHEMA} report: {exc}") from None
            runs = [str(r.get("run")) for r in data.get("runs") or [] if isinstance(r, dict)]
            if len(runs) > 1:
                # Its top-level figures merge every run: a site of one run read as fixed
                # and another's per-step figures as worse, and the gate failed on it.
                raise UsageError(
                    f"{path} is a report of {len(runs)} runs ({_some(runs)}): compare one "
                    f"run with one run, writing each run's report apart (`{PROG} report "
                    "RUN_FOLDER --json -o FILE`)"
                )
            return data
    try:
        report_set = _analyze_runs(path, args)
    except UsageError as exc:
        if not os.path.isfile(path):
            raise
        # A CSV or table export given as a side: say what compare reads.
        raise UsageError(
            f"{exc}\n  (compare reads a trace, a run's folder, or a report JSON written by "
            f"`{PROG} report RUN --json -o FILE`)"
        ) from None
    if len(report_set.runs) > 1:
        # Merged, each run's per-step figures were spread over every run's steps (a site
        # of one run read 0.07 a step beside itself at 1.0) and nothing said so.
        names = list(report_set.runs)
        raise UsageError(
            f"{path} holds {len(names)} runs ({_some(names)}): compare one run with one run, "
            "giving each run's folder (or a trace file, or a report JSON)"
        )
    return report_set.report


def _cmd_compare(args: argparse.Namespace) -> int:
    from tb_syncfinder.compare import compare
    from tb_syncfinder.engine import with_one_blas_thread
    from tb_syncfinder.outputs.json import dumps
    from tb_syncfinder.outputs.text import render_compare, with_relative_files

    with_one_blas_thread(os.environ)  # before numpy's first import (the replay's)
    if args.output == "-":
        args.output = None
    named = _format_of(args.output)
    if named not in (None, "json", "table"):
        # compare writes the comparison as JSON or text: a .sarif or .csv name got the table.
        raise UsageError(
            f"--output {args.output}: compare writes JSON (.json, or --json) or text, not {named}"
        )
    as_json = args.json or named == "json"
    _note_unnamed_format(args.output, bool(args.json))
    _check_writable(args.output, "--output")
    _warn_of_unused_options(args)
    base = _load_side(args.base, args)
    new = _load_side(args.new, args)
    _refuse_inputs(args.output, "--output", base, new)
    result = compare(base, new)
    for entry in result["unreadable"]:  # as report names them: compared without them
        side = "baseline" if entry["side"] == "base" else "new run"
        _warn(f"{side}: {entry['path']}: {entry['error']} (left out of the comparison)")
    if result["keys_differ"]:
        _warn(result["keys_differ"])
    if result.get("detection_note"):
        _warn(result["detection_note"])
    if result.get("replacement_note"):
        _warn(result["replacement_note"])
    if result.get("runs_note"):
        _warn(result["runs_note"])
    if as_json:
        _write(dumps(result), args.output)
    else:
        shown = with_relative_files(result, os.getcwd())  # files as the shell names them
        _write(render_compare(shown, color=_output_color(args)).encode("utf-8"), args.output)
    if args.fail_on_regression:
        # Latent sites too: between CPU-only runs (a CI runner's) they are all there is.
        regressions = [
            (site, latent)
            for latent, rows in ((False, result["sites"]), (True, result.get("latent_sites")))
            for site in rows or []
            if site["status"] in ("new", "worse")
            and not site.get("newly_listed")
            and not site.get("replaces")
        ]
        if regressions and result["keys_differ"]:
            # Not a verdict on the code: the sites changed their identity, not the program.
            print(f"{PROG}: cannot gate across reports of two site-key formats", file=sys.stderr)
            return 2
        if result.get("steps_differ"):
            # Costs per step of a run counted in whole traces against one counted in steps:
            # a regression reads as "better" one way round, a non-change as "worse" the other.
            print(
                f"{PROG}: cannot gate per step across runs with and without ProfilerStep markers",
                file=sys.stderr,
            )
            return 2
        if regressions:
            for site, latent in regressions:
                what = " (latent)" if latent else ""
                print(f"{PROG}: {site['status']}{what}: {site['key']}", file=sys.stderr)
            return 1
        if result["unreadable"]:
            return 2  # the gate could not compare every trace: it did not pass
        empty = [
            (side, t)
            for side, report in (("baseline", base), ("new run", new))
            for t in report.get("traces") or []
            if not t.get("error") and _unchecked(t)
        ]
        for side, trace in empty:
            print(
                f"{PROG}: gate: cannot check {side} {trace.get('path')}: {_unchecked(trace)}",
                file=sys.stderr,
            )
        if empty:
            return 2  # an empty trace is no run of the program: the gate did not pass
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    return int(_demo_module().run(args) or 0)


# --- entry point ---------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if args_list and args_list[0] == "demo":
        demo_parser = _find_subparser(parser, "demo")
        try:
            _demo_module().add_arguments(demo_parser)
        except ImportError as exc:
            print(f"{PROG}: error: the demo is not available ({exc})", file=sys.stderr)
            return 2
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:  # argparse: 0 for --help/--version, 2 for bad usage
        return int(exc.code or 0)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return 2
    restore = _exit_on_sigterm()
    try:
        return args.handler(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Output piped into `head` and closed early: not an error of ours.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        restore()


def run() -> NoReturn:
    """The ``tb-syncfinder`` command (and ``python -m tb_syncfinder``): ``main`` then exit.

    Before exiting, every object left is moved out of the collector's reach
    (``gc.freeze``): the interpreter's shutdown otherwise runs full collections over all of
    them (numpy's included), 10 to 19 ms of a report on a small trace, for memory the
    process hands back anyway. ``main`` does not, as it may be called in a process that
    goes on."""
    import gc

    code = main()
    gc.freeze()
    sys.exit(code)


def _exit_on_sigterm() -> Callable[[], None]:
    """Make SIGTERM (a CI job's timeout, ``timeout``, ``docker stop``) exit through Python,
    as Ctrl-C does, so that a trace's windows in the temporary folder are removed; returns
    what puts the previous handler back. A handler someone else set is left alone."""
    import signal

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return lambda: None
        signal.signal(signal.SIGTERM, stop)
    except (ValueError, OSError):  # not the main thread (main() called from a thread)
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    run()
