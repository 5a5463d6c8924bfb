"""The pipeline: the only place that strings the stages together.

Per trace (``analyze_trace``): read -> timeline -> detect -> attribute -> resolve source
-> cost -> what-if replay (``whatif.replay_stage``) -> build each ``Sync`` once -> step
stats (and the detail-view contexts while the timeline is in memory). It never raises for
a bad file: ``TraceResult.info.error`` says why, so one broken trace never hides the
others. Per job (``report_runs``): the results of one or more runs aggregated into
reports. ``analyze_runs`` does both over a list of traces, for the CLI; the plugin runs
``analyze_trace`` in its own pool and ``report_runs`` on what it has loaded.
``analyze(path)`` is the one-call form over a file, run folder or logdir.
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from tb_syncfinder.aggregate import build_report, site_key
from tb_syncfinder.attribute import Attributor, LibraryCalls, library_roots
from tb_syncfinder.catalogue import (
    CONVERTED_COPY,
    HOST_READ_METHODS,
    HOST_TENSOR_FACTORIES,
    INDEX_PUT_IMPL,
    LATENT_METHODS_BY_LINE,
    LATENT_OPS_BY_LINE,
    LATENT_TENSOR_METHODS,
    NPU_NOT_REPLAYED,
    NPU_TASKS_NOT_LINKED,
    SCALAR_READBACK,
    TENSOR_TEXT_OP,
    converts_a_logged_value,
    ctc_waits_by_line,
    fix_frames,
    formats_tensor,
    in_host_only_library,
    is_collective_worker_sync,
    is_warmup_listed,
    library_fix,
    numpy_index_read,
    to_the_host,
)
from tb_syncfinder.collectives import is_job_rank
from tb_syncfinder.context import sync_contexts
from tb_syncfinder.cost import (
    FIX_WITH_STEP_SHARE,
    StepBounds,
    device_busy_by_step,
    host_event_counts,
    profiler_overhead_us,
    reads_right_after,
    step_stats,
    sync_cost,
)
from tb_syncfinder.detect import (
    Episode,
    detect_latent,
    detect_syncs,
    one_copy_per_chain,
    unjudged_uploads,
)
from tb_syncfinder.models import (
    KERNEL_CELL,
    Attribution,
    Frame,
    LibraryCopy,
    Report,
    RunsReport,
    Source,
    StepStats,
    Sync,
    SyncCost,
    TraceInfo,
    TraceRef,
    TraceResult,
    TraceSavings,
    UnrunSync,
    source_files_of,
    sync_id_prefix,
    tally_library_copies,
    unread_source_files,
)
from tb_syncfinder.reader import TraceReadError, explain_truncated, read_trace
from tb_syncfinder.source import (
    SourcePack,
    SourceResolver,
    parse_path_map,
    resolve_sources,
    with_source_packs,
)
from tb_syncfinder.timeline import OP, PYTHON, Timeline, build_timeline

if TYPE_CHECKING:
    from tb_syncfinder.summaries import SummaryStore
    from tb_syncfinder.whatif import TraceWhatIf

__all__ = [
    "NoTracesError",
    "Options",
    "TraceMapper",
    "TraceResult",
    "analyze",
    "analyze_runs",
    "analyze_trace",
    "map_locally",
    "report_runs",
]


class NoTracesError(FileNotFoundError):
    """The path does not exist or holds no trace: unusable input (CLI exit status 2)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class Options(msgspec.Struct):
    """What the analysis may use besides the trace."""

    source_roots: Sequence[str] = ()  # where to look for source files (default: cwd)
    path_map: Sequence[tuple[str, str] | str] = ()  # FROM=TO prefixes for moved sources
    context_window_us: float = 300.0  # timeline context either side of each sync
    context_max_events: int = 60  # per lane, for the dashboard's detail view
    contexts: bool = True  # compute TraceResult.contexts
    # Sources shipped by packages for traces recorded from them (the shells pass the demo's).
    source_packs: Sequence[SourcePack] = ()
    # The what-if replay stage (issue 11); off: every saving is the upper bound of cost.py.
    whatif: bool = True
    # A trace larger than this much JSON is analysed in windows of whole steps, one at a
    # time (``windows``): None sizes them from the memory available now, 0 never splits.
    window_bytes: int | None = None
    # The share of the memory available at analysis time that one analysis may count on,
    # for the automatic window size: the plugin's workers analyse traces side by side.
    memory_share: float = 1.0
    # The program's mean step time measured without the profiler (us): each replayed trace
    # is also replayed as the program runs without it (``whatif.unprofiled_savings``).
    unprofiled_step_us: float | None = None
    # In a trace without ProfilerStep markers, the ``record_function`` name (or shell
    # pattern) whose spans are the steps (``timeline.annotation_steps``); None: the whole
    # trace is one step, as before.
    step_annotation: str | None = None

    def resolver(self) -> SourceResolver:
        roots, path_map = with_source_packs(
            list(self.source_roots) or [os.getcwd()],
            parse_path_map(self.path_map),
            self.source_packs,
        )
        return SourceResolver(roots, path_map)


# numpy's bundled OpenBLAS starts a thread per core when numpy is imported, and they spin
# a while: 75 ms of CPU per process on 2 cores, over a second on 17 (numpy issue 29193).
# The analysis never calls BLAS, so the processes that only analyse (the CLI's report and
# compare, the plugin's workers) start it with one thread, unless the user set one.
BLAS_THREADS_ENV = {"OPENBLAS_NUM_THREADS": "1"}


