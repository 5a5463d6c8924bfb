"""Per-trace extraction of one rank's collectives, for the many-ranks stage (``ranks.py``).

Runs while a trace's ``Timeline`` is in memory and returns a ``RankTrace``: small, picklable
and free of raw events, because the plugin caches per-trace results with pickle and drops
the timeline. What a trace holds (``../shared/KINETO_NOTES.md``, "Many ranks"):

* ``distributedInfo``: rank, world size and, since 2024, ``pg_config`` (the process groups);
* the host enqueue of each collective: a ``record_param_comms`` cpu_op, usually inside a
  ``c10d::*`` op and around a ``nccl:*`` annotation; older traces have only ``nccl:*`` ops
  (sizes in ``Input Dims``); gloo jobs record ``c10d::*`` on the calling thread;
* its execution: an NCCL kernel (``ncclKernel_*`` before NCCL 2.19, ``ncclDevKernel_*``
  after), joined to the launch inside the host op by correlation (a kernel's ``External id``
  sometimes equals its correlation, so never join through it); gloo runs the collective as a
  ``gloo:*`` op on a worker thread of its own, with no kernel;
* the clock: ``ts`` relative to ``baseTimeNanoseconds`` since kineto #928 (2024-05), absolute
  unix microseconds before.

The reader keeps only the ``args`` it declares, and none of the collective arguments
(``Collective name``, ``Process Group Name``, ``In msg nelems``, ``dtype``...) nor
``baseTimeNanoseconds`` / ``host_name``. Until it does, ``read_comm_sidecar`` (at the end of
this module, kept apart on purpose) reads them from the file; ``extract_rank`` takes any
object with the same three members, so the reader can take that job over without changing
this stage.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any, Optional, Protocol

import msgspec

from tb_syncfinder.attribute import Attributor, called_name
from tb_syncfinder.models import (  # the job stage's records live with the others
    BLOCKING_CALL,
    BLOCKING_COLLECTIVES,
    Collective,
    DistributedInfo,
    HostWait,
    ProcessGroupInfo,
    RankTrace,
    StepSpan,
    Sync,
    sync_id_prefix,
)
from tb_syncfinder.models import (
    SYMMETRIC_COLLECTIVES as SYMMETRIC_COLLECTIVES,
)
from tb_syncfinder.reader import Args
from tb_syncfinder.timeline import PYTHON, HostThread, Timeline

__all__ = [
    "BLOCKING_COLLECTIVES",
    "Collective",
    "CommArgs",
    "DistributedInfo",
    "HostWait",
    "ProcessGroupInfo",
    "RankTrace",
    "StepSpan",
    "canonical_collective",
    "extract_rank",
    "extract_rank_file",
    "parse_distributed_info",
    "ReaderArgs",
    "waits_from_syncs",
]

# -- names ---------------------------------------------------------------------------------

# Point-to-point: not "the k-th collective of a group on every member".
POINT_TO_POINT = frozenset({"send", "recv", "sendrecv", "recvanysource"})

_HOST_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::", "nccl:", "gloo:")
# Host ops named like collectives that are not one: waiting for a work handle, and the
# record_param_comms that Kineto writes for it (Collective name "wait").
# Operators named like collectives that are not one: waits, and functional collectives'
# autograd wrapper (``_c10d_functional::_wrap_tensor_autograd``) around the real one.
_NOT_COLLECTIVES = frozenset({"wait", "waittensor", "waitall", "work_wait", "wrapautograd"})
_KERNEL_RE = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")


@functools.lru_cache(maxsize=4096)  # a trace has a few distinct names, each op and kernel one
def canonical_collective(name: str) -> str:
    """One spelling per collective, whatever wrote it: ``c10d::allreduce_``,
    ``nccl:all_reduce``, ``gloo:all_reduce``, ``Collective name`` "allreduce" and the kernel
    ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` all give ``allreduce``;
    ``c10d::_allgather_base_`` / ``all_gather_into_tensor`` give ``allgather``."""
    text = name.strip()
    kernel = _KERNEL_RE.match(text)
    if kernel:
        text = kernel.group(1)
    else:
        for prefix in _HOST_PREFIXES:
            if text.startswith(prefix):
                text = text[len(prefix) :]
                break
    text = text.lower()
    for noise in ("_into_tensor", "_tensor", "_base"):
        text = text.replace(noise, "")
    text = text.replace("_", "")
    if text == "alltoallv":
        text = "alltoall"  # Collective name of alltoall_base; c10d calls it alltoall
    return text


_COMM_OP_START = (*_HOST_PREFIXES, "record_param_comms")
_NAME = attrgetter("name")


def _is_comm_op(name: str) -> bool:
    return name.startswith(_COMM_OP_START)


class _Names:
    """The event names of a list of events, and the distinct ones, computed once."""

    def __init__(self, events: Sequence[Any]) -> None:
        self.names = list(map(_NAME, events))
        self.unique = set(self.names)

    def indices(self, wanted: Callable[[str], bool]) -> list[int]:
        """Indices of the events whose name passes ``wanted``, testing each distinct name
        once: a thread has ~10^4-10^5 events but a few hundred names, most of them none."""
        hits = {n for n in self.unique if wanted(n)}
        if not hits:
            return []
        return [i for i, n in enumerate(self.names) if n in hits]


def _thread_names(tl: Timeline) -> dict[int, _Names]:
    return {id(t): _Names(t.nodes) for t in tl.threads.values()}


def _is_nccl_kernel(name: str) -> bool:
    return name.startswith("nccl") and "Kernel" in name[:16]


# -- distributedInfo --------------------------------------------------------------------------


def _as_int(value: Any) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


@functools.lru_cache(maxsize=256)
def _ranks_from_text(text: str) -> Optional[tuple[int, ...]]:
    # Every collective of a group repeats the same string: parse each once (literal_eval
    # per collective was most of the extraction's time on collective-heavy traces).
    try:
        value = ast.literal_eval(text.strip()) if text.strip() else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return _as_ranks(value) if isinstance(value, (list, tuple)) else None


def _as_ranks(value: Any) -> Optional[tuple[int, ...]]:
    """``[0, 1]`` or the string ``"[0, 1]"`` that kernel args carry."""
    if isinstance(value, str):
        return _ranks_from_text(value) if len(value) < 1_000_000 else None
    if isinstance(value, (list, tuple)):
        ranks = [_as_int(v) for v in value]
        if ranks and all(r is not None for r in ranks):
            return tuple(r for r in ranks if r is not None)
    return None


def is_job_rank(info: Optional[Mapping[str, Any]]) -> bool:
    """Whether a trace's ``distributedInfo`` makes it one rank of a job (a world size over
    1): only such a trace goes through the job stage."""
    dist = parse_distributed_info(info)
    return dist is not None and dist.world_size is not None and dist.world_size > 1


def parse_distributed_info(info: Optional[Mapping[str, Any]]) -> Optional[DistributedInfo]:
    """``distributedInfo`` as a typed value (None when the trace has none)."""
    if not isinstance(info, Mapping):
        return None
    groups = []
    for pg in info.get("pg_config") or ():
        if not isinstance(pg, Mapping) or pg.get("pg_name") is None:
            continue
        groups.append(
            ProcessGroupInfo(
                name=str(pg.get("pg_name")),
                ranks=_as_ranks(pg.get("ranks")),
                desc=pg.get("pg_desc") if isinstance(pg.get("pg_desc"), str) else None,
                size=_as_int(pg.get("pg_size")),
                backend_config=pg.get("backend_config")
                if isinstance(pg.get("backend_config"), str)
                else None,
            )
        )
    version = info.get("nccl_version")
    return DistributedInfo(
        rank=_as_int(info.get("rank")),
        world_size=_as_int(info.get("world_size")),
        backend=info.get("backend") if isinstance(info.get("backend"), str) else None,
        groups=tuple(groups),
        nccl_version=str(version) if version is not None else None,
    )


# -- collective arguments ---------------------------------------------------------------------


# The ``args`` of collective ops and kernels: the reader keeps Kineto's collective keys
# (Collective name, process group, message sizes, dtype, Seq; Input Dims / Input type on
# 2023 nccl:* ops) on its ``Args``, under these attribute names.
CommArgs = Args


class CommArgsSource(Protocol):
    """What ``extract_rank`` needs besides the timeline; ``ReaderArgs`` is one."""

    base_time_ns: Optional[int]
    host_name: Optional[str]

    def args_for(self, event: Any) -> Optional[CommArgs]: ...


class ReaderArgs:
    """The collective arguments as the reader kept them (``reader.Args``), and the file's
    clock facts from ``TraceData``."""

    def __init__(self, base_time_ns: Optional[int] = None, host_name: Optional[str] = None) -> None:
        self.base_time_ns = base_time_ns
        self.host_name = host_name

    def args_for(self, event: Any) -> Optional[CommArgs]:
        args = getattr(event, "args", None)
        if args is None or not hasattr(args, "collective_name"):
            return None
        return args  # type: ignore[no-any-return]


def _dims_nelems(dims: Any) -> Optional[int]:
    """Element count of the first input of ``Input Dims`` (``[[19618307]]`` -> 19618307)."""
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        return None
    first = dims[0]
    if not first or not all(isinstance(d, int) for d in first):
        return None
    return math.prod(first)


# -- extraction -------------------------------------------------------------------------------


class _Pending(msgspec.Struct):
    """A collective while it is being assembled (holds events; never leaves this module)."""

    name: Optional[str]
    host_op: Optional[str]
    enqueue: Any  # outermost host event, or None
    execs: list[Any]
    exec_kind: Optional[str]
    args: list[tuple[str, Optional[CommArgs]]]  # (event name, its arguments)
    thread: Any
    pid: Any


def _args_rank(source: str, args: CommArgs) -> int:
    """Which argument set to trust first: the one carrying ``Collective name``
    (record_param_comms, and kernels since late 2023), then ``nccl:*`` / ``gloo:*`` ops, whose
    ``Input Dims`` is the message (a ``c10d::`` op lists its output tensor first)."""
    if args.collective_name is not None:
        return 0
    if source.startswith(("nccl:", "gloo:")):
        return 1
    if source == "record_param_comms":
        return 2
    return 3


# ``Input type`` values that are not an element type.
_NOT_DTYPES = frozenset({"", "TensorList", "Scalar", "ScalarList", "GenericList"})


# The argument fields ``_fill_from_args`` reads: a set with none of them gives nothing (most
# sets: the c10d op and the kernel of a 2022 trace carry no collective arguments at all).
_FILLED_FROM = attrgetter(
    "pg_name",
    "pg_id",
    "pg_ranks",
    "in_msg_nelems",
    "out_msg_nelems",
    "dtype",
    "seq",
    "input_dims",
    "input_type",
)
_NONE_FILLED = (None,) * 9


def _fill_from_args(c: Collective, sourced: Sequence[tuple[str, Optional[CommArgs]]]) -> None:
    """Take each field from the most trusted argument set that has it."""
    ranked = sorted(
        ((src, a) for src, a in sourced if a is not None and _FILLED_FROM(a) != _NONE_FILLED),
        key=lambda item: _args_rank(*item),
    )
    for _src, a in ranked:
        if c.group == "":
            if a.pg_name is not None:
                c.group = str(a.pg_name)
            elif a.pg_id is not None:
                c.group = str(a.pg_id)
        if c.group_ranks is None:
            c.group_ranks = _as_ranks(a.pg_ranks)
        if c.in_nelems is None:
            c.in_nelems = _as_int(a.in_msg_nelems)
        if c.out_nelems is None:
            c.out_nelems = _as_int(a.out_msg_nelems)
        if c.dtype is None and isinstance(a.dtype, str) and a.dtype:
            c.dtype = a.dtype
        if c.seq is None:
            c.seq = _as_int(a.seq)
    # 2023 traces: the size and type of the first input of the nccl:* op.
    for _src, a in ranked:
        if c.in_nelems is None:
            c.in_nelems = _dims_nelems(a.input_dims)
        types = a.input_type
        if (
            c.dtype is None
            and isinstance(types, list)
            and types
            and isinstance(types[0], str)
            and types[0] not in _NOT_DTYPES
        ):
            c.dtype = types[0]


def _name_of(sourced: Sequence[tuple[str, Optional[CommArgs]]]) -> Optional[str]:
    """The collective's name: ``Collective name`` where recorded, else the most specific op
    name (nccl:/gloo: over c10d::), else the kernel's."""
    for _src, a in sourced:
        if a is not None and isinstance(a.collective_name, str) and a.collective_name:
            return canonical_collective(a.collective_name)
    for prefixes in (
        ("nccl:", "gloo:"),
        ("c10d::", "_c10d_functional::", "c10d_functional::"),
        ("nccl",),
    ):
        for src, _a in sourced:
            if src.startswith(prefixes):
                return canonical_collective(src)
    return None


def _kernels_launched(tl: Timeline, thread: HostThread, ts: float, end: float) -> list[Any]:
    """NCCL kernels launched by runtime calls inside [ts, end] on this thread."""
    found = []
    runtime = thread.runtime
    i = bisect_left(thread.runtime_starts, ts)
    while i < len(runtime) and runtime[i].ts <= end:
        for d in tl.device_events(runtime[i], thread):
            if d.cat != "cuda_sync" and _is_nccl_kernel(d.name):
                found.append(d)
        i += 1
    return found


def _host_collectives(
    tl: Timeline, args_for: Callable[[Any], Optional[CommArgs]], names: dict[int, _Names]
) -> tuple[list[_Pending], list[_Pending], set[int]]:
    """(enqueues, gloo executions without an enqueue around them, ids of joined kernels)."""
    enqueues: list[_Pending] = []
    cpu_execs: list[_Pending] = []
    joined: set[int] = set()
    for thread in tl.threads.values():
        nodes = thread.nodes
        comm = names[id(thread)].indices(_is_comm_op)
        if not comm:
            continue
        is_comm = set(comm)
        members: dict[int, list[int]] = {}
        parent = thread.parent
        for i in comm:
            outer, j = i, parent[i]
            while j >= 0:
                if j in is_comm:
                    outer = j
                j = parent[j]
            members.setdefault(outer, []).append(i)
        for outer, inside in members.items():
            events = [nodes[i] for i in inside]  # outer first: nodes sorted by (ts, -dur)
            args = [(e.name, args_for(e)) for e in events]
            name = _name_of(args)
            if name is None or name in _NOT_COLLECTIVES:
                continue
            head = nodes[outer]
            if head.name.startswith("gloo:"):
                # gloo runs the collective on a worker thread: an execution whose enqueue
                # (c10d::*) is on the calling thread, paired later by order.
                cpu_execs.append(
                    _Pending(name, None, None, [head], "cpu_op", args, thread.tid, thread.pid)
                )
                continue
            kernels = _kernels_launched(tl, thread, head.ts, head.ts + head.dur)
            joined.update(id(k) for k in kernels)
            execs: list[Any] = list(kernels)
            kind = "kernel" if kernels else None
            if not kernels:
                inner_gloo = [e for e in events[1:] if e.name.startswith("gloo:")]
                if inner_gloo:
                    execs, kind = inner_gloo, "cpu_op"
            args.extend((k.name, args_for(k)) for k in kernels)
            enqueues.append(
                _Pending(name, head.name, head, execs, kind, args, thread.tid, thread.pid)
            )
    return enqueues, cpu_execs, joined


def _orphan_kernels(
    tl: Timeline, joined: set[int], args_for: Callable[[Any], Optional[CommArgs]]
) -> list[_Pending]:
    """NCCL kernels whose launch is not inside any host collective op (enqueued before the
    profiled window, or a trace without host ops)."""
    orphans = []
    for events in tl.lanes.values():
        for i in _Names(events).indices(_is_nccl_kernel):
            e = events[i]
            if e.cat == "cuda_sync" or id(e) in joined:
                continue
            args = [(e.name, args_for(e))]
            name = _name_of(args)
            if name is None:
                continue
            orphans.append(_Pending(name, None, None, [e], "kernel", args, None, e.pid))
    return orphans


def _pair_cpu_execs(enqueues: list[_Pending], cpu_execs: list[_Pending]) -> list[_Pending]:
    """Give each gloo execution the enqueue it serves: the earliest unpaired enqueue of the
    same collective that started before it (gloo runs a group's work in issue order).
    Returns the executions left without an enqueue. (Per process and collective, a queue
    of the waiting enqueues: looking through all of them per execution was quadratic.)"""
    waiting: dict[tuple[Any, str | None], deque[_Pending]] = {}
    for p in sorted((p for p in enqueues if not p.execs), key=lambda p: p.enqueue.ts):
        waiting.setdefault((p.pid, p.name), deque()).append(p)
    left = []
    for ex in sorted(cpu_execs, key=lambda p: p.execs[0].ts):
        queue = waiting.get((ex.pid, ex.name))
        if not queue:
            left.append(ex)
            continue
        if queue[0].enqueue.ts > ex.execs[0].ts + 1e-3:
            # Began before every enqueue of its collective still waiting: neither paired
            # nor returned (as the search this replaces did; an execution of a collective
            # enqueued before the window would be an orphan instead: not settled here).
            continue
        p = queue.popleft()
        p.execs, p.exec_kind = ex.execs, "cpu_op"
        p.args.extend(ex.args)
    return left


def _issue_order(with_enqueue: list[_Pending], without: list[_Pending]) -> list[_Pending]:
    """Collectives in issue order: by enqueue; one without an enqueue (issued before the
    window) goes before the first enqueued collective that executed after it, orphans in
    the order they executed. The orphans come in order of execution, so that collective
    is found by one pointer moving forward (a search from the start and a list insert
    per orphan were quadratic)."""
    ordered = sorted(with_enqueue, key=lambda p: p.enqueue.ts)
    before: list[list[_Pending]] = [[] for _ in ordered]
    after_all: list[_Pending] = []
    k = 0
    for orphan in sorted(without, key=lambda p: p.execs[0].ts):
        start = orphan.execs[0].ts
        while k < len(ordered) and not (ordered[k].execs and ordered[k].execs[0].ts > start):
            k += 1
        (before[k] if k < len(ordered) else after_all).append(orphan)
    result: list[_Pending] = []
    for orphans, p in zip(before, ordered, strict=True):
        result.extend(orphans)
        result.append(p)
    result.extend(after_all)
    return result


# Where a backward pass runs: the autograd engine's operators, and the Python call into it.
_IN_BACKWARD = re.compile(r"^autograd::engine::evaluate_function|run_backward")
# ``Work.wait`` as the Python tracer names it (a pybind11 method of the work object).
_WORK_WAIT_PREFIX = "<built-in method wait of "


def _issued_from_python_api(thread: HostThread, enqueue: Any) -> bool:
    """Whether a collective was issued through ``torch.distributed``'s Python functions (the
    frame around its operator) outside a backward pass: then its waits are ``Work.wait``
    calls from Python too. DDP's reducer issues its all-reduces during backward (from C++,
    or from a Python comm hook) and waits for them in C++, which the trace shows as no call
    at all."""
    index = thread.innermost(enqueue.ts, enqueue.ts + enqueue.dur)
    api = None
    while index >= 0:
        name = thread.nodes[index].name
        if _IN_BACKWARD.search(name):
            return False
        if api is None and thread.kinds[index] == PYTHON and not name.startswith("<built-in"):
            api = "torch/distributed/" in name.replace("\\", "/")
        index = thread.parent[index]
    return bool(api)


def _work_waits(thread: HostThread, names: _Names) -> Optional[list[tuple[float, float]]]:
    """The thread's ``Work.wait`` calls as (start, end), sorted; None when the thread
    recorded no Python frames (then nothing says whether it waited)."""
    if PYTHON not in thread.kinds:
        return None
    kinds, nodes = thread.kinds, thread.nodes
    return sorted(
        (nodes[i].ts, nodes[i].ts + nodes[i].dur)
        for i in names.indices(lambda name: name.startswith(_WORK_WAIT_PREFIX))
        if kinds[i] == PYTHON
    )


# How many collectives before a wait's end to look through for those it waited for: gloo
# runs a process group's collectives on a few worker threads (2 by default), so only the
# last few issued can still be running.
_WAIT_LOOKBACK = 64


def _set_blocked(collectives: list[Collective], waits: list[tuple[float, float]]) -> None:
    """``blocked_us`` and ``released_ts`` of one calling thread's gloo collectives from its
    ``Work.wait`` calls. A wait is shared out over the collectives running during it in issue
    order, each taking the part of it up to its own end (gloo runs a group's work in issue
    order, and a wait for a later one waits for the earlier ones too): each moment of a wait
    is counted once, for the earliest collective not yet done, though gloo runs two at a
    time and the order of the waits may differ from the order of the collectives."""
    timed = sorted(
        (c for c in collectives if c.exec_ts is not None and c.exec_end is not None),
        key=lambda c: (c.exec_ts, c.index),
    )
    for c in timed:
        c.blocked_us = 0.0
        c.released_ts = c.enqueue_end if c.enqueue_end is not None else c.exec_ts
    starts = [c.exec_ts for c in timed]
    for ts, end in waits:
        first = bisect_left(starts, end)
        running = sorted(
            (c for c in timed[max(0, first - _WAIT_LOOKBACK) : first] if c.exec_end > ts),  # type: ignore[operator]
            key=attrgetter("index"),
        )
        cursor = ts
        for c in running:
            lo = max(cursor, c.exec_ts)  # type: ignore[type-var]
            hi = min(end, c.exec_end)  # type: ignore[type-var]
            if hi > lo:
                c.blocked_us = (c.blocked_us or 0.0) + hi - lo
                c.released_ts = max(c.released_ts or hi, hi)
            cursor = max(cursor, hi)
            if cursor >= end:
                break


def _single_group(dist: Optional[DistributedInfo]) -> Optional[ProcessGroupInfo]:
    if dist is not None and len(dist.groups) == 1:
        return dist.groups[0]
    return None


def _collectives(
    tl: Timeline,
    dist: Optional[DistributedInfo],
    args_for: Callable[[Any], Optional[CommArgs]],
    names: dict[int, _Names],
) -> list[Collective]:
    enqueues, cpu_execs, joined = _host_collectives(tl, args_for, names)
    unpaired = _pair_cpu_execs(enqueues, cpu_execs)
    orphans = _orphan_kernels(tl, joined, args_for) + unpaired
    only_group = _single_group(dist)
    threads = {(t.pid, t.tid): t for t in tl.threads.values()}
    gloo_by_caller: dict[int, tuple[HostThread, list[Collective]]] = {}
    result = []
    for n, p in enumerate(_issue_order(enqueues, orphans)):
        c = Collective(index=n, name=p.name or "", group="", host_op=p.host_op, thread=p.thread)
        if p.enqueue is not None:
            c.enqueue_ts = p.enqueue.ts
            c.enqueue_end = p.enqueue.ts + p.enqueue.dur
        if p.execs:
            c.exec_ts = min(e.ts for e in p.execs)
            c.exec_end = max(e.ts + e.dur for e in p.execs)
            c.exec_kind = p.exec_kind
            c.exec_name = p.execs[0].name
        caller = threads.get((p.pid, p.thread)) if p.enqueue is not None else None
        if (
            c.exec_kind == "cpu_op"
            and caller is not None
            and _issued_from_python_api(caller, p.enqueue)
        ):
            gloo_by_caller.setdefault(id(caller), (caller, []))[1].append(c)
        _fill_from_args(c, p.args)
        if c.group == "" and only_group is not None:
            # One process group in the job: every collective is in it.
            c.group = only_group.name
        if c.group_ranks is None and dist is not None:
            for g in dist.groups:
                if g.name == c.group and g.ranks is not None:
                    c.group_ranks = g.ranks
        at = c.enqueue_ts if c.enqueue_ts is not None else c.exec_ts
        step = tl.step_at(at) if at is not None else None
        c.step = step.number if step is not None else None
        result.append(c)
    for caller, gloo in gloo_by_caller.values():
        waits = _work_waits(caller, names[id(caller)])
        # A thread that never waits from Python waits, if at all, in C++: unknown.
        if waits:
            _set_blocked(gloo, waits)
    return result


# -- host waits -------------------------------------------------------------------------------

# Python built-ins that block the calling thread (recorded as python_function events with
# with_stack=True). Named by what a user wrote. c10d's ``Work.wait`` is deliberately absent:
# that is the collective itself.
_BLOCKING_CALLS = {
    "<built-in function sleep>": "time.sleep",
    "<method 'acquire' of '_thread.lock' objects>": "lock.acquire",
    "<method 'acquire' of '_thread.RLock' objects>": "lock.acquire",
}
MIN_BLOCKING_US = 50.0  # shorter blocking calls are noise for lateness (keeps output small)


def waits_from_syncs(syncs: Iterable[Sync]) -> list[HostWait]:
    """The engine's syncs of one trace as ``HostWait``s (their ids kept, so a what-if
    replay keyed by ``Sync.id`` lines up)."""
    from tb_syncfinder.aggregate import site_key

    waits = []
    for n, s in enumerate(syncs):
        src = s.source
        waits.append(
            HostWait(
                id=s.id or f"sync-{n}",
                kind=s.kind,
                site_key=s.site_key or site_key(s.source, s.op, s.api, s.kind),
                ts=s.ts_us,
                end=s.end_us or s.ts_us,
                wait_us=s.host_wait_us,
                op=s.op or s.api,
                file=src.file if src else None,
                line=src.line if src else None,
                func=src.func if src else None,
                line_exact=bool(src and src.line_exact),
                step=s.step,
                thread=s.thread,
                is_sync=True,
                latent=s.latent,
            )
        )
    return waits


def _blocking_calls(
    tl: Timeline,
    resolver: Any,
    id_prefix: str,
    names: dict[int, _Names],
    collectives: Sequence[Collective] = (),
) -> list[HostWait]:
    """Blocking Python calls of at least ``MIN_BLOCKING_US``, with their user line, on the
    threads that run the steps or issue the collectives (all threads where the trace has
    neither): a heartbeat or logging thread's sleeps hold no step back, and taken as the
    rank's they were its top cost to the job, above the sleep that made it late."""
    working = {s.tid for s in tl.steps} | {c.thread for c in collectives if c.thread is not None}
    waits: list[HostWait] = []
    stacks = Attributor(tl)  # its per-thread frame trees are built on first use only
    for thread in tl.threads.values():
        if working and thread.tid not in working:
            continue
        nodes = thread.nodes
        for i in names[id(thread)].indices(_BLOCKING_CALLS.__contains__):
            node = nodes[i]
            if thread.kinds[i] != PYTHON or node.dur < MIN_BLOCKING_US:
                continue
            label = _BLOCKING_CALLS[node.name]
            held, _modules = stacks.python_stack(thread, node.ts, node.ts + node.dur)
            stack = [frame for _index, frame in held]
            if any("torch/profiler" in f.file for f in stack):
                continue  # the profiler's own waiting, not the program's
            src = None
            if resolver is not None and stack:
                called = called_name(stack)
                src = resolver.resolve(stack, [[called]] if called else None)
            user = next((f for f in stack if f.user), None)
            file = src.file if src else (user.file if user else None)
            line = src.line if src else (user.line if user else None)
            func = src.func if src else (user.func if user else None)
            step = tl.step_at(node.ts)
            waits.append(
                HostWait(
                    id=f"{id_prefix}-w{len(waits)}",
                    kind=BLOCKING_CALL,
                    site_key=f"{file}:{line}:{label}" if file else f"-:{label}",
                    ts=node.ts,
                    end=node.ts + node.dur,
                    wait_us=node.dur,
                    op=label,
                    file=file,
                    line=line,
                    func=func,
                    line_exact=bool(src and src.line_exact),
                    step=step.number if step is not None else None,
                    thread=thread.tid,
                    is_sync=False,
                )
            )
    waits.sort(key=lambda w: w.ts)
    return waits


def _steps(tl: Timeline) -> list[StepSpan]:
    longest: dict[int, StepSpan] = {}
    for s in tl.steps:
        prev = longest.get(s.number)
        if prev is None or prev.duration < s.end - s.ts:
            longest[s.number] = StepSpan(s.number, s.ts, s.end)
    return [longest[k] for k in sorted(longest)]


def extract_rank(
    tl: Timeline,
    distributed_info: Optional[Mapping[str, Any]],
    *,
    comm: Optional[CommArgsSource] = None,
    syncs: Sequence[Sync] = (),
    resolver: Any = None,
    worker: str = "",
    id_prefix: str = "",
) -> RankTrace:
    """One rank's collectives, steps and host waits, from a trace's timeline.

    ``distributed_info``: ``TraceData.distributed_info``. ``comm``: the collective arguments
    and clock facts (``ReaderArgs`` of the trace's ``TraceData``); without it the clock
    facts are unknown. ``syncs``: the
    engine's syncs of this trace (sources resolved) become ``HostWait``s beside the blocking
    Python calls found here; ``resolver`` (a ``source.SourceResolver``) gives those calls
    their exact line.
    """
    source = comm if comm is not None else ReaderArgs()
    dist = parse_distributed_info(distributed_info)
    notes = []
    if dist is None:
        notes.append("no distributedInfo: not part of a job")
    names = _thread_names(tl)
    collectives = _collectives(tl, dist, source.args_for, names)
    if (
        collectives
        and all(c.group == "" for c in collectives)
        and dist is not None
        and len(dist.groups) > 1
    ):
        notes.append(
            f"collectives carry no process group and the trace lists {len(dist.groups)} groups"
        )
    if not id_prefix:
        # The engine's sync id prefix, so that ids are unique across a run's traces.
        id_prefix = sync_id_prefix(tl.path)
    waits = waits_from_syncs(syncs) + _blocking_calls(tl, resolver, id_prefix, names, collectives)
    waits.sort(key=lambda w: w.ts)
    return RankTrace(
        path=tl.path,
        worker=worker,
        dist=dist,
        base_time_ns=source.base_time_ns,
        host_name=source.host_name,
        span=(float(tl.span[0]), float(tl.span[1])),
        collectives=collectives,
        steps=_steps(tl),
        waits=waits,
        notes=notes,
    )


def extract_rank_file(
    path: str,
    *,
    syncs: Sequence[Sync] = (),
    resolver: Any = None,
    worker: str = "",
    id_prefix: str = "",
) -> RankTrace:
    """Read, build the timeline and extract: for tests, benchmarks and scripts (the engine
    runs ``extract_rank`` on the timeline it already has)."""
    from tb_syncfinder.reader import read_trace
    from tb_syncfinder.timeline import build_timeline

    data = read_trace(path)
    tl = build_timeline(data)
    return extract_rank(
        tl,
        data.distributed_info,
        comm=ReaderArgs(data.base_time_ns, data.host_name),
        syncs=syncs,
        resolver=resolver,
        worker=worker,
        id_prefix=id_prefix,
    )
