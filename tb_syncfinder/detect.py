"""Find the blocking host-device synchronizations of a timeline, one episode per
invocation of the outermost operator (or per standalone API call outside any operator).

What blocks the host (``../shared/KINETO_NOTES.md``; the names are ``catalogue``'s):

* explicit waits: ``cudaDeviceSynchronize`` / ``cudaStreamSynchronize`` /
  ``cudaEventSynchronize``, their ``cu*`` driver and ``hip*`` forms, and torch_npu's
  ``AscendCL@aclrtSynchronize*``;
* synchronous copies (``cudaMemcpy``, ``hipMemcpy``, ``hipMemcpyWithStream``) and
  ``cudaMemcpyAsync`` whose device side is a copy into / out of pageable host memory
  (``Memcpy DtoH (Device -> Pageable)``, ``Memcpy HtoD (Pageable -> Device)``), or that is
  followed by a stream sync inside the same operator (the ``.item()`` / ``.cpu()`` pattern);
* any runtime call joined by correlation to a CUPTI ``cuda_sync`` record (``Stream Sync``,
  ``Event Sync``, ``Context Sync``), except ``cudaEventQuery`` and ``Stream Wait Event``,
  which never block the host;
* allocator calls inside a step (``cudaMalloc``/``cudaFree``/``cudaHostAlloc``/
  ``cudaFreeHost`` and the hip forms): the driver synchronizes the device for them.

A pinned ``non_blocking`` copy (``Memcpy HtoD (Pinned -> Device)`` from ``cudaMemcpyAsync``)
is not a sync.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from tb_syncfinder import catalogue
from tb_syncfinder.catalogue import (
    ALLOCATOR_APIS,
    ASYNC_COPY_APIS,
    BACKWARD_OP_PREFIX,
    BLOCKING_SYNC_RECORDS,
    COPY_OPS,
    DATALOADER_FETCH,
    INDEX_PUT_IMPL,
    LATENT_CPU_ONLY_READS,
    LATENT_TRIGGERS,
    LIFTED_NUMBER,
    NON_BLOCKING_APIS,
    OP_KINDS,
    SYNC_COPY_APIS,
    is_explicit_sync_api,
)
from tb_syncfinder.reader import ONE_HOT, Event
from tb_syncfinder.timeline import ANNOTATION, OP, PYTHON, HostThread, Timeline, correlation_of

if TYPE_CHECKING:
    from tb_syncfinder.models import Attribution, Source


class Call(msgspec.Struct):
    """One blocking (or grouped) runtime call, with what it did on the device."""

    event: Event
    device_events: list[Event]
    reason: str  # "sync", "copy", "allocator", "cuda_sync"
    direction: str | None = None  # "DtoH", "HtoD", "DtoD" for copies


class Episode(msgspec.Struct):
    """All blocking calls of one outermost-operator invocation (or one bare call)."""

    thread: HostThread
    calls: list[Call]
    anchor: int  # node index the episode hangs from (innermost enclosing node), -1 = none
    outer_op: int  # node index of the outermost operator, -1 for a bare call
    kind: str = ""
    latent: bool = False
    trigger: int = -1  # node index of the trigger op (latent episodes)
    # A latent finding of a recorded Tensor method call (``catalogue.LATENT_TENSOR_METHODS``):
    # its name, ``tolist``, and the call's node; "" and -1 otherwise.
    method: str = ""
    call: int = -1
    # A ``.tolist()`` called right after a ``.cpu()`` by the same caller, nothing between:
    # that call's node (``x.cpu().tolist()`` unless the source shows two lines,
    # ``one_copy_per_chain``), else -1.
    after_cpu: int = -1
    # A copy whose direction no record gave (``copy_direction_guessed``): its kind says
    # device-to-host, a guess.
    direction_guessed: bool = False

    @property
    def ts(self) -> float:
        if self.calls:
            return self.calls[0].event.ts
        return self.thread.starts[self.trigger]

    @property
    def end(self) -> float:
        if self.calls:
            return max(c.event.ts + c.event.dur for c in self.calls)
        return self.thread.ends[self.trigger]


def _copy_direction(name: str) -> str | None:
    if "DtoH" in name or "Device -> Pageable" in name or "Device -> Pinned" in name:
        return "DtoH"
    if "HtoD" in name:
        return "HtoD"
    if "DtoD" in name or "PtoP" in name:
        return "DtoD"
    return None


_HIP_KIND = {"1": "HtoD", "2": "DtoH", "3": "DtoD", 1: "HtoD", 2: "DtoH", 3: "DtoD"}


def _classify_call(tl: Timeline, thread: HostThread, e: Event) -> Call | None:
    """A Call if this runtime event blocks the host (or may, pending grouping), else None."""
    name = e.name
    if name in NON_BLOCKING_APIS:
        return None
    device_events = tl.device_events(e, thread)
    if is_explicit_sync_api(name):
        return Call(e, device_events, "sync")
    if name in SYNC_COPY_APIS or name in ASYNC_COPY_APIS:
        direction = None
        pageable = False
        for d in device_events:
            if d.cat != "cuda_sync":
                direction = direction or _copy_direction(d.name)
                pageable = pageable or "Pageable" in d.name
        if direction is None and e.args is not None and e.args.kind in _HIP_KIND:
            direction = _HIP_KIND[e.args.kind]
        if name in SYNC_COPY_APIS:
            return Call(e, device_events, "copy", direction)
        if pageable and direction in ("DtoH", "HtoD"):
            return Call(e, device_events, "copy", direction)
        # Maybe blocking: only if a stream sync follows inside the same operator.
        return Call(e, device_events, "maybe_copy", direction)
    if name in ALLOCATOR_APIS:
        return Call(e, device_events, "allocator")
    for d in device_events:
        if d.cat == "cuda_sync":
            record = d.args.cuda_sync_kind if d.args is not None else None
            if (record or d.name) in BLOCKING_SYNC_RECORDS:
                return Call(e, device_events, "cuda_sync")
    return None


# Slack (us) between clocks and records: a device activity must run this long past a call's
# return for the call to count as not having waited for it.
_RAN_THROUGH_US = 5.0


def _device_ran_through(tl: Timeline, call: Event, launched_at: dict[Any, float]) -> bool:
    """True when device work launched before an allocator call was still running when the
    call returned: the call did not wait for the device to drain, whatever the driver may do
    in other cases (``cudaHostAlloc`` while a GPU-bound program's queue runs takes
    milliseconds to pin pages, not to wait). ``launched_at``: correlation -> launch time
    (``_launch_times``)."""
    device = tl.default_device()
    returned = call.ts + call.dur
    for lane, events in tl.lane_activity.items():
        if tl.lane_device.get(lane, lane[0]) != device:
            continue
        n = bisect_right(events, returned, key=_start_of)
        # FIFO: of a stream's activity only the last to start before the return can still run.
        if n and events[n - 1].ts + events[n - 1].dur > returned + _RAN_THROUGH_US:
            corr = correlation_of(events[n - 1])
            if launched_at.get(corr, call.ts) < call.ts:
                return True
    return False


def _launch_times(tl: Timeline) -> dict[Any, float]:
    """Correlation -> launch time of every runtime call that has one."""
    launched_at: dict[Any, float] = {}
    for thread in tl.threads.values():
        for e in thread.runtime:
            corr = tl.correlation(e, thread)
            if corr is not None:
                launched_at.setdefault(corr, e.ts)
    return launched_at


def _start_of(event: Event) -> float:
    return event.ts


def _outermost_op(thread: HostThread, index: int) -> int:
    """The outermost operator of the call that ran node ``index``: up to the first Python
    frame above it. An operator holding Python code (a ``torch.autograd.Function``'s
    ``apply``, recorded under its class's name; a compiled graph's ``CompiledFunction``)
    makes several calls, each its own sync: linear_operator's conjugate gradients read
    their residual every iteration inside one ``InvQuadLogdet`` (a walk: 5 of 85 reads
    were counted)."""
    outer = -1
    kinds = thread.kinds
    parent = thread.parent
    while index >= 0:
        kind = kinds[index]
        if kind == OP:
            outer = index
        elif kind == PYTHON and outer >= 0:
            break
        index = parent[index]
    return outer


def op_chain(thread: HostThread, index: int) -> list[int]:
    """Operator node indices enclosing ``index`` (inclusive), outermost first."""
    chain = []
    kinds = thread.kinds
    parent = thread.parent
    while index >= 0:
        if kinds[index] == OP:
            chain.append(index)
        index = parent[index]
    chain.reverse()
    return chain


def innermost_annotation(thread: HostThread, index: int) -> str | None:
    """The name of the innermost record_function annotation enclosing ``index`` (not a
    ProfilerStep), or None."""
    kinds = thread.kinds
    parent = thread.parent
    nodes = thread.nodes
    while index >= 0:
        if kinds[index] == ANNOTATION and not nodes[index].name.startswith("ProfilerStep#"):
            return nodes[index].name
        index = parent[index]
    return None


def classify(op_names: list[str], calls: list[Call], annotation: str | None = None) -> str:
    """The finding kind: by the operator chain first (what synced: the catalogue's
    precedence over every operator of the chain, so a trace from any device gives one kind),
    then whether it waits on a collective (a c10d operator around it, or its innermost
    annotation), then the API / copy direction."""
    op_kinds = {OP_KINDS[name] for name in op_names if name in OP_KINDS}
    for op_kind in catalogue.OP_KIND_PRECEDENCE:
        if op_kind in op_kinds:
            return op_kind
    if any(catalogue.is_collective_op(name) for name in op_names) or (
        annotation is not None and catalogue.is_collective_wait_annotation(annotation)
    ):
        return catalogue.COLLECTIVE_WAIT
    directions = [c.direction for c in calls if c.reason in ("copy", "maybe_copy")]
    if "DtoH" in directions:
        return catalogue.DEVICE_TO_HOST_COPY
    if "HtoD" in directions:
        return catalogue.BLOCKING_HOST_TO_DEVICE
    if calls and all(c.reason == "allocator" for c in calls):
        return catalogue.ALLOCATOR_SYNC
    if any(name in COPY_OPS for name in op_names):
        # A stream sync inside .to()/.cpu()/copy_: a device-to-host copy whose device side
        # was not recorded (or a DtoD copy made synchronous by a non_blocking=False .to()).
        return catalogue.DEVICE_TO_HOST_COPY
    if any(c.reason == "allocator" for c in calls) and not any(
        c.reason in ("sync", "cuda_sync") for c in calls
    ):
        return catalogue.ALLOCATOR_SYNC
    return catalogue.EXPLICIT_SYNC


def copy_direction_guessed(op_names: list[str], calls: list[Call], kind: str) -> bool:
    """Whether ``classify`` gave a copy's kind without a record of its direction: a stream
    sync inside ``.to()`` / ``copy_`` where neither the runtime call nor a device copy
    record says which way it went (a trace without CUPTI's copy records, torch_npu's
    host side), taken as a copy to the host, which a host-to-device upload also looks like."""
    if kind != catalogue.DEVICE_TO_HOST_COPY:
        return False
    if any(name in OP_KINDS for name in op_names):
        return False
    directions = [c.direction for c in calls if c.reason in ("copy", "maybe_copy")]
    return not any(directions) and any(name in COPY_OPS for name in op_names)


# torch_npu's copy tasks say which way they went ("memcpy direction").
_NPU_COPY_DIRECTIONS = {"host to device": "HtoD", "device to host": "DtoH"}


def _npu_copies(tl: Timeline) -> tuple[list[float], list[str]]:
    """The starts and directions of the NPU's copy tasks that give one, sorted by start."""
    copies = sorted(
        (e.ts, _NPU_COPY_DIRECTIONS[e.args.memcpy_direction])
        for events in tl.lanes.values()
        for e in events
        if e.args is not None and e.args.memcpy_direction in _NPU_COPY_DIRECTIONS
    )
    return [ts for ts, _ in copies], [direction for _, direction in copies]


