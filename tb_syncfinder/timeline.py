"""Arrange decoded events into host threads (nested by time) and device lanes.

Host side, per (pid, tid): the "containers" (operators, user annotations, python_function
frames) are sorted by ``(ts, -dur)`` and one stack sweep gives each its parent, so any
query "what encloses this runtime call" is a bisect plus a walk up a few parents. Runtime /
driver calls are kept in a separate sorted list: they never contain anything we need.

Device side, per (device pid, stream tid): kernels, memcpys, memsets and CUPTI
``cuda_sync`` records. Per device, the start times of all real activity (not sync records)
are kept as sorted numpy arrays with a running maximum of end times, so "when is the
device busy again after t" is one ``searchsorted``.

Runtime call <-> device activity: ``args.correlation`` on both sides where present (modern
CUDA and ROCm), else the runtime call's ``External id`` (equal to the correlation in CUDA
traces), else the ``ac2g`` flow events (``s`` on the host call, ``f`` on the device event).
Everything is linear or n log n; nothing pairs events by a nested loop.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from itertools import accumulate, compress, islice
from operator import add, attrgetter, eq
from typing import Any, NamedTuple

import msgspec

from tb_syncfinder.catalogue import (
    ASCEND,
    DATALOADER_FETCH,
    NPU_CALL_PROCESS,
    NPU_IDLE_TASK_TYPES,
    NPU_TASK_PROCESS,
    TORCH_OWN_ANNOTATIONS,
    UNCATEGORISED_CALL_PREFIXES,
    device_kind_of,
    is_profiler_frame,
)
from tb_syncfinder.reader import Event, MetaEvent, TraceData, events_by_kind

# Event classes (values of the category map).
OP, ANNOTATION, PYTHON, RUNTIME, DEVICE, DEVICE_SYNC, OTHER, IGNORED = range(8)

# Categories written by Kineto today and by older / other builds of it (torch 1.x wrote
# "Operator", "Runtime", "Kernel", "Memcpy", "Memset"; ROCm uses the CUDA names).
_CATEGORY_CLASS = {
    "cpu_op": OP,
    "operator": OP,
    "user_annotation": ANNOTATION,
    "python_function": PYTHON,
    "python": PYTHON,
    "cuda_runtime": RUNTIME,
    "runtime": RUNTIME,
    "cuda_driver": RUNTIME,
    "driver": RUNTIME,
    "kernel": DEVICE,
    "gpu_memcpy": DEVICE,
    "memcpy": DEVICE,
    "gpu_memset": DEVICE,
    "memset": DEVICE,
    "cuda_sync": DEVICE_SYNC,
    # record_function ranges as the GPU ran them (ProfilerStep#N among them): a copy of the
    # host's annotations on a device lane, neither host nesting, nor steps, nor activity.
    "gpu_user_annotation": IGNORED,
}

_TS = attrgetter("ts")
_DUR = attrgetter("dur")
_CAT = attrgetter("cat")


def category_class(cat: str) -> int:
    """The event class of a category (exact, else case-insensitive; OTHER if unknown)."""
    base = _CATEGORY_CLASS.get(cat)
    if base is None:
        base = _CATEGORY_CLASS.get(cat.lower(), OTHER)
    return base


STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


def correlation_of(event: Event) -> Any:
    """The correlation id joining a runtime call and its device activity (None if none)."""
    args = event.args
    if args is None:
        return None
    if args.correlation is not None:
        return args.correlation
    if args.external_id is not None:
        return args.external_id
    return args.external_id_legacy


class HostThread(msgspec.Struct):
    """One host thread: nested containers plus its runtime calls, both sorted by start."""

    pid: Any
    tid: Any
    nodes: list[Event] = msgspec.field(default_factory=list)
    kinds: list[int] = msgspec.field(default_factory=list)  # OP / ANNOTATION / PYTHON per node
    starts: list[float] = msgspec.field(default_factory=list)
    ends: list[float] = msgspec.field(default_factory=list)
    # index of the enclosing node, -1 = root
    parent: list[int] = msgspec.field(default_factory=list)
    runtime: list[Event] = msgspec.field(default_factory=list)
    runtime_starts: list[float] = msgspec.field(default_factory=list)
    python_by_id: dict[Any, int] = msgspec.field(default_factory=dict)  # Python id -> node index
    # While building: the few nodes whose class is not their category's, with their class
    # (a ProfilerStep#N span written as an operator is an annotation).
    odd_kinds: list[tuple[Event, int]] = msgspec.field(default_factory=list)

    def innermost(self, ts: float, end: float) -> int:
        """Index of the innermost node enclosing [ts, end], or -1."""
        i = bisect_right(self.starts, ts) - 1
        ends = self.ends
        parent = self.parent
        tolerance = end_tolerance(end)  # durations are rounded (ns -> us) independently
        while i >= 0:
            if ends[i] + tolerance >= end:
                return i
            i = parent[i]
        return -1

    def ancestors(self, index: int) -> list[int]:
        """``index`` and its enclosing nodes, innermost first."""
        chain = []
        parent = self.parent
        while index >= 0:
            chain.append(index)
            index = parent[index]
        return chain


class DeviceActivity(msgspec.Struct):
    """All real activity of one device (every stream), sorted by start."""

    starts: list[float]
    ends: list[float]
    max_end_before: list[float]  # running maximum of ends (busy-until up to each index)

    def next_busy(self, t: float) -> float | None:
        """The first moment at or after ``t`` the device is busy (``t`` if busy at ``t``)."""
        i = bisect_left(self.starts, t)
        if i > 0 and self.max_end_before[i - 1] > t + 1e-3:
            return t  # something started earlier is still running
        if i >= len(self.starts):
            return None
        return self.starts[i]


class Step(msgspec.Struct):
    number: int
    ts: float
    end: float
    pid: Any
    tid: Any


class Timeline(msgspec.Struct):
    """Everything the later stages query; built once per trace, then dropped."""

    path: str
    threads: dict[tuple[Any, Any], HostThread]
    lanes: dict[tuple[Any, Any], list[Event]]  # (device pid, stream tid) -> device events
    # Per lane with any: its real activity (not sync records), sorted; often ``lanes``' list.
    lane_activity: dict[tuple[Any, Any], list[Event]]
    lane_device: dict[tuple[Any, Any], Any]
    device_activity: dict[Any, DeviceActivity]
    by_correlation: dict[Any, list[Event]]  # device events (incl. cuda_sync) per correlation
    steps: list[Step]
    span: tuple[float, float]  # first start / last end of host ops and device activity
    device_kind: str  # "cuda", "rocm", "npu", "cpu"
    device_name: str | None
    has_stacks: bool
    has_gpu_activity: bool
    has_runtime: bool
    event_count: int
    process_labels: dict[Any, str] = msgspec.field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = msgspec.field(default_factory=dict)
    flow_correlation: dict[tuple[Any, Any, float], Any] = msgspec.field(default_factory=dict)
    torch_version: str | None = None
    # The trace's one step was the profiler's closing step (``_closed_by_the_profiler``),
    # dropped: the trace has step markers and no step of the program (not one pseudo-step).
    only_closing_step: bool = False
    # Without ProfilerStep markers: the ``record_function`` name whose spans were taken as
    # the steps (``annotation_steps``, asked for), else the one whose spans look like them
    # with how many there are (``repeated_annotation``, a hint; None: none repeats).
    steps_from_annotation: str | None = None
    step_annotation_names: list[str] = msgspec.field(default_factory=list)
    step_annotation_hint: tuple[str, int] | None = None
    # torch_npu's processes by the NPU they are of (``npu_of_process``): which NPU an
    # AscendCL call, filed in its "CANN" process, waited for.
    npu_of_process: dict[Any, int] = msgspec.field(default_factory=dict)
    _step_starts: list[float] = msgspec.field(default_factory=list)

    @property
    def records_work(self) -> bool:
        """Whether any host or device event with a time was recorded: a trace of none (an
        empty event list, metadata only) is no step of the program, not a step of 0 us
        (one such file beside a real trace halved its run's figures per step)."""
        return bool(self.device_activity) or any(
            t.starts or t.runtime for t in self.threads.values()
        )

    def correlation(self, runtime_event: Event, thread: HostThread) -> Any:
        corr = correlation_of(runtime_event)
        if corr is None and self.flow_correlation:
            corr = self.flow_correlation.get((thread.pid, thread.tid, runtime_event.ts))
        return corr

    def device_events(self, runtime_event: Event, thread: HostThread) -> list[Event]:
        corr = self.correlation(runtime_event, thread)
        if corr is None:
            return []
        return self.by_correlation.get(corr, [])

    def step_at(self, ts: float) -> Step | None:
        """The ProfilerStep span containing ``ts`` (any thread: backward threads have none)."""
        i = bisect_right(self._step_starts, ts) - 1
        if i >= 0 and self.steps[i].end > ts:
            return self.steps[i]
        return None

    def device_of_event(self, event: Event) -> Any:
        args = event.args
        if args is not None and isinstance(args.device, int):
            return args.device
        return self.lane_device.get((event.pid, event.tid), event.pid)

    def default_device(self) -> Any:
        """The busiest device: used when a sync has no device activity of its own."""
        if not self.device_activity:
            return None
        return max(self.device_activity, key=lambda d: len(self.device_activity[d].starts))

    def lane_label(self, lane: tuple[Any, Any]) -> str:
        device = self.lane_device.get(lane, lane[0])
        kind = "NPU" if self.device_kind == "npu" else "GPU"
        if lane[1] == -1:
            # CUPTI writes a wait on the whole device (cudaDeviceSynchronize's "Context
            # Sync") on no stream of its own: "stream -1" named nothing a user knows.
            return f"{kind} {device} device-wide syncs"
        return f"{kind} {device} stream {lane[1]}"


def _sweep(thread: HostThread, class_of: dict[str, int]) -> None:
    """Sort the thread's nodes by (ts, -dur) and give each its enclosing node (one sweep).
    ``class_of``: each host category's class."""
    nodes = thread.nodes
    # By start (the categories' runs are each nearly in order: a cheap merge), then each
    # run of equal starts longest first; both sorts stable. Sorting all of them by
    # duration first cost 1.5x this: n log n comparisons of floats scattered in memory.
    nodes.sort(key=_TS)
    starts = list(map(_TS, nodes))
    _longest_first_at_equal_starts(nodes, starts)
    kinds = list(map(class_of.__getitem__, map(_CAT, nodes)))
    ends = list(map(add, starts, map(_DUR, nodes)))
    if thread.odd_kinds:
        _set_odd_kinds(thread.odd_kinds, nodes, starts, kinds)
    parent = [-1] * len(nodes)
    # One tolerance for the thread (its times are all of one magnitude): none per node.
    tolerance = end_tolerance(max(map(abs, ends), default=0.0))
    stack: list[int] = []
    pop = stack.pop
    push = stack.append
    top_end = float("-inf")
    for i, ts in enumerate(starts):
        if top_end <= ts:
            while stack and ends[stack[-1]] <= ts:
                pop()
            top_end = ends[stack[-1]] if stack else float("-inf")
        if stack:
            end = ends[i]
            if top_end + tolerance >= end:
                parent[i] = stack[-1]
            else:
                parent[i] = _enclosing_on_stack(stack, ends, ts, end, tolerance)
        push(i)
        top_end = ends[i]
    thread.kinds, thread.starts, thread.ends, thread.parent = kinds, starts, ends, parent
    thread.odd_kinds = []
    python_by_id = {}
    frames = list(compress(range(len(kinds)), map(PYTHON.__eq__, kinds)))
    for i, e in zip(frames, map(nodes.__getitem__, frames), strict=True):
        args = e.args
        if args is not None and args.python_id is not None:
            python_by_id[args.python_id] = i
    thread.python_by_id = python_by_id
    thread.runtime.sort(key=_TS)
    thread.runtime_starts = list(map(_TS, thread.runtime))


# Ends are ``ts + dur``, each rounded (ns -> us) on its own: a node ending this little past
# the one around it is still inside it (as ``HostThread.innermost`` allows).
END_TOLERANCE_US = 1e-3
# A double holds a time of ~1.7e15 us (microseconds since the epoch) to 0.25 us: there a
# child's ``ts + dur`` may pass its parent's by a rounding step, and was taken for a span
# that outlives it (42 parents of a real trace changed so).
END_TOLERANCE_SHARE = 1e-15


def end_tolerance(end: float) -> float:
    """How far past another's end a node may end and still be inside it."""
    return max(END_TOLERANCE_US, abs(end) * END_TOLERANCE_SHARE)


def _enclosing_on_stack(
    stack: list[int], ends: list[float], ts: float, end: float, tolerance: float
) -> int:
    """The parent of a node starting at ``ts`` that outlives the top of the sweep's stack:
    the nearest node on it that encloses it (-1: none). A span can outlive the frame it
    began in: ``record_function``'s ``ProfilerStep#N`` begins in the Python frames that
    enter it, and ``prof.step()``'s frames begin in step N and end in step N+1. Taking the
    top as the parent chained every step to the one before, and ended nodes stayed on the
    stack under a top still open: each chain walk (``ancestors``, ``innermost``) grew with
    the run, 1.8 s of an 800-step trace's 2.2 s. Nodes that have ended are dropped from the
    stack here (none is a parent again: later nodes start later still)."""
    stack[:] = [j for j in stack if ends[j] > ts]
    k = len(stack) - 1
    while k >= 0 and ends[stack[k]] + tolerance < end:
        k -= 1
    return stack[k] if k >= 0 else -1


def _longest_first_at_equal_starts(nodes: list[Event], starts: list[float]) -> None:
    """Sort each run of nodes with equal starts by duration, longest first (stable)."""
    ties = list(compress(range(1, len(starts)), map(eq, starts, islice(starts, 1, None))))
    i, count = 0, len(ties)
    while i < count:
        first = last = ties[i]
        i += 1
        while i < count and ties[i] == last + 1:
            last = ties[i]
            i += 1
        run = nodes[first - 1 : last + 1]
        run.sort(key=_DUR, reverse=True)
        nodes[first - 1 : last + 1] = run


def _set_odd_kinds(
    odd_kinds: list[tuple[Event, int]], nodes: list[Event], starts: list[float], kinds: list[int]
) -> None:
    """Give the few nodes of ``odd_kinds`` their class: each is found among the nodes that
    start when it does (sorted: a bisect, then the few of equal start)."""
    for event, kind in odd_kinds:
        i = bisect_left(starts, event.ts)
        while i < len(nodes) and nodes[i] is not event:
            i += 1
        if i < len(nodes):
            kinds[i] = kind


# Spans some builds write as operators that are no operator a user called: steps (torch
# 1.x) and torch.compile's regions (``Torch-Compiled Region: 0/0``, around the compiled
# code and the code after each graph break). Taken as annotations: the operator a sync is
# in is the one inside them, and each of them is its own finding.
_SPANS_WRITTEN_AS_OPS = ("ProfilerStep#", "Torch-Compiled Region")


# Python frames of torch's own code (the profiler's exit runs through several).
_TORCH_FRAME = re.compile(r"(?:^|[/\\])torch[/\\]")


def _closed_by_the_profiler(step: Step, threads: dict[tuple[Any, Any], HostThread]) -> bool:
    """Whether the trace's last step is only the profiler stopping: the loop's last
    ``prof.step()`` opens a step that the ``with profile(...)`` block's exit closes, with
    no operator in it (a 20 us ``ProfilerStep#8`` after seven real ones, where a schedule's
    cycle was cut short by the loop's end or there is no schedule). Counted, it is a step
    of the program: every per-step figure is divided by one step too many, and the replay's
    window runs on past the last real step. A runtime call in it that the profiler's own
    code made (its device synchronize on stopping) does not make it a step; one that no
    profiler frame encloses, or any operator or annotation but the loader's fetch that ends
    the loop (``_LOOP_OWN_SPANS``), does. The program's Python
    alone (the loop's exit, a progress bar closing, epoch-end callbacks: ultralytics' 127 us
    ``ProfilerStep#8`` after 8 training steps) makes it a step only in a trace that runs
    no operator at all: elsewhere it is no pass of the loop, and counted it put 2.7 reads
    a step where every step made 3. Without stacks, the profiler's own synchronize cannot
    be told from the program's: such a step stays."""
    programs_python = False
    for thread in threads.values():
        starts, kinds, nodes = thread.starts, thread.kinds, thread.nodes
        first, last = bisect_left(starts, step.ts), bisect_right(starts, step.end)
        for i in range(first, last):
            kind = kinds[i]
            if kind == OP or (kind == ANNOTATION and not nodes[i].name.startswith(_LOOP_OWN_SPANS)):
                return False
            if kind == PYTHON and not programs_python:
                programs_python = _is_programs_frame(nodes[i].name)
        runtime_starts = thread.runtime_starts
        first = bisect_left(runtime_starts, step.ts)
        last = bisect_right(runtime_starts, step.end)
        for call in thread.runtime[first:last]:
            if not _in_profiler_frame(thread, call.ts):
                return False
    # None in this step: the trace's operators, if any, ran in the steps before it.
    return not programs_python or any(OP in thread.kinds for thread in threads.values())


# The spans a step holds that are the loop's own, not a pass's work: the step itself, and
# the loader's fetch that ends the loop (its last ``__next__`` raises StopIteration; with
# workers it joins them: a 29 ms ``ProfilerStep#6`` after four 1 ms steps in a DLRM walk).
_LOOP_OWN_SPANS = ("ProfilerStep#", DATALOADER_FETCH)


# The profiler stopping outside a ``prof.step()``: ``with profile(...)``'s exit, or
# ``prof.stop()`` (a Trainer callback's ``on_train_end``). Not ``stop_trace``, which a
# schedule's cycle ending in ``prof.step()`` runs.
_PROFILER_STOPPED = re.compile(r"torch[/\\]profiler[/\\]profiler\.py\(\d+\): (?:__exit__|stop)$")
# A last step this much shorter than the others' median is the program's code after its
# loop, not a pass of it (the loop's passes take about the same time).
_TAIL_SHARE = 0.1


def _a_tail_after_the_loop(steps: list[Step], threads: dict[tuple[Any, Any], HostThread]) -> bool:
    """Whether the trace's last step is what ran between the loop's last ``prof.step()``
    and the profiler stopping: a step the profiler's stop closes, far shorter than the
    loop's others. Its code is the program's after its loop (a last ``loss.item()``, a
    Trainer finishing: a sentence-transformers walk's 3 ms ``ProfilerStep#12`` after 8
    training steps); counted, it was a step of the loop, and every read each pass made
    was "in 8 of 9 steps", 1.8 a step where each made 2. Its reads are still the run's.
    Without stacks the profiler's stop is not seen: such a step stays."""
    if len(steps) < 3:
        return False
    last = steps[-1]
    others = sorted(s.end - s.ts for s in steps[:-1])
    if last.end - last.ts >= _TAIL_SHARE * others[len(others) // 2]:
        return False
    for thread in threads.values():
        starts, kinds, nodes = thread.starts, thread.kinds, thread.nodes
        for i in range(bisect_left(starts, last.ts), bisect_right(starts, last.end)):
            if kinds[i] == PYTHON and _PROFILER_STOPPED.search(nodes[i].name):
                return True
    return False


def _no_program_work(threads: dict[tuple[Any, Any], HostThread]) -> bool:
    """Whether the trace holds no operator and no runtime call but the profiler's own."""
    for thread in threads.values():
        if OP in thread.kinds:
            return False
        if any(not _in_profiler_frame(thread, call.ts) for call in thread.runtime):
            return False
    return True


def _is_programs_frame(name: str) -> bool:
    """A Python frame of the program's (not torch's own, not a built-in): ``train.py(42):
    save_checkpoint``, ``nn.Module: Net_0``; a library's counts too."""
    return not (name.startswith("<built-in") or _TORCH_FRAME.search(name))


def _in_profiler_frame(thread: HostThread, ts: float) -> bool:
    """Whether a Python frame of the profiler's own code encloses ``ts`` on the thread."""
    i = bisect_right(thread.starts, ts) - 1
    while i >= 0:
        if thread.ends[i] >= ts and thread.kinds[i] == PYTHON:
            if is_profiler_frame(thread.nodes[i].name):
                return True
        i = thread.parent[i]  # every frame enclosing ts encloses this one
    return False


def _npu_numbers(
    task_processes: list[Any], npu_of: dict[Any, int]
) -> tuple[dict[Any, int], dict[Any, int]]:
    """Each process of an NPU's tasks by its device number, and each of torch_npu's
    processes (its calls' "CANN") by the device number of the NPU it is of: the NPU's own
    number where every NPU of the file has one of its own, else (another writer's pids, a
    file merging hosts whose ranks use the same NPU) the order the task processes are
    named in, each process joined to its NPU by the host and NPU its pid carries."""
    own = [npu_of.get(pid) for pid in task_processes]
    if None not in own and len(set(own)) == len(own):
        numbers = {pid: npu_of[pid] for pid in task_processes}
    else:
        numbers = {pid: n for n, pid in enumerate(task_processes)}
    of_host_npu = {
        (pid >> 10, npu_of[pid]): numbers[pid] for pid in task_processes if pid in npu_of
    }
    by_process = {
        pid: of_host_npu[(pid >> 10, npu)]
        for pid, npu in npu_of.items()
        if (pid >> 10, npu) in of_host_npu
    }
    return numbers, by_process


class _Builder:
    """The state ``build_timeline`` fills, one method per kind of event bucket."""

    def __init__(self) -> None:
        self.threads: dict[tuple[Any, Any], HostThread] = {}
        self.lanes: dict[tuple[Any, Any], list[Event]] = {}
        self.lanes_with_sync_records: set[tuple[Any, Any]] = set()
        self.by_correlation: dict[Any, list[Event]] = {}
        self.steps: list[Step] = []
        self.has_stacks = False
        self.needs_flows = False  # runtime calls without correlation: join through flows
        self.op_lo = float("inf")
        self.op_hi = float("-inf")
        # The processes holding an NPU's tasks, by the NPU's number, and those tasks.
        self.device_numbers: dict[Any, int] = {}
        self.npu_tasks: list[Event] = []

    def thread_of(self, e: Event) -> HostThread:
        key = (e.pid, e.tid)
        thread = self.threads.get(key)
        if thread is None:
            thread = self.threads[key] = HostThread(e.pid, e.tid)
        return thread

    def add_host(self, base: int, events: list[Event]) -> None:
        """Operators, annotations, python frames and uncategorised events of one category:
        containers of their thread (ProfilerStep#N spans become steps).

        One pass, everything read while the event is at hand: the events lie scattered in
        memory, and each further pass over them (even a C-level ``map``) cost as much as
        this whole loop."""
        if base == OTHER:
            self._add_uncategorised(events)
            return
        step_spans: list[Event] = []
        last_key = None
        nodes: list[Event] = []
        if base == OP:
            lo, hi, stacks = self.op_lo, self.op_hi, self.has_stacks
            for e in events:
                if e.name.startswith(_SPANS_WRITTEN_AS_OPS):
                    step_spans.append(e)
                key = (e.pid, e.tid)
                if key != last_key:  # events come in long runs of one thread
                    nodes, last_key = self.thread_of(e).nodes, key
                nodes.append(e)
                ts = e.ts
                if ts < lo:
                    lo = ts
                end = ts + e.dur
                if end > hi:
                    hi = end
                if not stacks:
                    args = e.args
                    stacks = args is not None and bool(args.call_stack)
            self.op_lo, self.op_hi, self.has_stacks = lo, hi, stacks
        else:
            for e in events:
                if e.name.startswith("ProfilerStep#"):
                    step_spans.append(e)
                key = (e.pid, e.tid)
                if key != last_key:
                    nodes, last_key = self.thread_of(e).nodes, key
                nodes.append(e)
            if base == PYTHON and events:
                self.has_stacks = True
        for e in step_spans:
            self._add_step(e)  # ProfilerStep#N only
            if base != ANNOTATION:
                self.thread_of(e).odd_kinds.append((e, ANNOTATION))

    def _add_step(self, e: Event) -> None:
        match = STEP_RE.match(e.name)
        if match:
            self.steps.append(Step(int(match.group(1)), e.ts, e.ts + e.dur, e.pid, e.tid))

    def _add_uncategorised(self, events: list[Event]) -> None:
        """Events of a category Kineto does not write: a ProfilerStep#N span is a step and
        an annotation; a runtime call of an old build (by name) a runtime call."""
        for e in events:
            name = e.name
            if name.startswith("ProfilerStep#"):
                self._add_step(e)
                thread = self.thread_of(e)
                thread.nodes.append(e)
                thread.odd_kinds.append((e, ANNOTATION))
            elif name.startswith(UNCATEGORISED_CALL_PREFIXES):
                self.thread_of(e).runtime.append(e)

    def fold_runtime_threads(self) -> None:
        """Runtime calls filed under a process of their own, on the thread id of the
        program's thread that made them: torch_npu writes its AscendCL calls in a "CANN"
        process, each on the tid of the host thread that called it, beside the "Python"
        process holding the operators. Those calls go to that thread, inside the operators
        that made them (``aten::item`` around ``aclrtSynchronizeStream``): a thread id names
        one thread of the machine at a time, whatever process the profiler files it under.
        Only where exactly one thread with operators has that tid."""
        owners: dict[Any, list[tuple[Any, Any]]] = {}
        for key, thread in self.threads.items():
            if thread.nodes:
                owners.setdefault(key[1], []).append(key)
        for key in list(self.threads):
            thread = self.threads[key]
            # Only AscendCL's: a file merging several hosts' processes may hold two threads
            # of one tid (a gloo worker of one rank, the main thread of another).
            if thread.nodes or not thread.runtime:
                continue
            if not all(call.name.startswith(ASCEND.call_prefixes) for call in thread.runtime):
                continue
            found = [owner for owner in owners.get(key[1], ()) if owner[0] != key[0]]
            if len(found) != 1:
                continue
            owner = self.threads[found[0]]
            owner.runtime = sorted([*owner.runtime, *thread.runtime], key=_TS)
            del self.threads[key]

    def take_npu_tasks(self, events: list[Event]) -> list[Event]:
        """The NPU's tasks among events of no known category (torch_npu writes none on
        them), kept for ``add_npu_tasks``; the other events returned. A task that is no
        work of the device's (a wait for an event, a placeholder) is left out: the device
        idles through it."""
        numbers = self.device_numbers
        tasks = [e for e in events if e.pid in numbers]
        if not tasks:
            return events
        self.npu_tasks.extend(
            e for e in tasks if e.args is None or e.args.task_type not in NPU_IDLE_TASK_TYPES
        )
        return [e for e in events if e.pid not in numbers]

    def add_npu_tasks(self, calls_recorded: bool) -> None:
        """The NPU's tasks as device activity per (NPU, stream) lane, where the trace
        records the calls that wait for them (AscendCL's, torch_npu's level 1 and up; in a
        window of such a trace, also one that holds none of them). At its default level no
        wait is recorded: its syncs are listed as latent, as on a CPU, and the tasks
        measure nothing."""
        if self.npu_tasks and calls_recorded:
            self.add_device("", self.npu_tasks)
        self.npu_tasks = []

    def add_runtime(self, events: list[Event]) -> None:
        """Runtime / driver calls: kept apart per thread, they never contain anything."""
        last_key = None
        runtime: list[Event] = []
        for e in events:
            key = (e.pid, e.tid)
            if key != last_key:
                runtime, last_key = self.thread_of(e).runtime, key
            runtime.append(e)
            args = e.args
            if args is None or (args.correlation is None and args.external_id is None):
                self.needs_flows = True

    def add_device(self, cat: str, events: list[Event]) -> None:
        """Kernels, copies, memsets and CUPTI sync records (``cat``): per (device, stream)
        lane, and by correlation."""
        lanes = self.lanes
        by_correlation = self.by_correlation
        sync_records = cat == "cuda_sync"
        for e in events:
            lane = (e.pid, e.tid)
            lane_events = lanes.get(lane)
            if lane_events is None:
                lanes[lane] = [e]
            else:
                lane_events.append(e)
            if sync_records:
                self.lanes_with_sync_records.add(lane)
            args = e.args
            if args is None:
                continue
            corr = args.correlation
            if corr is None:
                corr = args.external_id
            if corr is not None:
                group = by_correlation.get(corr)
                if group is None:
                    by_correlation[corr] = [e]
                else:
                    group.append(e)

    def device_activity(
        self,
    ) -> tuple[
        dict[tuple[Any, Any], Any],
        dict[tuple[Any, Any], list[Event]],
        dict[Any, DeviceActivity],
    ]:
        """Each lane's device and real activity (not sync records), and per device its
        activity sorted, with the running maximum of ends."""
        lane_device: dict[tuple[Any, Any], Any] = {}
        lane_activity: dict[tuple[Any, Any], list[Event]] = {}
        per_device: dict[Any, list[list[Event]]] = {}
        for lane, events in self.lanes.items():
            events.sort(key=_TS)
            device = self.device_numbers.get(lane[0], lane[0])
            for e in events:
                if e.args is not None and isinstance(e.args.device, int):
                    device = e.args.device
                    break
            lane_device[lane] = device
            activity = events
            if lane in self.lanes_with_sync_records:
                activity = [e for e in events if e.cat != "cuda_sync"]
            if activity:
                lane_activity[lane] = activity
                per_device.setdefault(device, []).append(activity)
        device_activity: dict[Any, DeviceActivity] = {}
        for device, lanes in per_device.items():
            if len(lanes) == 1:
                events = lanes[0]  # one lane: sorted already
            else:
                events = [e for activity in lanes for e in activity]
                events.sort(key=_TS)
            starts = list(map(_TS, events))
            ends = list(map(add, starts, map(_DUR, events)))
            device_activity[device] = DeviceActivity(starts, ends, list(accumulate(ends, max)))
        return lane_device, lane_activity, device_activity

    def span(self, device_activity: dict[Any, DeviceActivity]) -> tuple[float, float]:
        """First start / last end of host operators and device activity; without either,
        of whatever host events exist."""
        lo, hi = self.op_lo, self.op_hi
        for activity in device_activity.values():
            lo = min(lo, activity.starts[0])
            hi = max(hi, activity.max_end_before[-1])
        if lo == float("inf"):
            starts_all = [t.starts[0] for t in self.threads.values() if t.starts]
            ends_all = [max(t.ends) for t in self.threads.values() if t.ends]
            lo, hi = (min(starts_all), max(ends_all)) if starts_all else (0.0, 0.0)
        return lo, hi


class _Names(NamedTuple):
    """What the metadata events name."""

    process_labels: dict[Any, str]  # "CPU", "GPU 0"
    thread_names: dict[tuple[Any, Any], str]
    # The processes holding an NPU's tasks (torch_npu's "Ascend Hardware"), in the order
    # named, and the NPU each of torch_npu's processes is of (``npu_of_process``).
    npu_task_processes: list[Any]
    npu_of: dict[Any, int]
    # Whether torch_npu named a process for its AscendCL calls ("CANN"): recorded at level 1
    # or above, where calls wait for the NPU (a window of such a trace may hold none).
    npu_calls_recorded: bool


def _names(metadata: list[MetaEvent]) -> _Names:
    """The process labels, thread names and torch_npu's processes the metadata names."""
    process_labels: dict[Any, str] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    npu_task_processes: list[Any] = []
    sort_indices: dict[Any, Any] = {}
    npu_calls_recorded = False
    for meta in metadata:
        args = meta.args
        if args is None:
            continue
        if meta.name == "process_labels" and args.labels:
            process_labels[meta.pid] = args.labels
        elif meta.name == "thread_name" and args.name:
            thread_names[(meta.pid, meta.tid)] = args.name
        elif meta.name == "process_name" and args.name == NPU_TASK_PROCESS:
            if meta.pid not in npu_task_processes:
                npu_task_processes.append(meta.pid)
        elif meta.name == "process_name" and args.name == NPU_CALL_PROCESS:
            npu_calls_recorded = True
        elif meta.name == "process_sort_index" and args.sort_index is not None:
            sort_indices[meta.pid] = args.sort_index
    return _Names(
        process_labels,
        thread_names,
        npu_task_processes,
        npu_of_process(sort_indices),
        npu_calls_recorded,
    )


def npu_of_process(sort_indices: dict[Any, Any]) -> dict[Any, int]:
    """The NPU each of torch_npu's processes ("Ascend Hardware", "CANN", ...) is of, from its
    pid: torch_npu writes it as the host's pid, the process's sort index and the NPU's
    number in 10, 5 and 5 bits (rank 1's "Ascend Hardware", sort index 13, is 3254511009:
    pid 3178233, 13, NPU 1). Only where the pid's middle bits are the process's own sort
    index (another writer's pid may match by chance, one in 32: only the processes of an
    NPU's tasks and calls are looked up in it)."""
    return {
        pid: pid & 0x1F
        for pid, index in sort_indices.items()
        if isinstance(pid, int)
        and isinstance(index, int)
        and pid > 0x3FF
        and (pid >> 5) & 0x1F == index
    }


def _annotation_matcher(name: str) -> Any:
    """A test of a ``record_function`` name: equal to ``name``, or matching it as a shell
    pattern where it has one (``step_*`` for ``record_function(f"step_{i}")``)."""
    if any(c in name for c in "*?["):
        import fnmatch  # only when asked for a pattern

        return re.compile(fnmatch.translate(name)).match
    return name.__eq__


def _outermost_annotations(threads: dict[Any, HostThread], matches: Any) -> list[Event]:
    """The annotation spans whose names ``matches`` accepts and that no other such span
    holds (on their thread), by start. Only the annotations are looked at (a C-level
    filter of the thread's kinds), in start order with the end of the last one kept: no
    walk up each one's parents (a trace of 10^5 ``record_function`` spans in deep stacks)."""
    found = []
    for thread in threads.values():
        nodes, kinds = thread.nodes, thread.kinds
        spans = [
            nodes[i]
            for i in compress(range(len(kinds)), map(ANNOTATION.__eq__, kinds))
            if matches(nodes[i].name)
        ]
        spans.sort(key=_start_longest_first)
        end = float("-inf")
        for e in spans:
            if e.ts < end:
                continue  # inside the last one kept
            found.append(e)
            end = e.ts + e.dur
    found.sort(key=_TS)
    return found


def _start_longest_first(e: Event) -> tuple[float, float]:
    return (e.ts, -e.dur)


_TRAILING_NUMBER = re.compile(r"(\d+)$")


def annotation_steps(threads: dict[Any, HostThread], name: str) -> tuple[list[Step], list[str]]:
    """Steps from the spans of the ``record_function`` ``name`` (exact, or a shell pattern)
    in a trace without ProfilerStep markers: each outermost span one step, a span that
    starts inside the one before left out (another thread's at the same time), each step
    ending where the next begins (the last at its span's end). Numbered by the names'
    trailing numbers where each has its own (``step_12``), else 0, 1, 2, ...

    With the steps, the names they were spans of (trailing digits as ``*``), in order of
    first appearance: a pattern that takes two names (``'Optimizer.*'``: each step's
    ``zero_grad`` and ``step``) counts two steps per iteration, which the user is told."""
    kept: list[Event] = []
    for e in _outermost_annotations(threads, _annotation_matcher(name)):
        if kept and e.ts < kept[-1].ts + kept[-1].dur:
            continue
        kept.append(e)
    found = [_TRAILING_NUMBER.search(e.name) for e in kept]
    numbers: list[int] = [int(m.group(1)) for m in found if m is not None]
    if len(numbers) != len(kept) or len(set(numbers)) != len(numbers):
        numbers = list(range(len(kept)))
    # Each step runs to the next one's start, as a ProfilerStep runs from one prof.step() to
    # the next: the loader's work between the spans is the iteration's, and a read in it
    # was counted in no step, its time in no step's.
    ends = [e.ts for e in kept[1:]] + [kept[-1].ts + kept[-1].dur] if kept else []
    steps = [
        Step(n, e.ts, end, e.pid, e.tid) for n, e, end in zip(numbers, kept, ends, strict=True)
    ]
    return steps, list(dict.fromkeys(_TRAILING_NUMBER.sub("*", e.name) for e in kept))


def repeated_annotation(threads: dict[Any, HostThread]) -> tuple[str, int] | None:
    """In a trace without ProfilerStep markers, the ``record_function`` name (trailing
    digits as ``*``: ``step_*``) of the top-level annotations that repeat most, at least
    twice, with how many: what ``annotation_steps`` would take as steps if asked. Only a
    hint: the user knows whether those spans are the training steps."""
    counts: dict[str, int] = {}
    for e in _outermost_annotations(threads, _users_annotation):
        name = _TRAILING_NUMBER.sub("*", e.name)
        counts[name] = counts.get(name, 0) + 1
    if not counts:
        return None
    name = max(counts, key=counts.__getitem__)  # the first seen of the most frequent
    return (name, counts[name]) if counts[name] >= 2 else None


def _users_annotation(name: str) -> bool:
    """Not one torch makes itself (``enumerate(DataLoader)#...``, ``Optimizer.step#...``):
    a loader's fetches repeat once more than the steps, and are no step."""
    return not name.startswith(TORCH_OWN_ANNOTATIONS)


def build_timeline(data: TraceData, step_annotation: str | None = None) -> Timeline:
    """Arrange the decoded events of one trace; linear in the number of events (plus sorts).

    Complete events come sorted by category (the reader does it as it reads); each
    category is handled with its class decided once, not per event. ``step_annotation``:
    in a trace without ProfilerStep markers, the ``record_function`` name (or shell
    pattern) whose spans are the steps (``annotation_steps``).
    """
    by_kind = data.by_kind or events_by_kind(data.events)
    buckets, flow_starts = by_kind.by_category, by_kind.flow_starts
    names = _names(by_kind.metadata)
    process_labels, thread_names = names.process_labels, names.thread_names
    npu_task_processes, npu_of = names.npu_task_processes, names.npu_of
    builder = _Builder()
    # Each NPU by its number, not by the process id torch_npu files its tasks under ("NPU
    # 3254508960 stream 2" named no device a user knows).
    builder.device_numbers, npu_of = _npu_numbers(npu_task_processes, npu_of)
    class_of = {cat: category_class(cat) for cat in buckets}
    for cat, events in buckets.items():
        base = class_of[cat]
        if base == OTHER and npu_task_processes:
            events = builder.take_npu_tasks(events)
        if base in (OP, ANNOTATION, PYTHON, OTHER):
            builder.add_host(base, events)
        elif base == IGNORED:
            continue
        elif base == RUNTIME:
            builder.add_runtime(events)
        else:
            builder.add_device(cat, events)

    builder.fold_runtime_threads()
    runtime_names: set[str] = set()
    for thread in builder.threads.values():
        runtime_names.update(r.name for r in thread.runtime)
        _sweep(thread, class_of)
    builder.add_npu_tasks(bool(runtime_names) or names.npu_calls_recorded)
    flow_correlation: dict[tuple[Any, Any, float], Any] = {}
    if builder.needs_flows:
        for flow in flow_starts:
            if flow.cat == "ac2g":
                flow_correlation[(flow.pid, flow.tid, flow.ts)] = flow.id
    lane_device, lane_activity, device_activity = builder.device_activity()
    steps = builder.steps
    steps.sort(key=lambda s: s.ts)
    steps_from = None
    step_names: list[str] = []
    step_hint = None
    if not steps:
        if step_annotation:
            steps, step_names = annotation_steps(builder.threads, step_annotation)
            steps_from = step_annotation if steps else None
        if not steps:
            step_hint = repeated_annotation(builder.threads)
    # A schedule whose next cycle starts as the loop ends (``repeat=0``, the default) makes
    # the profiler's exit write a trace of that one closing step: counted, each such trace
    # added a step to its run (363 item() calls over 3 steps read as 90.8 per step).
    only_closing_step = False
    if _a_tail_after_the_loop(steps, builder.threads):
        steps.pop()
    elif steps and _closed_by_the_profiler(steps[-1], builder.threads):
        if len(steps) > 1:
            steps.pop()
        elif steps[0].number > 0 and _no_program_work(builder.threads):
            # Alone in its trace, the closing step follows a cycle written before it (its
            # number is past 0), and the trace holds none of the program's work around it.
            only_closing_step = True
            steps.pop()
    has_gpu_activity = bool(device_activity)
    device_kind = device_kind_of(
        runtime_names, has_gpu_activity, process_labels.values(), bool(builder.device_numbers)
    )
    device_name = None
    if device_kind != "cpu":  # deviceProperties lists GPUs present, not used ones
        device_name = next((str(p["name"]) for p in data.device_properties if p.get("name")), None)
    return Timeline(
        path=data.path,
        threads=builder.threads,
        lanes=builder.lanes,
        lane_activity=lane_activity,
        lane_device=lane_device,
        device_activity=device_activity,
        by_correlation=builder.by_correlation,
        steps=steps,
        span=builder.span(device_activity),
        device_kind=device_kind,
        device_name=device_name,
        has_stacks=builder.has_stacks,
        has_gpu_activity=has_gpu_activity,
        has_runtime=bool(runtime_names),
        event_count=len(data.events),
        process_labels=process_labels,
        thread_names=thread_names,
        flow_correlation=flow_correlation,
        torch_version=data.torch_version,
        only_closing_step=only_closing_step,
        steps_from_annotation=steps_from,
        step_annotation_names=step_names,
        step_annotation_hint=step_hint,
        npu_of_process=npu_of if builder.device_numbers else {},
        _step_starts=[s.ts for s in steps],
    )
