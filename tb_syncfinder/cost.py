"""What the syncs cost: host wait, the GPU bubble after each, per-step totals and the
estimated saving.

* ``host_wait_us``: summed duration of the blocking calls of the episode (the time the
  host thread sat inside them).
* ``gpu_idle_after_us``: on the sync's device, from the end of the sync to the start of the
  next device activity on any stream of that device, capped at the end of the step (or the
  trace). Zero when the device is still busy with earlier work when the sync returns.
* Estimated saving: per step, the union of the intervals ``[sync end - host wait, sync end
  + idle]`` (host blocked, then GPU starved while the host catches up). Taking the union
  means a wait that overlaps the bubble of the previous sync is counted once. It is an upper
  bound: it assumes that without the sync the host would have kept the GPU fed through that
  time.
* Totals of GPU idle (per step, per site, per report) are the union of the syncs' idle
  intervals per trace and device, not their sum: syncs issued back to back with no device
  work between them all "see" the same bubble, and summing would count it once per sync.
* The profiler's own overhead (``host_event_counts``): every host event the profiler
  recorded inside the profiled steps (operators, Python frames, runtime and driver calls,
  annotations) cost the profiled program time that it does not spend unprofiled:
  ``PROFILER_US_PER_HOST_EVENT`` each, ``PROFILER_US_PER_PYTHON_EVENT`` per Python frame
  (``profiler_overhead_us``), as measured per event on an H100 host. The device's busy time
  per step (per step, the union of the device work launched in it: the replay's
  ``_Graph.busy_us``) bounds what fixing syncs can save without the profiler.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection, Mapping, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from tb_syncfinder.catalogue import (
    NPU_PEER_WAIT_TASK_TYPES,
    QUEUES_NO_DEVICE_WORK,
    READ_ONLY_OPS,
    tensor_method,
)
from tb_syncfinder.detect import Episode
from tb_syncfinder.models import Attribution, StepStats, Sync, SyncCost
from tb_syncfinder.query import union_length
from tb_syncfinder.timeline import OP, PYTHON, Timeline

if TYPE_CHECKING:
    from tb_syncfinder.whatif import StepReplay

NO_STEP = 0  # StepStats.step of the single pseudo-step of a trace without ProfilerStep spans
# What one host event the profiler records costs the profiled program (us), measured on an
# H100 host (docs/validation.md section 5, bench/profiler_overhead.py: profiled vs unprofiled
# launch-bound steps): about 3.5 us per operator, runtime or driver call or annotation (391
# such events per step cost 1.24-1.41 ms without stacks), about 1 us per Python frame (397
# frames and those 391 events cost 1.72 ms with stacks).
PROFILER_US_PER_HOST_EVENT = 3.5
PROFILER_US_PER_PYTHON_EVENT = 1.0
# The report says the profiler's overhead makes the prediction uncertain from this share of
# the mean step on (``Summary.profiler_note``).
PROFILER_NOTE_SHARE = 0.10
# Its host-bound clause: where the replayed step without the program's syncs is longer than
# the device's busy time per step by more than this share of it, the host bounds the step
# under the profiler even without the syncs.
HOST_BOUND_SHARE = 0.20
# "Fix together" (``whatif.fix_together``): a site whose own saving is below this share of
# what fixing it saves with the other sites fixed too, where that is at least this share of
# the mean step, is told which other site waits for the same device work.
FIX_WITH_OWN_SHARE = 0.25
FIX_WITH_STEP_SHARE = 0.05


def _step_ranges(tl: Timeline, numbers: Collection[int] | None) -> list[tuple[float, float]]:
    """The time ranges of the steps (those numbered ``numbers``, None: all), overlapping
    ones joined; the whole trace when it has no step markers."""
    if not tl.steps:
        if tl.only_closing_step:
            return []
        return [tl.span] if numbers is None or NO_STEP in numbers else []
    ranges: list[tuple[float, float]] = []
    for step in tl.steps:  # sorted by start
        if numbers is not None and step.number not in numbers:
            continue
        if ranges and step.ts <= ranges[-1][1]:
            if step.end > ranges[-1][1]:
                ranges[-1] = (ranges[-1][0], step.end)
        else:
            ranges.append((step.ts, step.end))
    return ranges


def host_event_counts(tl: Timeline, numbers: Collection[int] | None = None) -> tuple[int, int]:
    """How many host events the profiler recorded in the steps (``numbers``; None: every
    step, or the whole trace without step markers), and how many of them are Python frames
    (the timeline's ``PYTHON`` nodes), which cost the profiled program less each: on every
    host thread, the operators, annotations (``ProfilerStep#N`` included) and Python frames
    that start in a step, and the runtime and driver calls that do. Device activity, flow
    and metadata events are not host events."""
    ranges = _step_ranges(tl, numbers)
    count = python = 0
    for thread in tl.threads.values():
        for starts in (thread.starts, thread.runtime_starts):
            if not starts:
                continue
            nodes = starts is thread.starts
            for lo, hi in ranges:
                first, end = bisect_left(starts, lo), bisect_left(starts, hi)
                count += end - first
                if nodes and end > first:
                    python += thread.kinds[first:end].count(PYTHON)
    return count, python


def profiler_overhead_us(events: float, python_events: float) -> float:
    """What ``events`` host events, ``python_events`` of them Python frames, cost the
    profiled program (us): ``PROFILER_US_PER_PYTHON_EVENT`` per frame and
    ``PROFILER_US_PER_HOST_EVENT`` per other event."""
    python = min(python_events, events)
    return (events - python) * PROFILER_US_PER_HOST_EVENT + python * PROFILER_US_PER_PYTHON_EVENT


def idle_union_us(syncs: list[Sync]) -> float:
    """GPU idle after these syncs (from each end until its device is busy again), each
    bubble counted once (per trace and device): not all of it caused by them (the replay
    tells that part, ``gpu_idle_from_syncs_us``)."""
    by_device: dict[tuple[str, int | None], list[tuple[float, float]]] = {}
    for sync in syncs:
        if sync.gpu_idle_after_us > 0:
            by_device.setdefault((sync.trace, sync.device_id), []).append(
                (sync.end_us, sync.end_us + sync.gpu_idle_after_us)
            )
    return sum((union_length(intervals) for intervals in by_device.values()), 0.0)


def sync_cost(tl: Timeline, episode: Episode, attribution: Attribution) -> SyncCost:
    """Host wait and the GPU bubble after one sync (zero for a latent one)."""
    if episode.latent or not episode.calls:
        return SyncCost(0.0, 0.0, attribution.device_id)
    host_wait = float(sum(c.event.dur for c in episode.calls))
    device = attribution.device_id
    charged = device
    if device is None or device not in tl.device_activity:
        device = tl.default_device()
        if charged is None:
            charged = device
    if device is None:
        return SyncCost(host_wait, 0.0, charged)
    end = attribution.end_us
    step = tl.step_at(attribution.ts_us)
    cap = step.end if step is not None else tl.span[1]
    busy = tl.device_activity[device].next_busy(end)
    idle_until = cap if busy is None else min(busy, cap)
    return SyncCost(host_wait, max(0.0, float(idle_until - end)), charged)


def reads_right_after(
    episodes: Sequence[Episode], conversions: Sequence[str | None] | None = None
) -> list[int | None]:
    """Of a CPU-only trace's latent reads, for each the index of the one just before it on
    its thread where nothing that queues device work ran between the two, and the read
    itself runs nothing but the read; None otherwise, or where none came before. On a GPU
    the first waits for the device's queue to drain and the next finds it empty
    (ProgressMeter's four formatted meters: one wait, not four). Between them only views
    and allocations (``catalogue.QUEUES_NO_DEVICE_WORK``), Python frames and annotations;
    in the read, those and the read's own operators (``catalogue.READ_ONLY_OPS``): a
    ``nonzero`` or a linear-algebra check runs its own kernels first and waits for them
    (``bench/reads_after_reads_gpu.py`` measures both on recorded GPU traces).
    ``conversions``: per read, the method its line calls on the host copy it made
    (``catalogue.CONVERTED_COPY``: ``.cpu().float()``), whose operators after it queue
    nothing either."""
    after: list[int | None] = [None] * len(episodes)
    by_thread: dict[int, list[tuple[float, float, int]]] = {}
    for n, episode in enumerate(episodes):
        node = episode.outer_op if episode.outer_op >= 0 else episode.anchor
        if node >= 0:
            thread = episode.thread
            spans = by_thread.setdefault(id(thread), [])
            spans.append((thread.starts[node], thread.ends[node], n))
    for spans in by_thread.values():
        spans.sort()
        thread = episodes[spans[0][2]].thread
        starts, kinds, nodes = thread.starts, thread.kinds, thread.nodes
        for (_start, end, before), (start, read_end, n) in zip(spans, spans[1:], strict=False):
            if start < end:
                continue  # one inside the other: not one after the other
            gap = range(bisect_right(starts, end), bisect_left(starts, start))
            read = range(gap.stop, bisect_right(starts, read_end))
            converted = conversions[before] if conversions is not None else None
            if all(
                kinds[i] != OP
                or nodes[i].name in QUEUES_NO_DEVICE_WORK
                or _in_a_method_call(thread, i, "numpy")
                or (converted is not None and _in_a_method_call(thread, i, converted))
                for i in gap
            ) and all(
                kinds[i] != OP
                or nodes[i].name in QUEUES_NO_DEVICE_WORK
                or nodes[i].name in READ_ONLY_OPS
                for i in read
            ):
                after[n] = before
    return after


def _in_a_method_call(thread: Any, node: int, method: str) -> bool:
    """Whether an operator runs inside a call of that tensor method (its Python frame).
    ``numpy``: the host tensor it is given (a copy's result) is only viewed, though its
    ``aten::to`` shows as an operator (a CleanRL walk: the read after
    ``b_values.cpu().numpy()`` was not said to follow it); a conversion of the copy a line
    just made (``.cpu().float()``) runs on the host too."""
    parent = thread.parent[node]
    while parent >= 0 and thread.kinds[parent] == OP:
        parent = thread.parent[parent]
    return (
        parent >= 0
        and thread.kinds[parent] == PYTHON
        and tensor_method(thread.nodes[parent].name) == method
    )


def step_stats(
    tl: Timeline,
    syncs: list[Sync],
    replayed: Mapping[int, StepReplay] | None = None,
    savings: Mapping[int, float] | None = None,
) -> list[StepStats]:
    """Per-step stats of one trace (a single pseudo-step when it has no step markers).

    ``replayed`` (the what-if stage's steps by number) gives each step its device-timeline
    time and ``savings`` what removing every sync saves in it; without them a step's
    ``wall_time_us`` is its host span."""
    stats: dict[int, StepStats] = {}
    if tl.steps:
        for step in tl.steps:
            # Several threads/processes may record the same step number: keep the longest.
            prev = stats.get(step.number)
            if prev is None or prev.step_time_us < step.end - step.ts:
                stats[step.number] = StepStats(
                    step.number, step.end - step.ts, 0, 0.0, 0.0, tl.path
                )
    elif not tl.only_closing_step and tl.records_work:  # the profiler's closing step: none
        stats[NO_STEP] = StepStats(NO_STEP, max(0.0, tl.span[1] - tl.span[0]), 0, 0.0, 0.0, tl.path)
    in_step: dict[int, list[Sync]] = {}
    for sync in syncs:
        number = sync.step if tl.steps else NO_STEP
        st = stats.get(number) if number is not None else None
        if st is None:
            continue  # outside every step (warm-up, after the last step): counted in totals
        st.sync_count += 1
        st.host_wait_us += sync.host_wait_us
        in_step.setdefault(number, []).append(sync)
    for number, members in in_step.items():
        stats[number].gpu_idle_us = idle_union_us(members)
    for number, st in stats.items():
        step = (replayed or {}).get(number)
        st.wall_time_us = st.step_time_us
        if step is not None:
            st.device_time_us = step.recorded_device_us
            st.wall_time_us = max(st.step_time_us, step.recorded_device_us)
            st.replayed_time_us = step.replayed_us
            st.predicted_saving_us = (savings or {}).get(number, 0.0)
    return [stats[k] for k in sorted(stats)]


def estimated_saving_us(
    steps: list[StepStats], syncs: list[Sync], step_markers: bool = True
) -> float:
    """Upper-bound saving of one trace: per step, the union of [start, end + idle] of its
    syncs, capped at the step time (see the module docstring). Without ProfilerStep markers
    (``step_markers`` False) the whole trace is the one step and every sync is in it; with
    them, syncs outside every step (``step`` None) save no step time."""
    return StepBounds(steps).saving_us(syncs, step_markers)


class StepBounds:
    """``estimated_saving_us`` for many sets of one trace's syncs (each site's): the steps
    are read once, and each set costs its own steps only (a pass over every step per site
    was 4.9 s for 1,200 sites in 8,000 steps)."""

    def __init__(
        self, steps: list[StepStats], device_busy: Mapping[int, float] | None = None
    ) -> None:
        self.step_time = {s.step: s.step_time_us for s in steps}
        self.order = {s.step: n for n, s in enumerate(steps)}
        # What a step can lose at most: its time less the device's work in it, where that is
        # known but not replayed (an NPU's tasks): removing a sync removes no device work,
        # and the host's wait for that work was most of a wait (an 85.7 ms print() beside
        # 105.6 ms of NPU work in a 149 ms step read "step ~52.3 ms").
        self.room = dict(self.step_time)
        for number, busy in (device_busy or {}).items():
            if number in self.room:
                self.room[number] = max(0.0, self.room[number] - busy)

    def cap_each(self, syncs: list[Sync], step_markers: bool = True) -> None:
        """Each sync's own bound (its wait and the bubble after it) at most what its step
        can lose: an NPU's sync said "saves ≤970 us" in a 1 ms step with 500 us of the
        NPU's work, beside its site's ≤499 us a step."""
        room = self.room
        for sync in syncs:
            if sync.saving_method != "bound":
                continue
            left = room.get(sync.step if step_markers else NO_STEP)
            if left is not None and sync.predicted_saving_us > left:
                sync.predicted_saving_us = left

    def saving_us(self, syncs: list[Sync], step_markers: bool = True) -> float:
        by_step: dict[int, list[tuple[float, float]]] = {}
        for sync in syncs:
            number = sync.step if step_markers else NO_STEP
            if number in self.step_time:
                # The blocking calls of one episode are packed as if back to back, ending
                # at its end: the gaps between them were host work, not waiting.
                by_step.setdefault(number, []).append(
                    (sync.end_us - sync.host_wait_us, sync.end_us + sync.gpu_idle_after_us)
                )
        # Added in step order, as a pass over every step did (the same float).
        room = self.room
        return sum(
            (
                min(union_length(by_step[k]), room[k])
                for k in sorted(by_step, key=self.order.__getitem__)
            ),
            0.0,
        )


def device_busy_by_step(
    tl: Timeline, waits: Collection[str] = NPU_PEER_WAIT_TASK_TYPES
) -> dict[int, float]:
    """Per step (by number; the one pseudo-step of a trace without step markers), the time
    the busiest device worked in it: the union of its activity clipped to the step, less
    its tasks of the ``waits`` types (an NPU waiting for its peers). Linear in the
    activity and the steps but for one sort per device."""
    per_device: dict[Any, list[tuple[float, float]]] = {}
    for lane, events in tl.lane_activity.items():
        spans = per_device.setdefault(tl.lane_device.get(lane, lane[0]), [])
        spans.extend(
            (e.ts, e.ts + e.dur) for e in events if e.args is None or e.args.task_type not in waits
        )
    devices = []
    for spans in per_device.values():
        spans.sort()
        ends = [b for _, b in spans]
        devices.append(([a for a, _ in spans], ends, list(accumulate(ends, max))))
    windows = [(st.number, st.ts, st.end) for st in tl.steps] or [(NO_STEP, *tl.span)]
    busy: dict[int, float] = {}
    for number, ts, end in windows:
        most = 0.0
        for starts, ends, reach in devices:
            first = bisect_left(starts, ts)
            # Work started before the step and running into it, then what starts in it.
            inside = (
                [(ts, min(reach[first - 1], end))] if first > 0 and reach[first - 1] > ts else []
            )
            last = bisect_left(starts, end, first)
            inside += [
                (a, min(b, end)) for a, b in zip(starts[first:last], ends[first:last], strict=True)
            ]
            most = max(most, union_length(inside))
        # Several threads may record the same step number: the busiest one's work stands.
        busy[number] = max(busy.get(number, 0.0), most)
    return busy