def _copy_told_by_the_npu(episode: Episode, copies: tuple[list[float], list[str]]) -> None:
    """A guessed copy's direction from the NPU's copy tasks that started between its
    operator's start and the end of the wait (the copy the sync waited for): torch_npu's
    host side shows a ``.to()`` only as a stream sync, its "Ascend Hardware" rows say which
    way it went. An upload is a blocking host-to-device copy (pageable memory); where the
    tasks disagree, or none started then, the guess stays, said."""
    starts, directions = copies
    thread = episode.thread
    start = thread.starts[episode.outer_op] if episode.outer_op >= 0 else episode.ts
    found = set(directions[bisect_left(starts, start) : bisect_right(starts, episode.end)])
    if len(found) != 1:
        return
    episode.direction_guessed = False
    if found == {"HtoD"}:
        episode.kind = catalogue.BLOCKING_HOST_TO_DEVICE


def detect_syncs(tl: Timeline) -> list[Episode]:
    """Every blocking episode of the trace, in time order."""
    episodes: list[Episode] = []
    has_steps = bool(tl.steps)
    # Correlations of blocking CUPTI sync records: a runtime call joined to one of them
    # blocks whatever its name (most runtime calls are launches: filter by name first).
    sync_record_corrs = {
        correlation_of(d)
        for events in tl.lanes.values()
        for d in events
        if d.cat == "cuda_sync"
        and ((d.args.cuda_sync_kind if d.args is not None else None) or d.name)
        in BLOCKING_SYNC_RECORDS
    }
    sync_record_corrs.discard(None)
    # Correlation -> launch time, for allocator calls: built at the first one. (Refilled
    # while empty, it was a pass over every runtime call per allocator call in a trace whose
    # calls have no correlation: 34 s for 4,000 steps.)
    launched_at: dict[Any, float] | None = None
    # The NPU's copy tasks with their direction, by start: built at the first copy of an
    # NPU trace whose direction the host side does not give.
    npu_copies: tuple[list[float], list[str]] | None = None
    for thread in tl.threads.values():
        groups: dict[int, Episode] = {}
        pending_copies: dict[int, list[Call]] = {}  # outer op -> async copies not yet proven
        thread_episodes: list[Episode] = []
        if sync_record_corrs:
            candidates = [
                e
                for e in thread.runtime
                if catalogue.may_block(e.name) or tl.correlation(e, thread) in sync_record_corrs
            ]
        else:
            candidates = [e for e in thread.runtime if catalogue.may_block(e.name)]
        for e in candidates:
            call = _classify_call(tl, thread, e)
            if call is None:
                continue
            end = e.ts + e.dur
            anchor = thread.innermost(e.ts, end)
            outer = _outermost_op(thread, anchor)
            if call.reason == "allocator" and has_steps and tl.step_at(e.ts) is None:
                continue  # allocations during warm-up / outside steps are expected
            if call.reason == "allocator":
                if launched_at is None:
                    launched_at = _launch_times(tl)
                if _device_ran_through(tl, e, launched_at):
                    continue  # the device never drained: this call did not wait for it
            if call.reason == "maybe_copy":
                if outer >= 0:
                    pending_copies.setdefault(outer, []).append(call)
                continue
            episode = groups.get(outer) if outer >= 0 else None
            if episode is None:
                episode = Episode(thread, [], anchor, outer)
                if outer >= 0:
                    groups[outer] = episode
                thread_episodes.append(episode)
            if call.reason in ("sync", "cuda_sync") and outer in pending_copies:
                # The async copy that this stream sync waited for belongs to the episode.
                episode.calls.extend(pending_copies.pop(outer))
            episode.calls.append(call)
        for episode in thread_episodes:
            episode.calls.sort(key=lambda c: c.event.ts)
            names = [thread.nodes[i].name for i in op_chain(thread, episode.anchor)]
            episode.kind = classify(
                names, episode.calls, innermost_annotation(thread, episode.anchor)
            )
            episode.direction_guessed = copy_direction_guessed(names, episode.calls, episode.kind)
            if episode.direction_guessed and tl.device_kind == "npu":
                if npu_copies is None:
                    npu_copies = _npu_copies(tl)
                _copy_told_by_the_npu(episode, npu_copies)
        episodes.extend(thread_episodes)
    episodes.sort(key=lambda ep: ep.ts)
    return episodes


