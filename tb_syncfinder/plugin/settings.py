"""Plugin settings from TensorBoard's flags (``--sync_advisor_*``, ``--logdir[_spec]``)."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

from tb_syncfinder.plugin.cache import default_cache_dir
from tb_syncfinder.plugin.metadata import PLUGIN_NAME, flag_name
from tb_syncfinder.source import parse_path_map

logger = logging.getLogger(__name__)

DEFAULT_RELOAD_INTERVAL_S = 10.0
_URI = re.compile(r"[a-zA-Z][0-9a-zA-Z.]*://.*")
_DISABLED = ("", "none", "off", "false", "0")


@dataclass
class PluginSettings:
    logdirs: list[tuple[str | None, str]]  # (run name prefix, path); prefix only if several
    source_roots: list[str] = field(default_factory=lambda: default_source_roots())
    path_map: list[tuple[str, str]] = field(default_factory=list)
    cache_dir: str | None = field(default_factory=default_cache_dir)  # None: no disk cache
    reload_interval_s: float = DEFAULT_RELOAD_INTERVAL_S
    max_workers: int = 0  # 0: min(4, cpu count)
    use_processes: bool = True
    # Per-trace summaries (``tb-syncfinder report --write-summaries`` or ``--ray``): beside
    # each trace when None, else in this folder (the CLI's ``--summaries-dir``).
    summaries_dir: str | None = None
    # A trace's analysis window in MB of JSON (the CLI's --window-mb): None sizes it from
    # the memory this process may use, 0 never splits.
    window_mb: float | None = None
    # In traces without ProfilerStep markers, the record_function name (or shell pattern)
    # whose spans are the steps (the CLI's --step-annotation); None: one step a trace.
    step_annotation: str | None = None


def parse_logdir_spec(spec: str) -> list[tuple[str | None, str]]:
    """``--logdir_spec`` as TensorBoard parses it: ``name:/path,/other/path``.

    Unnamed entries are prefixed with their folder's base name so that runs of different
    logdirs never collide.
    """
    entries: list[tuple[str | None, str]] = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        if (
            _URI.match(item) is None
            and ":" in item
            and item[0] != "/"
            and not os.path.splitdrive(item)[0]
        ):
            name, _, path = item.partition(":")
        else:
            name, path = None, item
        if _URI.match(path) is None:
            path = os.path.realpath(os.path.expanduser(path))
        entries.append((name or os.path.basename(path.rstrip("/")) or path, path))
    return entries


def logdirs_from(flags: Any, context_logdir: str | None) -> list[tuple[str | None, str]]:
    """The logdir(s) to watch: ``--logdir`` (no prefix) or every ``--logdir_spec`` entry."""
    logdir = context_logdir or getattr(flags, "logdir", None)
    if logdir:
        if _URI.match(logdir) is None:
            logdir = os.path.realpath(os.path.expanduser(logdir))
        return [(None, logdir)]
    spec = getattr(flags, "logdir_spec", None)
    if spec:
        entries = parse_logdir_spec(spec)
        if len(entries) == 1:
            return [(None, entries[0][1])]
        return entries
    return []


def settings_from_flags(flags: Any, context_logdir: str | None) -> PluginSettings:
    """Settings from a parsed TensorBoard namespace (missing flags take their defaults)."""
    roots = [
        os.path.realpath(os.path.expanduser(r))
        for r in (getattr(flags, flag_name("source_root"), None) or [])
    ]
    cache_dir = getattr(flags, flag_name("cache_dir"), None)
    if cache_dir is None:
        cache_dir = default_cache_dir()
    elif cache_dir.strip().lower() in _DISABLED:
        cache_dir = None
    interval = getattr(flags, flag_name("reload_interval"), None)
    return PluginSettings(
        logdirs=logdirs_from(flags, context_logdir),
        source_roots=roots or default_source_roots(),
        path_map=parse_path_map(getattr(flags, flag_name("path_map"), None) or []),
        cache_dir=cache_dir,
        reload_interval_s=DEFAULT_RELOAD_INTERVAL_S if interval is None else float(interval),
        max_workers=int(getattr(flags, flag_name("max_workers"), 0) or 0),
        summaries_dir=getattr(flags, flag_name("summaries_dir"), None) or None,
        window_mb=_window_mb(getattr(flags, flag_name("window_mb"), None)),
        step_annotation=getattr(flags, flag_name("step_annotation"), None) or None,
    )


def _window_mb(value: Any) -> float | None:
    return None if value is None else float(value)


def default_source_roots(cwd: str | None = None) -> list[str]:
    """TensorBoard's working directory, unless that is the filesystem root (a service or a
    container's default WORKDIR): serving every .py file of the machine to a --bind_all
    TensorBoard is never what was meant, so then only --sync_advisor_source_root counts."""
    cwd = os.path.realpath(cwd or os.getcwd())
    if os.path.dirname(cwd) == cwd:
        logger.warning(
            "sync_advisor: TensorBoard runs from %s; no source files are shown unless "
            "--sync_advisor_source_root names the project folder",
            cwd,
        )
        return []
    return [cwd]


def define_flags(parser: Any) -> None:
    """Add the ``--sync_advisor_*`` flags to TensorBoard's argument parser."""
    group = parser.add_argument_group(PLUGIN_NAME)
    group.add_argument(
        f"--{flag_name('source_root')}",
        action="append",
        metavar="DIR",
        default=None,
        help="Sync Advisor: a folder whose .py files may be shown as the source of a "
        "finding (repeatable; default: the folder TensorBoard was started in, which the "
        "folders given replace: they are all this server reads and serves).",
    )
    group.add_argument(
        f"--{flag_name('path_map')}",
        action="append",
        metavar="FROM=TO",
        default=None,
        help="Sync Advisor: read source paths starting with FROM (as recorded in the "
        "trace, e.g. on the training machine) under TO locally (repeatable).",
    )
    group.add_argument(
        f"--{flag_name('cache_dir')}",
        metavar="DIR",
        default=None,
        help="Sync Advisor: where analysed traces are cached (default: "
        "$XDG_CACHE_HOME/tb_syncfinder or ~/.cache/tb_syncfinder; 'none' disables).",
    )
    group.add_argument(
        f"--{flag_name('reload_interval')}",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_RELOAD_INTERVAL_S,
        help="Sync Advisor: how often the logdir is scanned for new or changed traces "
        f"(default: {DEFAULT_RELOAD_INTERVAL_S:g} seconds).",
    )
    group.add_argument(
        f"--{flag_name('max_workers')}",
        metavar="N",
        type=int,
        default=0,
        help="Sync Advisor: trace files analysed at once (default: min(4, CPU count)).",
    )
    group.add_argument(
        f"--{flag_name('summaries_dir')}",
        metavar="DIR",
        default=None,
        help="Sync Advisor: the folder of per-trace summaries written by 'tb-syncfinder "
        "report --summaries-dir DIR' (default: the .sync_advisor folder beside each trace). "
        "In a run that has summaries, traces without one are listed, not parsed.",
    )
    group.add_argument(
        f"--{flag_name('window_mb')}",
        metavar="MB",
        default=None,
        help="Sync Advisor: analyse a trace larger than this many MB of JSON in windows of "
        "whole steps (default: sized from the memory TensorBoard may use, its container's "
        "limit included; 0: never split), as 'tb-syncfinder report --window-mb'.",
    )
    group.add_argument(
        f"--{flag_name('step_annotation')}",
        metavar="NAME",
        default=None,
        help="Sync Advisor: in traces without ProfilerStep markers (no prof.step()), count "
        "the spans of this record_function name as the steps (a shell pattern such as "
        "'step_*' for numbered names), as 'tb-syncfinder report --step-annotation'.",
    )


def check_flags(flags: Any) -> None:
    """Raise ValueError with a readable message for a malformed ``--sync_advisor_*`` flag."""
    parse_path_map(getattr(flags, flag_name("path_map"), None) or [])
    interval = getattr(flags, flag_name("reload_interval"), DEFAULT_RELOAD_INTERVAL_S)
    if interval is not None and not float(interval) > 0:
        raise ValueError("--sync_advisor_reload_interval must be > 0")
    workers = getattr(flags, flag_name("max_workers"), 0) or 0
    if int(workers) < 0:
        raise ValueError("--sync_advisor_max_workers must be >= 0")
    window = getattr(flags, flag_name("window_mb"), None)
    if window is not None:
        try:
            size = float(window)
        except ValueError:
            size = -1.0
        if not (size >= 0 and size != float("inf")):
            raise ValueError("--sync_advisor_window_mb must be 0 (never split) or a size in MB")