def with_one_blas_thread(environ: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """``environ`` with ``BLAS_THREADS_ENV`` set where the user set nothing; returned."""
    for key, value in BLAS_THREADS_ENV.items():
        environ.setdefault(key, value)
    return environ


def _info(ref: TraceRef, tl: Timeline | None = None) -> TraceInfo:
    info = TraceInfo(path=ref.path, worker=ref.worker, span=ref.span, run=ref.run)
    if tl is not None:
        info.device = tl.device_kind
        info.device_name = tl.device_name
        info.steps = len({s.number for s in tl.steps}) or (
            0 if tl.only_closing_step or not tl.records_work else 1
        )
        info.has_stacks = tl.has_stacks
        info.has_gpu_activity = tl.has_gpu_activity
        info.has_runtime = tl.has_runtime
        info.event_count = tl.event_count
        info.torch_version = tl.torch_version
        info.steps_from_annotation = tl.steps_from_annotation
        info.step_annotation_names = list(tl.step_annotation_names)
        if tl.step_annotation_hint is not None:
            info.step_annotation_hint, info.step_annotation_hint_count = tl.step_annotation_hint
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
    resolver = (resolver or options.resolver()).beside(ref.path)
    try:
        window_bytes = _window_for(ref.path, options)
        if window_bytes:
            windowed = _analyze_in_windows(ref, options, resolver, window_bytes)
            if windowed is not None:
                return windowed
        data = read_trace(ref.path)
    except TraceReadError as exc:
        info = _info(ref)
        info.error = explain_truncated(ref.path, exc.reason)
        return TraceResult(info)
    except Exception as exc:  # noqa: BLE001 - a bug on one odd trace must not hide others
        info = _info(ref)
        info.error = f"analysis failed: {type(exc).__name__}: {exc}"
        return TraceResult(info)
    try:
        return _analyze_data(ref, data, options, resolver)
    except Exception as exc:  # noqa: BLE001 - a bug on one odd trace must not hide others
        info = _info(ref)
        info.error = f"analysis failed: {type(exc).__name__}: {exc}"
        return TraceResult(info)


def _window_for(path: str, options: Options) -> int | None:
    """The window size if the file may hold more JSON than one window, else None. Cheap:
    a stat, and for a gzip file its trailer; a small file never imports ``windows``."""
    if options.window_bytes == 0:
        return None
    try:
        size = os.path.getsize(path)
    except OSError:
        return None  # the whole read says what is wrong with it (or reads the URL)
    if size < 8 << 20 and options.window_bytes is None:
        return None  # small: never split on this machine's memory
    from tb_syncfinder.windows import auto_window_bytes, may_need_windows

    window_bytes = options.window_bytes or auto_window_bytes(options.memory_share)
    return window_bytes if may_need_windows(path, window_bytes) else None


def _analyze_in_windows(
    ref: TraceRef, options: Options, resolver: SourceResolver, window_bytes: int
) -> TraceResult | None:
    """A trace larger than the memory budget, one window of whole steps at a time
    (``windows``); None when it fits in one window after all, or has too few steps."""
    from tb_syncfinder import windows

    found = windows.scan(ref.path)
    bounds = windows.plan(found, window_bytes)
    found.starts = found.starts[:0]  # 8 bytes per event: not needed past the plan
    if not bounds:
        return None
    import logging

    log = logging.getLogger(__name__)
    if options.window_bytes:
        why = "the window size asked for"
    else:
        budget = windows.memory_budget()
        share = options.memory_share
        why = "the memory budget"
        if budget is not None:
            room = windows.size_text(budget[0] * share)
            why = f"its analysis whole would not fit in the {room} that {budget[1]} leaves"
            if share < 1:
                why += f" to each of {round(1 / share)} analyses side by side"
    log.info(
        "%s: %s of JSON, analysed in %d windows of about %s of whole steps (%s); "
        "its windows are written to %s first",
        ref.path,
        windows.size_text(found.json_bytes),
        len(bounds) + 1,
        windows.size_text(window_bytes),
        why,
        os.environ.get("TMPDIR") or "the temporary folder",
    )
    # The what-ifs' state at the end of each window, for the next (``whatif.replay``);
    # made first: its import of the replay (and numpy) is no time to hold the windows
    # outside the ``try`` that removes them.
    carry = _replay_carry() if options.whatif else None
    # Which libraries ran before each window (a library's first call, ``first_call_of``).
    library_calls = LibraryCalls()
    results: list[TraceResult] = []
    parts = windows.split(ref.path, found, bounds)
    try:
        first_id = 0
        for window_path, core in zip(parts.paths, parts.cores, strict=True):
            data = read_trace(window_path)
            os.remove(window_path)  # the disk it took, back before the next window
            data.path = ref.path
            result = _analyze_data(
                ref,
                data,
                options,
                resolver,
                first_id=first_id,
                core=core,
                carry=carry,
                library_calls=library_calls,
            )
            del data
            # Ids numbered on: every episode got one (syncs, latent and those kept apart).
            first_id += len(result.syncs) + len(result.latent)
            first_id += len(result.profiler_overhead) + len(result.warmup_allocator)
            first_id += len(result.collective_worker)
            results.append(result)
            log.info("%s: window %d of %d analysed", ref.path, len(results), len(parts.paths))
    finally:
        parts.close()
    note = windows.window_note(
        len(results),
        window_bytes,
        asked=bool(options.window_bytes),
        replayed=any(r.savings.method == "replay" for r in results),
    )
    # ``merge`` makes the trace's what-if figures anew: the profiler's overhead added up
    # here (no "fix together" figures: those need a whole trace's replay).
    host_events = sum(r.savings.host_events for r in results)
    python_events = sum(r.savings.python_events for r in results)
    busy_parts = [r.savings.device_busy_us for r in results if r.savings.device_busy_us is not None]
    merged = windows.merge(results, note, parts.cores)
    # Each window stamped the notebooks by the trace's cells seen up to it: by all of them.
    notebooks = [f for f, stamp in merged.source_stamps.items() if stamp and len(stamp) > 3]
    merged.source_stamps.update(resolver.notebook_stamps(notebooks))
    merged.savings.host_events = host_events
    merged.savings.python_events = python_events
    merged.savings.device_busy_us = sum(busy_parts) if busy_parts else None
    _set_profiler_info(merged.info, merged.savings, len(merged.steps))
    merged.info.windows = len(results)
    merged.info.window_note = note
    merged.info.event_count = found.entries
    merged.info.repairs = list(found.repairs) + [
        r for r in merged.info.repairs if r not in found.repairs
    ]
    return merged


def _on_collective_worker(
    episodes: Sequence[Episode], attributions: Sequence[Attribution]
) -> list[bool]:
    """Per episode, whether it is a communication library's worker waiting for its own
    copies (``catalogue.is_collective_worker_sync``); each thread's names and whether it
    runs Python read once, and only for a thread that has such a candidate. (Whether a
    thread runs Python, asked per sync, was a pass over the thread's nodes each: on a
    trace without stacks, 4.6 s of 18,000 syncs.)"""
    names: dict[int, set[str]] = {}
    runs_python: dict[int, bool] = {}

    def names_of(thread: Any) -> set[str]:
        if id(thread) not in names:
            names[id(thread)] = {node.name for node in thread.nodes}
        return names[id(thread)]

    def python_in(thread: Any) -> bool:
        if id(thread) not in runs_python:
            runs_python[id(thread)] = PYTHON in thread.kinds
        return runs_python[id(thread)]

    return [
        not e.latent
        and is_collective_worker_sync(
            a.annotations, a.op_chain, python_in(e.thread), lambda t=e.thread: names_of(t)
        )
        for e, a in zip(episodes, attributions, strict=True)
    ]


def _replay_carry() -> Any:
    from tb_syncfinder.whatif import ReplayCarry

    return ReplayCarry()


def _build_sync(
    episode: Episode,
    attribution: Attribution,
    source: Source | None,
    cost: SyncCost,
    trace: str,
    sync_id: str,
    key: str,
    saving: float | None,
) -> Sync:
    op = _operator(episode, attribution)
    return Sync(
        kind=episode.kind,
        api=attribution.api,
        apis=attribution.apis,
        op=op,
        trigger_op=attribution.op_chain[-1] if attribution.op_chain else None,
        step=attribution.step,
        thread=attribution.thread,
        ts_us=attribution.ts_us,
        host_wait_us=cost.host_wait_us,
        gpu_idle_after_us=cost.gpu_idle_after_us,
        annotations=attribution.annotations,
        module=attribution.module,
        stack=attribution.stack,
        source=source,
        trace=trace,
        id=sync_id,
        op_chain=attribution.op_chain,
        end_us=attribution.end_us,
        device_id=cost.device_id,
        bytes=attribution.bytes,
        latent=episode.latent,
        site_key=key,
        forward_op=attribution.forward_op,
        forward_stack=attribution.forward_stack,
        profiler_overhead=attribution.profiler_overhead,
        # Without a replay: the sync's own interval of the bound (wait, then bubble).
        predicted_saving_us=(
            cost.host_wait_us + cost.gpu_idle_after_us if saving is None else saving
        ),
        saving_method="bound" if saving is None else "replay",
        copy_direction_guessed=episode.direction_guessed,
        first_call_of=attribution.first_call_of,
    )


def _site_key(
    episode: Episode,
    attribution: Attribution,
    source: Source | None,
    as_text: bool = False,
) -> str:
    op = TENSOR_TEXT_OP if as_text else _operator(episode, attribution)
    fixed_at = None
    if source is not None and source.library is not None:
        found = library_fix(
            fix_frames(attribution.stack, attribution.forward_stack), attribution.op_chain
        )
        fixed_at = found[1] if found is not None and found[0].keys_site else None
    return site_key(source, op, attribution.api, episode.kind, fixed_at)


def _operator(episode: Episode, attribution: Attribution) -> str | None:
    """The sync's operator: the outermost of its call (``Episode.outer_op``: below the
    Python an autograd Function's operator holds, so that one read under two Functions,
    GPyTorch's ``Solve`` and none, is one site); for a recorded Tensor method with none
    (``.tolist()`` on the CPU), the one it runs on a GPU, so that a CPU run keys and names
    the line as a GPU run does."""
    if (
        not attribution.backward
        and episode.outer_op >= 0
        and episode.thread.kinds[episode.outer_op] == OP
    ):
        # (A backward's is its autograd node's, which keeps its reads apart from the
        # forward's of the same line: torchdiffeq's adjoint solve runs the same code.)
        return episode.thread.nodes[episode.outer_op].name
    if attribution.op_chain:
        return attribution.op_chain[0]
    if episode.method:
        return LATENT_TENSOR_METHODS[episode.method][1]
    return None


def _latent_where_it_may_sync(
    episodes: list[Episode], attributions: list[Attribution]
) -> tuple[list[Episode], list[Attribution], list[tuple[str, Attribution]]]:
    """A CPU-only trace's latent findings, less those that would wait for nothing on a GPU
    either: recorded Tensor method calls the user's code did not make itself (a library's
    ``.tolist()`` is of host tensors as often as not; ``catalogue.LATENT_TENSOR_METHODS``)
    and reads of host tensors by construction: data loading, an optimizer's step counter,
    a fused optimizer's CPU kernel (``catalogue.in_host_only_library``). Also returns the
    attributions of the first kind, the copies a library made, which are counted apart
    (``_library_copies``)."""
    kept: list[int] = []
    by_library: list[tuple[str, Attribution]] = []
    for n, (episode, attribution) in enumerate(zip(episodes, attributions, strict=True)):
        if in_host_only_library(
            ((frame.file, frame.func) for frame in attribution.stack), attribution.op_chain
        ):
            continue
        if attribution.forward_assigns_number and INDEX_PUT_IMPL in attribution.op_chain:
            # The backward of ``x[mask] = number``: a fill with a host number on CUDA too,
            # as its forward is (``detect.assigns_a_host_number``).
            continue
        if (
            not episode.method
            or attribution.called == episode.method
            # The user's ``.cpu()`` of a container that moves each tensor with ``.to()``
            # (TensorDict's: TorchRL's ``replay_buffer.extend(data_view.cpu())``).
            or (attribution.called == "cpu" and episode.method == "to")
            # A logger's conversion of the value the user's line gave it.
            or converts_a_logged_value((frame.file, frame.func) for frame in attribution.stack)
        ):
            kept.append(n)
        elif episode.after_cpu < 0 and not formats_tensor(
            (frame.file, frame.func) for frame in attribution.stack
        ):
            # (A ``.tolist()`` right after a ``.cpu()`` is that copy's: ``x.cpu().tolist()``
            # is one copy, PyG's ``unbatch_edge_index`` made one a call.)
            by_library.append((episode.method, attribution))
    return [episodes[n] for n in kept], [attributions[n] for n in kept], by_library


def _library_copies(
    resolver: SourceResolver, copies: list[tuple[str, Attribution]]
) -> list[LibraryCopy]:
    """The copies a library made in its own code (``_latent_where_it_may_sync``), by the
    library's line and the user's line that called it, most first: ``.cpu()`` and
    ``.tolist()``, and a ``.to()`` only where the library's line names the host (a library's
    ``.to(device)`` is an upload as often as not)."""
    # A library's ``.to()`` counts only where its line names the host: files with no such
    # line are passed over before any line is resolved.
    copies = [
        (method, attribution)
        for method, attribution in copies
        if method not in LATENT_METHODS_BY_LINE
        or resolver.may_copy_to_the_host(
            next((f.file for f in attribution.stack if f.file != "<built-in>"), "")
        )
    ]
    if not copies:
        return []
    sources = resolve_sources(resolver, [attribution for _method, attribution in copies])
    found: list[LibraryCopy] = []
    steps_of: dict[tuple[Any, ...], set[int]] = {}  # a place's copies' steps
    for (method, attribution), source in zip(copies, sources, strict=True):
        library = source.library if source is not None else None
        if source is None or library is None or not library.file:
            continue  # no user line called it, or no library line: nothing to name
        if method in LATENT_METHODS_BY_LINE and not (
            library.line_exact and to_the_host(resolver.line_text(library) or "")
        ):
            continue
        found.append(
            LibraryCopy(
                library.file,
                # An inexact line is the one the trace recorded for the frame (its def line,
                # or where it was when profiling started): by function only, or one call's
                # copies split in two (SB3's rollout read at 162* and 192*).
                library.line if library.line_exact else None,
                library.func or "",
                library.line_exact,
                method,
                1,
                source.file,
                source.line,
                source.func,
                source.line_exact,
            )
        )
        if attribution.step is not None:
            steps_of.setdefault(found[-1].place(), set()).add(attribution.step)
    tallied = tally_library_copies(found)
    for copy in tallied:
        copy.steps_with_copies = len(steps_of.get(copy.place(), ()))
    return tallied


def _latent_copies_by_line(
    resolver: SourceResolver,
    episodes: list[Episode],
    attributions: list[Attribution],
    sources: list[Source | None],
) -> tuple[list[Episode], list[Attribution], list[Source | None]]:
    """The latent findings, less recorded ``.to()`` calls whose exact source line does not
    name the host (``catalogue.to_the_host``): ``.to(device)`` is an upload as often as not,
    and a CPU trace says nothing of where a tensor would live; less CTC losses whose
    line does not show the mean reduction, the one that waits whatever kernel runs it; and
    less reads of tensors the code made on the host from Python data (``source.
    reads_host_made_tensor``: ``torch.tensor(list(self.deque)).median().item()``) or of
    host-made indices into NumPy data (``source.indexes_host_values``), which wait for no
    GPU on a GPU run either."""
    kept = [
        n
        for n, (episode, attribution, source) in enumerate(
            zip(episodes, attributions, sources, strict=True)
        )
        if (
            episode.method not in LATENT_METHODS_BY_LINE
            or to_the_host(resolver.line_text(source) or "")
            or resolver.copies_to_the_host_by_name(source)
            # The ``.to()`` a container's ``.cpu()`` makes of each tensor (TensorDict's).
            or attribution.called == "cpu"
        )
        and (
            LATENT_OPS_BY_LINE.isdisjoint(attribution.op_chain)
            or ctc_waits_by_line(resolver.line_text(source) or "")
            or resolver.calls_a_mean_ctc_loss_module(source)
        )
        and not (
            # The read itself (``.item()``; or a read without a call frame: ``int(t)``, ``if
            # t:``), not a factory's reads of the tensors it is given: ``torch.tensor(losses)``
            # of GPU scalars reads each of them.
            (
                (
                    attribution.called in HOST_READ_METHODS
                    or (attribution.called is None and episode.kind == SCALAR_READBACK)
                )
                # ``x.cpu().item()``: one copy, named by both calls (``one_copy_per_chain``).
                and episode.after_cpu < 0
                and resolver.reads_host_made(source)
            )
            # Or ``torch.tensor([R])``'s read of each tensor its written-out list holds,
            # where each is made on the host (actor_critic's returns).
            or (
                attribution.called in HOST_TENSOR_FACTORIES
                and episode.kind == SCALAR_READBACK
                and resolver.reads_host_made(source, by_factory=True)
            )
            # Or a print of host values only (a ``.cpu()`` copy made on the line: the copy
            # is the read, its own episode).
            or (
                formats_tensor((frame.file, frame.func) for frame in attribution.stack)
                and resolver.prints_host_values(source)
            )
            # Or anything on a line that reads host values only (a mask or a library's
            # read on a loader's batch before its ``.to(device)``: PyG's ``to_undirected
            # (data.edge_index)``, 30 of a run's 70 latent syncs).
            or resolver.touches_only_host(source)
            # Or the library's own line that synced reads host values only (OpenCLIP's
            # ``torch.where(ranking == ground_truth)`` of a ``.cpu()`` result's ranking).
            or (source is not None and resolver.touches_only_host(source.library))
            # Or a line that runs only where its tensor is on the host (torchmetrics'
            # ``if tensor.device == torch.device("cpu"):`` branch; its GPU path reads none).
            or resolver.runs_on_the_host_only(source)
            or (source is not None and resolver.runs_on_the_host_only(source.library))
            # Or a library's own read (the innermost frame a built-in ``item``) of a tensor
            # it made on the host: timm's scheduler draws its learning-rate noise with a CPU
            # generator and reads it, 14 of a run's 19 latent syncs.
            or (
                source is not None
                and source.library is not None
                and bool(attribution.stack)
                and (
                    attribution.stack[0].func in HOST_READ_METHODS
                    # Or read without a call in the library's own frame (an index:
                    # Segment Anything's ``[masks[i] for i in keep]`` of host indices).
                    or (
                        episode.kind == SCALAR_READBACK
                        and attribution.stack[0].file != "<built-in>"
                        and not attribution.stack[0].user
                    )
                )
                and resolver.reads_host_made(source.library)
            )
        )
        and not (
            # A NumPy array indexed with tensors drawn on the host (nanoGPT's ``get_batch``).
            source is not None
            and source.library is not None
            and numpy_index_read(source.library.file, source.library.func)
            and resolver.indexes_host_made(source)
        )
    ]
    if len(kept) == len(episodes):
        return episodes, attributions, sources
    return (
        [episodes[n] for n in kept],
        [attributions[n] for n in kept],
        [sources[n] for n in kept],
    )


def _trace_savings(
    whatif: TraceWhatIf | None,
    syncs: list[Sync],
    steps: list[StepStats],
    step_markers: bool,
    windowed: bool = False,
    device_kind: str | None = None,
    device_busy: Mapping[int, float] | None = None,
) -> TraceSavings:
    """The what-if stage's figures for the report: the replay's, else the bound's with the
    reason the replay was not used (``whatif`` None: the stage did not run). ``windowed``:
    a window's, replayed with a ``whatif.ReplayCarry``. ``device_kind`` "npu": the device
    works, read for its idle time where the trace holds its tasks (``device_busy``: its
    work per step, which bounds what a step can lose) and not replayed
    (``catalogue.NPU_TASKS_NOT_LINKED``), else not in the trace at all
    (``catalogue.NPU_NOT_REPLAYED``): not absent."""
    device_activity = device_busy is not None
    groups: dict[str, list[int]] = {}
    for index, sync in enumerate(syncs):
        groups.setdefault(sync.site_key, []).append(index)
    result = whatif.result if whatif is not None else None
    if result is None or not result.available:
        if result is None:
            reason = "no device activity: nothing to replay"
            if device_kind == "npu":
                reason = NPU_TASKS_NOT_LINKED if device_activity else NPU_NOT_REPLAYED
        else:
            reason = f"replay unavailable: {result.reason}"
        bounds = StepBounds(steps, device_busy)
        bounds.cap_each(syncs, step_markers)
        return TraceSavings(
            method="bound",
            reason=reason,
            device_idle_read=not (result is None and device_kind == "npu" and not device_activity),
            all_syncs_us=bounds.saving_us(syncs, step_markers),
            sites={
                key: bounds.saving_us([syncs[i] for i in members], step_markers)
                for key, members in groups.items()
            },
            # The device's work in the reported steps (the bound of a step without the
            # profiler: no step is shorter than it).
            device_busy_us=(
                sum(device_busy.get(st.step, 0.0) for st in steps)
                if device_busy is not None
                else None
            ),
        )
    sites = {}
    bound_sites = {}
    if windowed:
        # Every site was replayed as a group from the state the window before left,
        # those of earlier windows too (their state goes on): over this window's steps.
        sites = {key: saving.total_us for key, saving in result.group_savings.items()}
    for key, members in groups.items():
        if key in sites:
            continue
        # One sync: its own replayed saving (``syncs`` holds the program's syncs only, so
        # its indices are not the replay's episode indices).
        group = result.group_savings.get(key)
        if len(members) == 1:
            only = syncs[members[0]]
            sites[key] = only.predicted_saving_us
            if only.saving_method == "bound":
                bound_sites[key] = "not replayed alone (past the replay budget of a long trace)"
        elif group is not None:
            sites[key] = group.total_us
        else:  # not replayed as a group: what its syncs save each alone, added up
            sites[key] = sum(syncs[m].predicted_saving_us for m in members)
            bound_sites[key] = "not replayed as a group: its syncs' own savings added up"
    return TraceSavings(
        method="replay",
        reason=None,
        all_syncs_us=result.all_syncs.total_us,
        sites=sites,
        window_us=result.window_us,
        gpu_idle_us=result.gpu_idle_us,
        gpu_idle_from_syncs_us=result.gpu_idle_from_syncs_us,
        fidelity_error=result.fidelity_error,
        notes=list(result.notes),
        bound_sites=bound_sites,
    )


def _profiler_figures(
    savings: TraceSavings,
    tl: Timeline,
    whatif: TraceWhatIf | None,
    core_steps: set[int] | None,
) -> None:
    """The profiler's own overhead in ``savings``: the host events it recorded in the
    reported steps and the device's busy time in them (per step, the union of the device
    work launched in it), where the replay linked that work to its launches; unknown (None)
    otherwise: a trace whose correlations were lost reaches little of its device work."""
    savings.host_events, savings.python_events = host_event_counts(tl, core_steps)
    result = whatif.result if whatif is not None else None
    if savings.method == "replay" and result is not None:
        savings.device_busy_us = result.device_busy_us


def _set_profiler_info(info: TraceInfo, savings: TraceSavings, step_count: int) -> None:
    """``TraceInfo``'s per-step figures of the profiler's overhead, from ``savings``."""
    steps = max(step_count, 1)
    info.host_events_per_step = savings.host_events / steps
    info.profiler_overhead_per_step_us = (
        profiler_overhead_us(savings.host_events, savings.python_events) / steps
    )
    busy = savings.device_busy_us
    info.device_busy_per_step_us = busy / steps if busy is not None and step_count else None


def _unprofiled(
    tl: Timeline,
    whatif: TraceWhatIf,
    episodes: Sequence[Episode],
    syncs: list[Sync],
    episode_of: dict[str, int],
    step_us: float,
    core: tuple[float, float] | None,
) -> Any:
    """``whatif.unprofiled_savings`` for the program's syncs and sites (a window of a larger
    trace is not fitted: its steps are not the whole program's)."""
    from tb_syncfinder.whatif import UnprofiledSavings, unprofiled_savings

    result = whatif.result
    if core is not None or result is None or not result.available:
        why = (
            "analysed in windows (--window-mb 0 reads a trace whole, if memory allows)"
            if core is not None
            else "not replayed"
        )
        return UnprofiledSavings(step_us=step_us, reason=f"not fitted: {why}")
    counted = set(result.counted)
    sites: dict[str, list[int]] = {}
    for sync in syncs:
        index = episode_of.get(sync.id)
        if index is not None and index in counted:
            sites.setdefault(sync.site_key, []).append(index)
    # The replay's own graph: its base values are back as built after every what-if.
    graph = result._graph
    return unprofiled_savings(tl, episodes, sorted(counted), sites, step_us, graph)


def _fix_together(
    savings: TraceSavings,
    result: Any,
    syncs: list[Sync],
    episode_of: dict[str, int],
    steps: list[StepStats],
) -> None:
    """What fixing each site saves with the others fixed too, and the partner of a site
    that saves much less alone (``whatif.fix_together``), into ``savings``."""
    if not result.available:
        return
    from tb_syncfinder.whatif import fix_together

    counted = set(result.counted)
    sites: dict[str, list[int]] = {}
    wait: dict[str, float] = {}
    for sync in syncs:
        index = episode_of.get(sync.id)
        if index is None or index not in counted:
            continue
        sites.setdefault(sync.site_key, []).append(index)
        wait[sync.site_key] = wait.get(sync.site_key, 0.0) + sync.host_wait_us
    by_wait = sorted(sites, key=lambda key: -wait[key])
    own = {key: us for key, us in savings.sites.items() if key not in savings.bound_sites}
    wall = sum(st.wall_time_us or st.step_time_us for st in steps)
    found = fix_together(result, sites, by_wait, own, FIX_WITH_STEP_SHARE * wall)
    savings.with_others = {str(key): us for key, us in found.with_others.items()}
    savings.fix_with = {
        str(key): (str(other), both) for key, (other, both) in found.partners.items()
    }


def _analyze_data(
    ref: TraceRef,
    data: Any,
    options: Options,
    resolver: SourceResolver,
    first_id: int = 0,
    core: tuple[float, float] | None = None,
    carry: Any = None,
    library_calls: LibraryCalls | None = None,
) -> TraceResult:
    """``first_id``: the number of the first sync's id (a window's: after the windows
    before it, ``windows``). ``core``: a window's own time range [start, end): what lies
    outside it (a step each side, ``windows.split``) is context only, reported by the
    window before or after: its syncs wait and are removed with the window's own in the
    replay, and nothing of it is reported here (a rank's collectives, steps and waits are
    cut to it in ``windows.merge``, which knows the windows after). ``carry``: the
    replay's state from the window before (``whatif.ReplayCarry``), updated for the next;
    ``library_calls`` likewise, the libraries called in the windows before."""
    repairs = list(getattr(data, "repairs", ()))
    distributed_info = getattr(data, "distributed_info", None)
    base_time_ns = getattr(data, "base_time_ns", None)
    host_name = getattr(data, "host_name", None)
    tl = build_timeline(data, options.step_annotation)
    if getattr(data, "by_kind", None) is not None:
        data.by_kind = None  # the caller still holds ``data``: not these lists too
    del data  # the events live on in the timeline only until this function returns
    attribute = Attributor(
        tl, options.source_packs, library_calls, library_roots(options.source_roots)
    )
    prefix = sync_id_prefix(ref.path)
    built: list[list[Sync]] = []
    # None: no replay (switched off, or no device activity to replay). The stage, and numpy
    # with it, is imported only for a trace it runs on: a CPU trace starts faster.
    whatif: TraceWhatIf | None = None
    core_steps = None
    if core is not None:
        core_steps = {step.number for step in tl.steps if core[0] <= step.ts < core[1]}
    # The replay's episode index of each blocking sync (the findings skip those listed apart).
    episode_of: dict[str, int] = {}
    replayed_episodes: list[Episode] = []
    blocking = detect_syncs(tl)
    uploads = unjudged_uploads(tl, blocking, core)
    may_sync = detect_latent(tl)
    batches = [(episodes, [attribute(e) for e in episodes]) for episodes in (blocking, may_sync)]
    # Every frame is made by now: of copies of a notebook, the one holding the trace's cells.
    resolver.prefer_cells(frame.file for frame in attribute.frames_made())
    # Of different files of one recorded name, the one holding the functions the trace ran.
    resolver.prefer_copies(attribute.frames_made())
    # An unread file's frame running when profiling started: at its function's def line.
    resolver.prefer_def_lines(attribute.entered_lines())
    library_copies: list[LibraryCopy] = []
    for episodes, attributions in batches:
        if episodes and episodes[0].latent:
            episodes, attributions, by_library = _latent_where_it_may_sync(episodes, attributions)
            if core is not None:
                # A window counts the copies of its own range: the windows either side
                # count those in its context (five windows made 1.0 a step 2.6 in a walk).
                by_library = [(m, a) for m, a in by_library if core[0] <= a.ts_us < core[1]]
            library_copies = _library_copies(resolver, by_library)
        sources = resolve_sources(resolver, attributions)
        if episodes and episodes[0].latent:
            episodes, attributions, sources = _latent_copies_by_line(
                resolver, episodes, attributions, sources
            )
        if any(episode.after_cpu >= 0 for episode in episodes):
            episodes, attributions, sources = one_copy_per_chain(
                episodes, attributions, sources, resolver.line_text
            )
        # A tensor turned into text (print, str, f-string, logging) reads values back
        # through several operators: one scalar read-back at the print, one site.
        as_text = [
            formats_tensor((frame.file, frame.func) for frame in a.stack) for a in attributions
        ]
        for episode, text in zip(episodes, as_text, strict=True):
            if text:
                episode.kind = SCALAR_READBACK
        on_worker = _on_collective_worker(episodes, attributions)
        # Before the window's own range: context (the window before reports it); after it
        # likewise (the window after).
        place = [0] * len(episodes)
        if core is not None:
            place = [(a.ts_us >= core[1]) - (a.ts_us < core[0]) for a in attributions]
        costs = [sync_cost(tl, e, a) for e, a in zip(episodes, attributions, strict=True)]
        keys = [
            _site_key(e, a, src, text)
            for e, a, src, text in zip(episodes, attributions, sources, as_text, strict=True)
        ]
        savings: list[float | None] = [None] * len(episodes)
        # A window without device work still replays what the windows before it left
        # running (a device queue, a host ahead of it).
        # An NPU's tasks are read for its idle time only: the replay's graph does not follow
        # torch_npu's task queue, through which the calls launch them.
        replayable = (tl.has_gpu_activity and tl.device_kind != "npu") or (
            carry is not None and bool(carry.states)
        )
        if not built and options.whatif and replayable:  # blocking ones only
            from tb_syncfinder.whatif import replay_stage

            # Syncs listed apart (the profiler's own, warm-up allocations) are replayed
            # each alone but counted in no site's group and not in "every sync removed".
            # So are a window's syncs after its range; those before it are removed with
            # its own for "every sync removed" and their site's group (the window before
            # left their state in ``carry``; without one, in no site's group).
            apart = [
                n
                for n, (e, a) in enumerate(zip(episodes, attributions, strict=True))
                if a.profiler_overhead
                or is_warmup_listed(e.kind, a.annotations)
                or on_worker[n]
                or place[n] > 0
            ]
            replay_keys = list(keys)
            for n in apart:
                replay_keys[n] = f"{keys[n]}#apart{n}"
            for n, where in enumerate(place):
                if where < 0 and carry is None:
                    replay_keys[n] = f"{keys[n]}#before{n}"
            whatif = replay_stage(
                tl, episodes, replay_keys, listed_apart=apart, span_steps=core_steps, carry=carry
            )
            replayed_episodes = episodes
            if whatif.episode_us:
                savings = list(whatif.episode_us)
        stages = zip(episodes, attributions, sources, costs, keys, savings, place, strict=True)
        # A latent read right after another with nothing queued between waits for nothing.
        read_before = None
        if episodes and episodes[0].latent:
            read_before = reads_right_after(episodes, _copy_conversions(sources, resolver))
        ids: dict[int, str] = {}
        found: list[Sync] = []
        for n, (e, a, src, c, key, saving, where) in enumerate(stages):
            if where:
                continue
            sync_id = ids[n] = f"{prefix}-{first_id + len(found)}"
            sync = _build_sync(e, a, src, c, ref.path, sync_id, key, saving)
            sync.collective_worker = on_worker[n]
            if read_before is not None and (before := read_before[n]) is not None:
                sync.after_read = ids.get(before)
            found.append(sync)
            if not built:
                episode_of[sync_id] = n
        built.append(found)
        first_id += len(found)
    # The profiler's own waits (prof.step(), profiler stop) are its cost, not the program's,
    # allocator syncs in warm-up regions are expected once, and a communication library's
    # worker waiting for its own copies blocks no thread of the program: all kept apart, out
    # of the findings and the step totals.
    for found in built:
        for sync in found:
            sync.warmup_allocator = not sync.profiler_overhead and is_warmup_listed(
                sync.kind, sync.annotations
            )
            if sync.profiler_overhead or sync.warmup_allocator:
                sync.collective_worker = False
    cell_notebooks = _frames_in_cells(resolver, attribute.frames_made())
    overhead = [s for found in built for s in found if s.profiler_overhead]
    warmup = [s for found in built for s in found if s.warmup_allocator]
    worker = [s for found in built for s in found if s.collective_worker]
    syncs, latent = (
        [s for s in found if not (s.profiler_overhead or s.warmup_allocator or s.collective_worker)]
        for found in built
    )
    listed = {s.id for s in latent}
    for sync in latent:
        if sync.after_read not in listed:
            sync.after_read = None  # the read before is listed apart: not one of the user's
    steps = step_stats(
        tl, syncs, whatif.steps if whatif else {}, whatif.per_step_us if whatif else {}
    )
    if core_steps is not None:
        steps = [step for step in steps if step.step in core_steps]
    # An NPU's tasks, read but not replayed: their work per step bounds what a step loses.
    npu_busy = device_busy_by_step(tl) if tl.device_kind == "npu" and tl.has_gpu_activity else None
    trace_savings = _trace_savings(
        whatif, syncs, steps, bool(tl.steps), carry is not None, tl.device_kind, npu_busy
    )
    _profiler_figures(trace_savings, tl, whatif, core_steps)
    if core is None and whatif is not None and whatif.result is not None and syncs:
        _fix_together(trace_savings, whatif.result, syncs, episode_of, steps)
    unprofiled = None
    if options.unprofiled_step_us and trace_savings.method == "replay" and whatif is not None:
        unprofiled = _unprofiled(
            tl, whatif, replayed_episodes, syncs, episode_of, options.unprofiled_step_us, core
        )
        if unprofiled.all_syncs_per_step_us is not None:
            # Per step (the typical step's saving) times the steps: the run's figure is
            # divided by its steps again, as the profiled one is.
            n_steps = max(len(steps), 1)
            trace_savings.unprofiled_all_syncs_us = unprofiled.all_syncs_per_step_us * n_steps
            trace_savings.unprofiled_sites = {
                key: us * n_steps for key, us in unprofiled.groups.items()
            }
    contexts: dict[str, dict[str, Any]] = {}
    if options.contexts:
        contexts = sync_contexts(
            tl,
            syncs + latent + overhead + warmup,
            options.context_window_us,
            options.context_max_events,
        )
    if core is not None:
        attribute.note_library_calls()
    info = _info(ref, tl)
    if not (tl.has_gpu_activity or tl.has_runtime) and tl.device_kind in (None, "cpu"):
        # Nothing ran on a device, so no explicit synchronize did: read from the source.
        lines_run: dict[tuple[str, str], set[int]] = {}
        for sync in latent:
            # The user's line and the library's it ran in: each marks a loop that ran.
            for src in (sync.source, sync.source.library if sync.source else None):
                if src is not None and src.file and src.func:
                    lines = [src.line] if src.line_exact and src.line else src.candidates
                    lines_run.setdefault((src.file, src.func), set()).update(lines)
        frames = attribute.frames_made()
        if not any(frame.user for frame in frames):
            # No sync came from the user's code (a loop that reads nothing): its functions
            # are read all the same, from the frames the trace shows running.
            frames = attribute.frames_run()
        info.unrun_syncs = resolver.unrun_syncs(frames, lines_run)
        info.unrun_syncs += resolver.unrun_library_syncs(
            attribute.library_functions_run(), lines_run
        )
        info.library_copies = library_copies
        if info.unrun_syncs:
            # A read just after one of them finds a GPU idle: it waits there first.
            after: dict[tuple[str, int | None, str], UnrunSync | None] = {}
            for sync in latent:
                src = sync.source
                if src is not None and src.line_exact:
                    key = (src.file, src.line, src.func)
                    if key not in after:
                        after[key] = resolver.sync_before(src, info.unrun_syncs)
                    src.after_sync = after[key]
    info.unjudged_uploads, info.unjudged_upload_host_us = uploads
    info.repairs = repairs
    info.step_markers = bool(tl.steps) or tl.only_closing_step
    if not tl.steps:
        info.steps = 1 if steps else 0
    elif core_steps is not None:
        info.steps = len(core_steps)
    info.saving_method = trace_savings.method
    info.saving_note = trace_savings.reason or ("; ".join(trace_savings.notes) or None)
    _set_profiler_info(info, trace_savings, len(steps))
    if unprofiled is not None:
        info.unprofiled_overhead_scale = unprofiled.scale
        info.unprofiled_note = unprofiled.reason
    rank = None
    if is_job_rank(distributed_info):  # the job stage's input, imported for a rank's trace
        from tb_syncfinder.jobs import rank_trace

        rank = rank_trace(
            tl, ref, distributed_info, syncs + latent, resolver, prefix, base_time_ns, host_name
        )
    if rank is not None and whatif is not None and whatif.result is not None and syncs:
        from tb_syncfinder.whatif import collective_earlier, retimed_collectives

        # Only here, while the replay's graph is alive: how much earlier each collective
        # of this rank starts without each sync, for the job stage's causes.
        rank.replayed_earlier = collective_earlier(
            whatif.result, rank.collectives, {sync.id: [episode_of[sync.id]] for sync in syncs}
        )
        retimed = retimed_collectives(whatif.result, rank.collectives)
        for collective in rank.collectives:
            collective.retimed = collective.index in retimed
    result = TraceResult(
        info,
        syncs,
        latent,
        steps,
        contexts,
        profiler_overhead=overhead,
        warmup_allocator=warmup,
        collective_worker=worker,
        rank=rank,
        savings=trace_savings,
    )
    read = resolver.read_stamps
    files = source_files_of(result)
    result.source_stamps = {f: read[f] for f in files if f in read}
    # A notebook by what it holds of the trace's cells (not its outputs, nor other cells).
    notebooks = {*cell_notebooks, *(f for f in files if f.endswith(".ipynb"))}
    if notebooks:
        result.source_stamps.update(resolver.notebook_stamps(notebooks))
    unread = unread_source_files(result)
    result.source_probes = resolver.probes(unread)
    if any(KERNEL_CELL.search(path.replace("\\", "/")) for path in unread):
        # A Jupyter cell no notebook held as it ran: its notebook saved since may.
        result.source_stamps.update(resolver.notebook_stamps())
    return result


def _copy_conversions(
    sources: Sequence[Source | None], resolver: SourceResolver
) -> list[str | None]:
    """Per read, the tensor method its exact line calls on the host copy it just made
    (``catalogue.CONVERTED_COPY``: ``.cpu().float()``), for ``reads_right_after``."""
    found: list[str | None] = []
    for source in sources:
        text = resolver.line_text(source) if source is not None else None
        match = CONVERTED_COPY.search(text) if text else None
        found.append(match.group(1) if match else None)
    return found


def _frames_in_cells(resolver: SourceResolver, frames: Sequence[Frame]) -> list[str]:
    """Each frame of a Jupyter cell's code given the notebook cell under the roots that
    holds it (``Frame.cell``: a function defined in one cell and called from another shows
    as ``train.ipynb In[3]``, not as ipykernel's file); the notebooks named."""
    notebooks: list[str] = []
    for frame in frames:
        if "ipykernel_" in frame.file:  # before the pattern: most frames are no cell's
            cell = resolver.frame_cell(frame.file)
            if cell is not None:
                frame.cell = cell
                notebooks.append(cell.notebook)
    return notebooks


def _run_report(members: Sequence[TraceResult]) -> Report:
    """One run's report; a run whose traces are ranks of a job goes through the job stage
    (``jobs.py``: syncs that waited for a late peer relabelled, job costs per site, the
    ``job`` object)."""
    if not any(m.rank is not None for m in members):
        return build_report(list(members))
    from tb_syncfinder.jobs import job_stage

    try:
        stage = job_stage(members)
        if stage is not None:
            report = build_report(stage.results)
            stage.annotate(report)
            return report
    except Exception as exc:  # a fault of the job stage: the run's traces are still reported
        import logging

        logging.getLogger(__name__).exception(
            "job stage failed for run %r", members[0].info.run or ""
        )
        report = build_report(list(members))
        failed = (
            f"the job stage failed ({type(exc).__name__}: {exc}), so the ranks' traces are "
            "reported each as its own, without the job view; please report this"
        )
        note = report.summary.saving_note
        report.summary.saving_note = f"{note}; {failed}" if note else failed
        return report
    return build_report(list(members))


@_without_gc  # 20,000 syncs' sites and steps: 0.22 s with the collections, 0.07 s without
def report_runs(results: Sequence[TraceResult]) -> RunsReport:
    """The job-level stages over analysed traces: one report per run (in the order the runs
    first appear) and, when there are several, all of them merged."""
    by_run: dict[str, list[TraceResult]] = {}
    for result in results:
        by_run.setdefault(result.info.run or "", []).append(result)
    runs = {name: _run_report(members) for name, members in by_run.items()}
    merged = next(iter(runs.values())) if len(runs) == 1 else build_report(list(results))
    return RunsReport(report=merged, runs=runs, results=list(results))


# A per-trace map: analyses ``refs`` (writing their summaries to ``store`` when given) and
# yields their results in any order, each as soon as it is done.
TraceMapper = Callable[
    [Sequence[TraceRef], "Options", "SummaryStore | None"], Iterator[TraceResult]
]


def map_locally(
    refs: Sequence[TraceRef], options: Options, store: SummaryStore | None = None
) -> Iterator[TraceResult]:
    """The per-trace stage in this process, one trace after the other."""
    resolver = options.resolver()
    for ref in refs:
        result = analyze_trace(ref, options, resolver)
        if store is not None:
            store.put(ref, result, options)
        yield result


def analyze_runs(
    refs: Sequence[TraceRef],
    options: Options | None = None,
    *,
    mapper: TraceMapper | None = None,
    summaries: SummaryStore | None = None,
    write_summaries: bool = False,
    on_result: Callable[[TraceResult, bool], None] | None = None,
) -> RunsReport:
    """Analyse each trace once, then report per run and merged.

    ``summaries``: valid per-trace summaries there are used instead of parsing (a summary
    made with other source options counts as missing); with ``write_summaries`` the traces
    analysed get one (with the detail-view contexts the plugin serves). ``mapper`` runs the
    per-trace stage (default: here, one after the other; ``tb_syncfinder.fanout`` maps on
    Ray). ``on_result(result, from_summary)`` hears of each trace as it is done.
    """
    from tb_syncfinder.summaries import summarised

    options = options or Options()
    if write_summaries and not options.contexts:
        options = msgspec.structs.replace(options, contexts=True)
    found: dict[str, TraceResult] = {}
    todo = list(refs)
    if summaries is not None:
        found, todo = summarised(refs, summaries, options)
        if on_result is not None:
            for ref in refs:
                if ref.path in found:
                    on_result(found[ref.path], True)
    if todo:
        mapped = (mapper or map_locally)(todo, options, summaries if write_summaries else None)
        for result in mapped:
            found[result.info.path] = result
            if on_result is not None:
                on_result(result, False)
    missing = [ref for ref in refs if ref.path not in found]
    for ref in missing:  # a mapper that lost a trace: say so rather than drop it
        found[ref.path] = TraceResult(
            TraceInfo(ref.path, ref.worker, ref.span, ref.run, error="analysis returned no result")
        )
    return report_runs([found[ref.path] for ref in refs])


def analyze(
    path: str | os.PathLike[str],
    *,
    source_roots: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] = (),
    path_map: str | Sequence[tuple[str, str] | str] = (),
    jobs: int | None = None,
    **kw: Any,
) -> Report:
    """Analyse a trace file, a run folder or a logdir into one ``Report``.

    ``source_roots``: the folders (or one folder) where source files are looked for
    (default: the working directory); ``path_map``: ``"FROM=TO"`` strings or (FROM, TO)
    pairs for sources recorded under another path (or one such string); ``jobs``: analysis
    processes of this machine for several traces (default: as ``tb-syncfinder report``
    decides, one per core where the traces are large; 1: in this process). Further keywords
    are ``Options`` fields: ``whatif`` (False: no replay), ``unprofiled_step_us`` (the
    step time measured without the profiler), ``window_bytes``, ``source_packs``.

    Per-file problems end up in ``TraceInfo.error`` (and ``Summary.error_count``); a path
    that does not exist or holds no trace raises ``NoTracesError``.
    """
    from tb_syncfinder.discovery import TraceNotFoundError, find_traces

    path = os.fspath(path)
    # A Report holds no detail-view contexts (only a TraceResult does): not computed
    # unless asked for.
    kw.setdefault("contexts", False)
    # One root or one FROM=TO given bare: tuple() of a string made a root of each of its
    # characters ("/" among them: the whole file system searched).
    if isinstance(source_roots, (str, os.PathLike)):
        source_roots = (source_roots,)
    if isinstance(path_map, str):
        path_map = (path_map,)
    unknown = sorted(set(kw) - set(Options.__struct_fields__))
    if unknown:
        raise TypeError(
            f"analyze() got an unexpected keyword argument {unknown[0]!r}; its options: "
            + ", ".join((*Options.__struct_fields__, "jobs"))
        )
    if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 0):
        raise ValueError(f"jobs: a whole number of processes, 0 or more (0: decide), not {jobs!r}")
    options = Options(
        source_roots=tuple(map(os.fspath, source_roots)), path_map=tuple(path_map), **kw
    )
    try:
        refs = find_traces(path)
    except TraceNotFoundError as exc:
        raise NoTracesError(path, exc.reason) from exc
    if not refs:
        raise NoTracesError(
            path, "no PyTorch profiler traces found (*.pt.trace.json[.gz] or trace_view.json)"
        )
    mapper = None
    if len(refs) > 1 and jobs != 1:
        from tb_syncfinder.fanout import process_mapper

        mapper = process_mapper(jobs)
    return analyze_runs(refs, options, mapper=mapper).report