def _first_aten_op(thread: HostThread, index: int, outer: int) -> int:
    """The outermost ``aten::`` operator between ``outer`` and ``index`` (``index`` itself
    where there is none)."""
    chain = thread.ancestors(index)  # innermost first
    inside = chain[: chain.index(outer)] if outer in chain else chain
    for j in reversed(inside):
        if thread.nodes[j].name.startswith("aten::"):
            return j
    return index


def detect_latent(tl: Timeline) -> list[Episode]:
    """Operators that would sync on a GPU, in a trace with no GPU at all (zero cost).

    Only operators that *always* sync when their inputs are on a GPU are listed: on a CPU
    trace we cannot tell where a tensor would live, so ``.to()`` and friends are left out;
    so are ``.cpu()`` and ``.tolist()``, which always copy a GPU tensor back, unless the
    trace recorded them as calls (``with_stack``: ``catalogue.LATENT_TENSOR_METHODS``).
    """
    if tl.has_gpu_activity or tl.has_runtime:
        return []
    episodes: list[Episode] = []
    for thread in tl.threads.values():
        by_outer: dict[int, list[Episode]] = {}
        closures: dict[int, bool] = {}  # optimizer span -> whether a closure ran in it
        nodes = thread.nodes
        kinds = thread.kinds
        for i, node in enumerate(nodes):
            if kinds[i] == PYTHON:
                method = catalogue.tensor_method(node.name)
                if method in catalogue.LATENT_TENSOR_METHODS and not any(
                    # Under a TorchFunctionMode (``with torch.device(...)``) the call is
                    # recorded again inside its ``__torch_function__``: one copy.
                    kinds[j] == PYTHON and catalogue.tensor_method(nodes[j].name) == method
                    for j in thread.ancestors(i)[1:]
                ):
                    episodes.append(_latent_tensor_method(thread, i, method))
                continue
            if kinds[i] != OP or node.name not in LATENT_TRIGGERS:
                continue
            if node.name == "aten::repeat_interleave":
                # Its CPU kernel reads the repeats' total (``cumsum[-1].item()``) where a
                # GPU's waits, and only there: not with ``output_size=`` (an H200 warned
                # there at none), not with int repeats. That read, inside it, is the finding.
                continue
            if any(nodes[j].name in LATENT_CPU_ONLY_READS for j in thread.ancestors(i)[1:]):
                continue
            if node.name in catalogue.SCALAR_OPS and (
                any(
                    nodes[j].name in catalogue.LATENT_CPU_ONLY_SCALAR_READS
                    for j in thread.ancestors(i)[1:]
                )
                or assigns_a_host_number(thread, i)
                or _read_by_one_hot_given_its_classes(thread, i)
                or (
                    not tl.has_stacks
                    and (
                        draws_a_host_seed(thread, i)
                        or in_a_dataloader_fetch(thread, i)
                        or reads_a_host_step_counter(thread, i, closures)
                    )
                )
            ):
                continue
            outer = _outermost_op(thread, i)
            found = by_outer.get(outer)
            if found is not None:
                ancestors = thread.ancestors(i)
                nested = next((e for e in found if e.trigger in ancestors), None)
                if nested is not None:
                    # One finding per outermost operator invocation; its trigger is the
                    # deepest triggering op (aten::item -> aten::_local_scalar_dense).
                    nested.trigger = nested.anchor = i
                    continue
                if not nodes[outer].name.startswith(BACKWARD_OP_PREFIX):
                    continue
                # A backward node's aten operators apart (autograd's ``CopySlices`` running
                # an ``index`` and an ``index_put`` with one mask): each waits on a GPU (an
                # Avalanche walk: 3 ``nonzero`` a step counted as 2). Not reads inside one
                # operator's CPU kernel (``matrix_exp``'s backward: 6 ``nonzero`` on the CPU,
                # one copy to the host on CUDA: a review).
                operator = _first_aten_op(thread, i, outer)
                if any(_first_aten_op(thread, e.trigger, outer) == operator for e in found):
                    continue
            episode = Episode(thread, [], i, outer, latent=True, trigger=i)
            by_outer.setdefault(outer, []).append(episode)
            episode.after_cpu = _item_after_cpu(thread, outer)
            episodes.append(episode)
        for episode in (e for found in by_outer.values() for e in found):
            names = [nodes[j].name for j in op_chain(thread, episode.trigger)]
            episode.kind = classify(names, [])
            ctc = next(
                (catalogue.LATENT_CTC_KINDS[n] for n in names if n in catalogue.LATENT_CTC_KINDS),
                None,
            )
            if ctc is not None:
                episode.kind = ctc  # copies inside it, as a GPU trace shows them
            if episode.kind == catalogue.SCALAR_READBACK and INDEX_PUT_IMPL in names:
                # ``x[mask] = t`` of a tensor (a number is left out above): the CPU kernel
                # reads the value, a GPU's takes the mask's ``nonzero`` instead (its fill
                # needs a host number), as a GPU trace shows it.
                episode.kind = catalogue.DYNAMIC_SHAPE
    episodes.sort(key=lambda ep: ep.ts)
    return episodes


