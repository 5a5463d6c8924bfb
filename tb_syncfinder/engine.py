"""The pipeline: the only place that strings the stages together.

``analyze(path)`` takes a trace file, a run folder or a logdir and returns a ``Report``;
``analyze_trace(ref, options)`` analyses one file and never raises for a bad one (its
``TraceResult.info.error`` says why), so one broken trace never hides the others.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tb_syncfinder.aggregate import build_report
from tb_syncfinder.attribute import attribute
from tb_syncfinder.context import sync_context
from tb_syncfinder.cost import measure
from tb_syncfinder.detect import Episode, detect_latent, detect_syncs
from tb_syncfinder.models import Report, StepStats, Sync, TraceInfo, TraceRef
from tb_syncfinder.reader import TraceReadError, read_trace
from tb_syncfinder.source import (
    SourceResolver,
    callee_groups,
    parse_path_map,
    with_builtin_sources,
)
from tb_syncfinder.timeline import Timeline, build_timeline

__all__ = ["NoTracesError", "Options", "TraceResult", "analyze", "analyze_trace"]


class NoTracesError(FileNotFoundError):
    """The path does not exist or holds no trace: unusable input (CLI exit status 2)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass
class Options:
    """What the analysis may use besides the trace."""

    source_roots: Sequence[str] = ()  # where to look for source files (default: cwd)
    path_map: Sequence[tuple[str, str] | str] = ()  # FROM=TO prefixes for moved sources
    context_window_us: float = 300.0  # timeline context either side of each sync
    context_max_events: int = 60  # per lane, for the dashboard's detail view
    contexts: bool = True  # compute TraceResult.contexts

    def resolver(self) -> SourceResolver:
        roots, path_map = with_builtin_sources(
            list(self.source_roots) or [os.getcwd()], parse_path_map(self.path_map)
        )
        return SourceResolver(roots, path_map)


@dataclass
class TraceResult:
    """One analysed trace: what the plugin caches. Holds no raw events (picklable)."""

    info: TraceInfo
    syncs: list[Sync] = field(default_factory=list)
    latent: list[Sync] = field(default_factory=list)
    steps: list[StepStats] = field(default_factory=list)
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)


def sync_id_prefix(trace_path: str) -> str:
    return hashlib.sha1(trace_path.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _resolve_sources(
    resolver: SourceResolver, episodes: list[Episode], syncs: list[Sync]
) -> None:
    """Set ``Sync.source``; the n-th sync of one function invocation calling the same thing
    is matched to the n-th such call in the source (see source.py)."""
    keyed: list[tuple[Any, list[list[str]]]] = []
    counts: dict[Any, int] = {}
    for episode, sync in zip(episodes, syncs):
        groups = callee_groups(episode.extra.get("called"), sync.op_chain,
                               None if sync.op else sync.api)
        invocation = episode.extra.get("invocation")
        key = (invocation, tuple(tuple(g) for g in groups[:1])) if invocation else None
        keyed.append((key, groups))
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
    seen: dict[Any, int] = {}
    for (key, groups), episode, sync in zip(keyed, episodes, syncs):
        occurrence = None
        if key is not None:
            index = seen.get(key, 0)
            seen[key] = index + 1
            occurrence = (index, counts[key])
        if sync.stack:
            sync.source = resolver.resolve(
                sync.stack, groups, call_lines=bool(episode.extra.get("call_lines")),
                occurrence=occurrence,
            )


def _info(ref: TraceRef, tl: Timeline | None = None) -> TraceInfo:
    info = TraceInfo(path=ref.path, worker=ref.worker, span=ref.span, run=ref.run)
    if tl is not None:
        info.device = tl.device_kind
        info.device_name = tl.device_name
        info.steps = len({s.number for s in tl.steps}) or 1
        info.has_stacks = tl.has_stacks
        info.has_gpu_activity = tl.has_gpu_activity
        info.event_count = tl.event_count
        info.torch_version = tl.torch_version
    return info


def _without_gc(func: Any) -> Any:
    """Run ``func`` with the cyclic GC paused: decoding makes ~10^5 container objects and
    none of them form cycles, so collections would only rescan them (~10 % of the time)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return func(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return wrapper


@_without_gc
def analyze_trace(
    ref: TraceRef | str,
    options: Options | None = None,
    resolver: SourceResolver | None = None,
) -> TraceResult:
    """Analyse one trace file. Never raises for a bad file: ``info.error`` says why."""
    if isinstance(ref, str):
        name = os.path.basename(ref)
        ref = TraceRef(ref, os.path.basename(os.path.dirname(os.path.abspath(ref))), name)
    options = options or Options()
    try:
        data = read_trace(ref.path)
    except TraceReadError as exc:
        info = _info(ref)
        info.error = exc.reason
        return TraceResult(info)
    try:
        return _analyze_data(ref, data, options, resolver or options.resolver())
    except Exception as exc:  # noqa: BLE001 - a bug on one odd trace must not hide others
        info = _info(ref)
        info.error = f"analysis failed: {type(exc).__name__}: {exc}"
        return TraceResult(info)




def _analyze_data(ref: TraceRef, data: Any, options: Options,
                  resolver: SourceResolver) -> TraceResult:
    repairs = list(getattr(data, "repairs", ()))
    tl = build_timeline(data)
    del data  # the events live on in the timeline only until this function returns
    episodes = detect_syncs(tl)
    latent_episodes = detect_latent(tl)
    syncs = [attribute(tl, ep) for ep in episodes]
    latent = [attribute(tl, ep) for ep in latent_episodes]
    steps = measure(tl, syncs, episodes)
    _resolve_sources(resolver, episodes, syncs)
    _resolve_sources(resolver, latent_episodes, latent)
    prefix = sync_id_prefix(ref.path)
    for n, sync in enumerate(syncs + latent):
        sync.id = f"{prefix}-{n}"
        sync.trace = ref.path
    contexts: dict[str, dict[str, Any]] = {}
    if options.contexts:
        for sync in syncs + latent:
            contexts[sync.id] = sync_context(tl, sync, options.context_window_us,
                                             options.context_max_events)
    info = _info(ref, tl)
    info.repairs = repairs
    info.step_markers = bool(tl.steps)
    if not tl.steps:
        info.steps = 1 if steps else 0
    return TraceResult(info, syncs, latent, steps, contexts)


def analyze(
    path: str | os.PathLike[str],
    *,
    source_roots: Sequence[str] = (),
    path_map: Sequence[tuple[str, str] | str] = (),
    **kw: Any,
) -> Report:
    """Analyse a trace file, a run folder or a logdir into one ``Report``.

    Per-file problems end up in ``TraceInfo.error`` (and ``Summary.error_count``); a path
    that does not exist or holds no trace raises ``NoTracesError``.
    """
    from tb_syncfinder.discovery import TraceNotFoundError, find_traces

    path = os.fspath(path)
    options = Options(source_roots=tuple(source_roots), path_map=tuple(path_map), **kw)
    try:
        refs = find_traces(path)
    except TraceNotFoundError as exc:
        raise NoTracesError(path, exc.reason) from exc
    if not refs:
        raise NoTracesError(
            path, "no PyTorch profiler traces found (*.pt.trace.json[.gz] or trace_view.json)"
        )
    resolver = options.resolver()
    results = [analyze_trace(ref, options, resolver) for ref in refs]
    return build_report(results)