def _latent_tensor_method(thread: HostThread, index: int, method: str) -> Episode:
    """The latent finding of a recorded ``.cpu()`` / ``.tolist()`` call (node ``index``):
    anchored at the copy operator it ran, where it ran one (``.cpu()``'s ``aten::to``: the
    chain and site key a GPU trace gives the same line), else at the call itself."""
    anchor = index
    end = thread.ends[index]
    for j in range(index + 1, len(thread.nodes)):
        if thread.starts[j] > end:
            break
        if thread.kinds[j] == OP:
            if thread.nodes[j].name in COPY_OPS:
                anchor = j
            break
    episode = Episode(
        thread, [], anchor, _outermost_op(thread, anchor), latent=True, trigger=anchor
    )
    episode.kind = catalogue.LATENT_TENSOR_METHODS[method][0]
    episode.method = method
    episode.call = index
    if method == "tolist":
        episode.after_cpu = _cpu_call_before(thread, index)
    return episode


def _item_after_cpu(thread: HostThread, outer: int) -> int:
    """For the operator ``outer`` run by a recorded ``.item()`` call made right after a
    ``.cpu()`` by the same caller (``x.cpu().item()``): that ``.cpu()``'s node; else -1. On a
    GPU the ``.item()`` then reads the host tensor ``.cpu()`` returned: one copy, one wait."""
    call = thread.parent[outer]
    if call < 0 or thread.kinds[call] != PYTHON:
        return -1
    if catalogue.tensor_method(thread.nodes[call].name) != "item":
        return -1
    return _cpu_call_before(thread, call)


# Recorded Tensor methods that copy to the host, after which a ``.tolist()`` or ``.item()``
# reads a host tensor.
_COPY_METHODS = frozenset({"cpu", "to"})


def _cpu_call_before(thread: HostThread, index: int) -> int:
    """The node of a recorded ``.cpu()`` that the same caller made right before the call at
    ``index``, nothing called between; else -1."""
    parent = thread.parent[index]
    for j in range(index - 1, parent, -1):
        if thread.parent[j] == parent:
            called = catalogue.tensor_method(thread.nodes[j].name)
            # ``.to()`` too: one to the host is kept as a copy by its line, else dropped
            # before ``one_copy_per_chain`` looks for it (``x.to(dtype).tolist()`` copies).
            return j if thread.kinds[j] == PYTHON and called in _COPY_METHODS else -1
    return -1


def one_copy_per_chain(
    episodes: list[Episode],
    attributions: list[Attribution],
    sources: list[Source | None],
    line_text: Callable[[Source | None], str | None] = lambda source: None,
) -> tuple[list[Episode], list[Attribution], list[Source | None]]:
    """One latent copy for a recorded ``.tolist()`` or ``.item()`` made right after a
    ``.cpu()`` by the same caller, nothing called between (``Episode.after_cpu``): on a GPU
    ``x.cpu().tolist()`` copies and waits once, in ``.cpu()``; its ``.tolist()`` reads the
    host tensor ``.cpu()`` returned (so does ``x.cpu().item()``'s ``.item()``). The
    ``.tolist()`` is left out and named on the ``.cpu()``'s finding (its ``apis``:
    ``Tensor.cpu``, ``Tensor.tolist``), unless the source shows the two calls at
    different exact lines (``c = x.cpu()`` then ``y.tolist()``, which may read another GPU
    tensor): then both stay.

    So a count does not hang on the source being found. Where it is not (or does not single
    out both lines) the trace's order is all there is to go by, and it reads as the chain the
    source shows for ``x.cpu().tolist()``: one copy, at an inexact line; the finding names
    both calls."""
    cpu_at = {
        (id(episode.thread), episode.call): n
        for n, episode in enumerate(episodes)
        if episode.method in _COPY_METHODS
    }
    kept = []
    for n, (episode, source) in enumerate(zip(episodes, sources, strict=True)):
        cpu = cpu_at.get((id(episode.thread), episode.after_cpu), -1)
        if (
            episode.after_cpu >= 0
            and cpu >= 0
            and not _lines_apart(sources[cpu], source)
            and (episode.method or _reads_the_copy(line_text(source)))
        ):
            apis = attributions[cpu].apis
            # A recorded method is named so already (``Tensor.tolist``); an ``.item()`` is
            # found by its operator.
            api = attributions[n].api if episode.method else "Tensor.item"
            if api not in apis:
                apis.append(api)
            continue
        kept.append(n)
    return (
        [episodes[n] for n in kept],
        [attributions[n] for n in kept],
        [sources[n] for n in kept],
    )


# ``x.cpu().item()``, ``x.to("cpu").item()``: the read is of the copy's result.
_CHAINED_READ = re.compile(r"\.(?:cpu\(\s*\)|to\([^()]*\))\s*\.item\(")


def _reads_the_copy(line: str | None) -> bool:
    """Whether an ``.item()`` right after a copy reads that copy's result: its line chains
    the two, or the line is not read (the trace's order is all there is). Not
    ``return preds.cpu(), loss.item()``, another tensor's read."""
    return line is None or _CHAINED_READ.search(line) is not None


def _lines_apart(first: Source | None, second: Source | None) -> bool:
    """Whether the source shows two calls at different lines: both exact, not the same."""
    if first is None or second is None or not (first.line_exact and second.line_exact):
        return False
    return (first.file, first.line) != (second.file, second.line)


def unjudged_uploads(
    tl: Timeline, episodes: list[Episode], within: tuple[float, float] | None = None
) -> tuple[int, float]:
    """(count, host time in them, us) of the asynchronous host-to-device copies in no
    episode whose device side does not say whether the host memory was pinned (ROCm's
    ``Memcpy HtoD (Host -> Device)``; CUDA's names ``Pinned`` or ``Pageable``): from
    pageable memory such a copy blocks the host, which the trace cannot show. ``within``:
    only calls starting in that time range (a window's own steps)."""
    if tl.device_kind != "rocm":
        return 0, 0.0
    in_episodes = {id(c.event) for e in episodes for c in e.calls}
    count, host_us = 0, 0.0
    for thread in tl.threads.values():
        for e in thread.runtime:
            if e.name not in ASYNC_COPY_APIS or id(e) in in_episodes:
                continue
            if within is not None and not within[0] <= e.ts < within[1]:
                continue
            names = [d.name for d in tl.device_events(e, thread) if d.cat != "cuda_sync"]
            direction = next(filter(None, map(_copy_direction, names)), None)
            if direction is None and e.args is not None and e.args.kind in _HIP_KIND:
                direction = _HIP_KIND[e.args.kind]
            if direction != "HtoD" or any("Pinned" in n or "Pageable" in n for n in names):
                continue
            count += 1
            host_us += e.dur
    return count, host_us


def _read_by_one_hot_given_its_classes(thread: HostThread, i: int) -> bool:
    """Whether the read ``i`` is ``F.one_hot(x, num_classes=N)``'s own (its nearest
    enclosing operator that is not a read: a read a tensor subclass's Python makes inside
    it is still one on CUDA)."""
    nodes = thread.nodes
    for j in thread.ancestors(i)[1:]:
        if nodes[j].name not in catalogue.SCALAR_OPS:
            return _one_hot_given_its_classes(nodes[j])
    return False


def _one_hot_given_its_classes(node: Event) -> bool:
    """Whether ``node`` is an ``F.one_hot(x, num_classes=N)`` (its ``Concrete Inputs``, with
    ``record_shapes``): its CPU kernel reads the range to check it, its CUDA kernel reads
    nothing (an H200 warned at none). Without the inputs it cannot be told: still listed."""
    if node.name != ONE_HOT or node.args is None:
        return False
    concrete = node.args.concrete_inputs
    if not isinstance(concrete, list) or len(concrete) < 2:
        return False
    try:
        return int(concrete[1]) != -1
    except (TypeError, ValueError):
        return False


def draws_a_host_seed(thread: HostThread, i: int) -> bool:
    """Whether the read ``i`` is the ``.item()`` of ``torch.empty((), dtype=torch.int64)
    .random_()``, its sibling operators right before it (``catalogue.HOST_SEED_DRAW``):
    torch's DataLoader and samplers drawing a seed on the host. Only for a trace without
    stacks, where nothing else tells it from the program's own reads; a program drawing
    that way on a GPU tensor is taken for a host draw too."""
    nodes = thread.nodes
    outer = _outermost_op(thread, i)
    *before, read = catalogue.HOST_SEED_DRAW
    if nodes[outer].name != read:
        return False
    parent = thread.parent[outer]
    for k in range(outer - 1, parent, -1):  # no sibling starts before the parent
        if thread.parent[k] != parent:
            continue  # inside an earlier sibling
        if nodes[k].name != before.pop():
            return False
        if not before:
            return True
    return False


def in_a_dataloader_fetch(thread: HostThread, i: int) -> bool:
    """Whether the read ``i`` ran inside a DataLoader's fetch (its ``__next__`` span,
    ``DATALOADER_FETCH``): the dataset's and its transforms' work, on host tensors
    by construction (``catalogue.HOST_ONLY_LIBRARY_DIRS``: a trace with stacks tells it by
    ``torch/utils/data``'s frames; without stacks the span is all there is)."""
    nodes, kinds = thread.nodes, thread.kinds
    return any(
        kinds[j] == ANNOTATION and nodes[j].name.startswith(DATALOADER_FETCH)
        for j in thread.ancestors(i)[1:]
    )


def reads_a_host_step_counter(thread: HostThread, i: int, closures: dict[int, bool]) -> bool:
    """Whether the read ``i`` is directly inside the step of one of torch's optimizers
    that keep their step counters on the host (``catalogue.HOST_STEP_OPTIMIZER_SPANS``),
    where no closure ran: ``_get_value``'s ``step.item()``, once per parameter. For a trace
    without stacks, where the span is all there is to tell it by. ``closures`` caches, per
    span, whether a backward ran inside it."""
    nodes = thread.nodes
    span = thread.parent[_outermost_op(thread, i)]
    if span < 0 or nodes[span].name not in catalogue.HOST_STEP_OPTIMIZER_SPANS:
        return False
    closure = closures.get(span)
    if closure is None:
        starts, end = thread.starts, thread.ends[span]
        closure = False
        for k in range(span + 1, len(nodes)):
            if starts[k] > end:
                break
            if nodes[k].name.startswith(BACKWARD_OP_PREFIX):
                closure = True
                break
        closures[span] = closure
    return not closure


def assigns_a_host_number(thread: HostThread, i: int) -> bool:
    """Whether the read ``i`` is inside an indexed assignment of a Python number
    (``x[mask] = 0``): its ``index_put_`` follows the number's ``aten::lift_fresh`` (with an
    ``aten::to`` between for an int). On CUDA that is a ``masked_fill_`` of a host number,
    no read; ``x[mask] = t`` of a tensor lifts nothing, and runs ``nonzero`` there."""
    nodes = thread.nodes
    ancestors = thread.ancestors(i)
    if not any(nodes[j].name == INDEX_PUT_IMPL for j in ancestors):
        return False
    outer = _outermost_op(thread, i)  # the index_put_ of the assignment
    parent = thread.parent[outer]
    seen = 0
    for k in range(outer - 1, -1, -1):
        if thread.parent[k] != parent:
            continue  # inside an earlier sibling
        if nodes[k].name == LIFTED_NUMBER:
            return True
        seen += 1
        if seen >= 2 or nodes[k].name not in ("aten::to", "aten::_to_copy"):
            return False
    return False
