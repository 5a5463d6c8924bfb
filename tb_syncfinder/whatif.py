"""What-if replay (issue 11): re-time the profiled steps from their dependency graph, then
drop the sync edges of one sync, of a site's syncs or of all of them and re-time again; the
difference in step time is what removing them saves.

The graph is built from the ``Timeline`` and ``detect.detect_syncs``'s episodes and holds
numbers only (no events). Its variables are times, relative to the trace's first event:

* **Host threads.** A host thread is a chain of time points. Between two points the thread
  does its own work (operators, runtime calls, Python), whose recorded duration is kept; a
  point is where the thread may have to wait for something else: the return of a blocking
  call (it waits for device work), the moment a thread is resumed after another thread did
  the work it was blocked on (join: the main thread inside ``run_backward`` waits for the
  autograd thread), and the start of the other thread's burst (fork). Every host time of a
  thread (a launch, a step boundary) is "last point before it + recorded offset".
* **Launches.** Each device activity (kernel, copy, memset) is linked to its runtime call by
  correlation id (``Timeline.by_correlation`` or ``ac2g`` flows), and can start no earlier
  than that call's start + a launch latency.
* **Streams.** Each stream runs its activity in the recorded (FIFO) order: an activity starts
  no earlier than the previous one on its stream ends + a gap.
* **Event waits.** ``cudaStreamWaitEvent``: the first activity launched on the waiting
  stream after the call starts no earlier than the end of the work it waited for (from the
  CUPTI ``Stream Wait Event`` record's streams when present, else the latest activity
  launched before the call on another stream of the device).
* **Sync edges.** A blocking call of an episode (stream / device / event synchronize,
  blocking or pageable copy, a call joined to a CUPTI ``cuda_sync`` record) returns no
  earlier than the device work it waits for ends + the call's own remaining work. The
  recorded duration is split into the wait (until that device work ended) and the call's
  own work (the rest).

Each node's start is the maximum over its inputs of "input time + weight". For the input
that bound it in the recording (the one with the least slack beyond a typical latency) the
weight is the recorded gap; for the others the smaller of the recorded gap and the typical
value (launch latency, stream gap, zero for waits). So the unmodified replay reproduces the
recording exactly when the graph is consistent with it, and a what-if only moves a node as
far as its other inputs allow. Edges the recording contradicts (a "dependency" that ended
after its dependent started) are dropped and counted.

Steps and savings: a step's host time is its ``ProfilerStep#N`` span; its device time the
span of the device activity launched within it (first start to last end); its step time the
longer of the two. A step is complete when both its host span and its device work are done;
the window runs from the first step's start to the last step's completion. A what-if's
saving is how much earlier the window ends (``Saving.total_us``), split per step by how much
earlier each step completes relative to the previous one (``Saving.per_step_us``). So the
bubble a step-end sync leaves at the start of the next step counts, in the next step.

Limits: durations are the recorded ones (the profiler's own overhead included; given the
step time measured without the profiler, ``unprofiled_savings`` replays the trace with the
host's estimated share of it taken out, scaled to reproduce that step); a thread
is modelled as waiting on another only when it records no activity at all while the other
runs; the first step cannot benefit from syncs before the window, and the saving of a sync in
the last step may only show after the window (``Saving.steady_us`` leaves the first step out).
"""

from __future__ import annotations

import contextlib
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import (
    Callable,
    Collection,
    Container,
    Hashable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from itertools import repeat
from operator import add, attrgetter
from typing import Any

import msgspec
import numpy as np

from tb_syncfinder.catalogue import (
    DEVICE_SYNC_APIS,
    EXPLICIT_SYNC_APIS,
    STREAM_WAIT_EVENT_APIS,
    is_profiler_frame,
)
from tb_syncfinder.cost import FIX_WITH_OWN_SHARE
from tb_syncfinder.detect import Call, Episode
from tb_syncfinder.models import (
    NO_SYNC_TO_REMOVE,
    NOT_FITTED_LONGER_THAN_PROFILED,
    NOT_FITTED_NO_STEPS,
    NOT_FITTED_SHORTER_THAN_BUSY,
    UNPROFILED_FIT_TOL,
    UNPROFILED_STEP_ABOVE,
)
from tb_syncfinder.query import typical_step, typical_step_words
from tb_syncfinder.timeline import ANNOTATION, PYTHON, HostThread, Timeline

__all__ = [
    "ALL_SYNCS",
    "FixTogether",
    "ReplayCarry",
    "Saving",
    "StepReplay",
    "TraceWhatIf",
    "UnprofiledSavings",
    "WhatIf",
    "profiler_episodes",
    "collective_earlier",
    "fix_together",
    "replay",
    "replay_stage",
    "unprofiled_savings",
]

TOL_US = 1.0  # Kineto rounds to 1 us in older traces: dependencies may appear this late
FIDELITY_GOAL = 0.02  # unmodified replay vs recording, per step
# Replays of each sync alone stop after changing this many times the graph's variables in
# all (at least ALONE_REPLAY_MIN): see ``replay``.
ALONE_REPLAY_PASSES = 4
ALONE_REPLAY_MIN = 2_000_000
# A what-if whose every live variable has moved earlier by the same amount moves everything
# after it by that amount (see ``_Graph.run``): checked this many tasks past the removed
# edges, then at twice the distance after each failed check (a trace where it never holds,
# e.g. other streams' work that does not move, pays a few checks per what-if), with this
# tolerance on "the same" (us; rounding of the recorded offsets, far below what is shown).
SHIFT_CHECK_EVERY = 16
SHIFT_TOL_US = 1e-6
# A stretch between two of a what-if's own edges is skipped when it is the base replay
# shifted and at least this many tasks long (shorter ones cost less to evaluate).
STRETCH_MIN_TASKS = 64
# A step's latest end is taken per shifted region where at most this many of its ends lie
# outside them (read one by one); else from its ends by base value, largest first.
REGION_OTHER_ENDS_MAX = 64
# A what-if's steps are walked with numpy once this many of them are shifted wholly or lie
# between its first and last changed step (a site syncing in each of 10,000 steps): the
# walk in Python was 2.5 s of 300 such sites' replays. Below it, Python is faster.
VECTOR_STEPS_MIN = 64
# A graph's what-ifs evaluate only the tasks that read a changed variable (``_Readers``)
# once their whole-range evaluations have passed this many times the graph's tasks with
# fewer than this share of them changed: the index of readers costs about one pass.
SPARSE_AFTER_PASSES = 2
SPARSE_BELOW_CHANGED_SHARE = 0.25
# "Fix together" (``fix_together``): what fixing a site saves once the other sites are
# fixed too is replayed for the sites with the longest host wait, this many at most, within
# this many times the graph's tasks of work (each puts its edges back into the "every sync
# removed" replay: about its own syncs' tasks where they wait for nothing then, or where
# they move the rest by the same amount; the rest of the trace where they move a host
# that then runs ahead of the device again, as in a long run of GPU-bound steps).
WITH_OTHERS_SITES = 16
WITH_OTHERS_PASSES = 1
WITH_OTHERS_MIN = 50_000  # tasks: a small graph's sites each cost about a pass of it
# A site saves much less alone than with the others when its own saving is below
# ``cost.FIX_WITH_OWN_SHARE`` of that (and that is at least a share of the step the engine
# sets): its partner is looked for among this many other sites, longest host wait first.
FIX_WITH_CANDIDATES = 8
# The pairs' what-ifs (each a replay of both sites' syncs from the base) stop after this many
# times the graph's variables changed, as those of syncs alone do (``ALONE_REPLAY_PASSES``).
FIX_WITH_PASSES = 2
# Above these shares of unlinked activity the graph is too incomplete to replay.
MAX_UNLINKED_SHARE = 0.01
MAX_NEGATIVE_LATENCY_SHARE = 0.01
MIN_JOIN_GAP_US = 20.0  # shorter gaps of a waiting thread are not worth modelling as joins
IDLE_GAP_US = 5.0  # a stream idle this long before an activity was not what held it back

_NEG_INF = float("-inf")
_TS = attrgetter("ts")
_DUR = attrgetter("dur")
_NAME = attrgetter("name")
_ARGS = attrgetter("args")
_CAT = attrgetter("cat")
_COPY_CATS = frozenset(("gpu_memcpy",))
_MEMSET_CATS = frozenset(("gpu_memset",))


def _external_id(event: Any) -> Any:
    args = event.args
    return None if args is None else args.external_id


# ---------------------------------------------------------------------------------------
# Results (picklable, no events)


class StepReplay(msgspec.Struct):
    """One profiled step: recorded vs replayed times (us)."""

    step: int
    recorded_host_us: float  # ProfilerStep span
    recorded_device_us: float  # first start to last end of device work launched in the step
    replayed_host_us: float
    replayed_device_us: float
    recorded_us: float  # step time: the longer of host and device
    replayed_us: float
    fidelity: float  # replayed_us / recorded_us (1.0 = reproduced)
    no_sync_us: float = 0.0  # step time with every counted sync removed
    interval_us: float = 0.0  # completion of this step minus completion of the previous one
    no_sync_interval_us: float = 0.0


class Saving:
    """What removing a set of syncs saves: in total over the profiled window and per step.

    The per-step figures (``per_step_us``, parallel to ``WhatIf.steps``) are kept as their
    non-zero entries, step index -> us in ascending order: a sync removed alone changes
    the few steps until its replay rejoins the base or only shifts it, and a list per sync
    took 8 bytes x steps x syncs (20,000 syncs in 10,000 steps: 1.6 GB; 80,000 syncs in
    40,000 steps, a 167 MB trace, ran a 24 GB machine out of memory)."""

    __slots__ = ("total_us", "step_count", "nonzero")

    def __init__(self, total_us: float = 0.0, per_step_us: Sequence[float] = ()) -> None:
        self.total_us = total_us
        self.step_count = len(per_step_us)
        # NaN != 0.0: kept, as the list kept it.
        self.nonzero: dict[int, float] = {n: v for n, v in enumerate(per_step_us) if v != 0.0}

    @classmethod
    def of_steps(cls, total_us: float, step_count: int, nonzero: dict[int, float]) -> Saving:
        """From the non-zero per-step figures alone (ascending step index)."""
        saving = cls.__new__(cls)
        saving.total_us = total_us
        saving.step_count = step_count
        saving.nonzero = nonzero
        return saving

    @property
    def per_step_us(self) -> list[float]:
        """Every step's saving, a new list."""
        out = [0.0] * self.step_count
        for n, us in self.nonzero.items():
            out[n] = us
        return out

    def over(self, first: int, last: int) -> float:
        """The steps ``first`` to ``last`` (inclusive) added up, in step order as a sum over
        the list would (its zeros add nothing)."""
        return sum((us for n, us in self.nonzero.items() if first <= n <= last), 0.0)

    @property
    def mean_us(self) -> float:
        """Per step, over every profiled step."""
        return self.total_us / self.step_count if self.step_count else self.total_us

    @property
    def steady_us(self) -> float:
        """Per step, leaving out the first step (which cannot gain from the bubble of a
        sync at the end of the step before it, recorded or not)."""
        if self.step_count < 2:
            return self.total_us
        return self.over(1, self.step_count - 1) / (self.step_count - 1)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Saving):
            return NotImplemented
        return (self.total_us, self.step_count, self.nonzero) == (
            other.total_us,
            other.step_count,
            other.nonzero,
        )

    def __repr__(self) -> str:
        return f"Saving(total_us={self.total_us!r}, per_step_us={self.per_step_us!r})"

    def __getstate__(self) -> tuple[float, int, dict[int, float]]:
        return self.total_us, self.step_count, self.nonzero

    def __setstate__(self, state: tuple[float, int, dict[int, float]]) -> None:
        self.total_us, self.step_count, self.nonzero = state


@dataclass
class WhatIf:
    """The replay of one trace. ``available`` False: ``reason`` says why, and the caller
    falls back to the upper bound of ``cost.py``."""

    trace: str
    available: bool
    reason: str | None = None
    steps: list[StepReplay] = field(default_factory=list)
    step_markers: bool = True  # False: the whole trace is one pseudo-step (number 0)
    # By episode index; None: not replayed alone (past the replay budget, see ``replay``).
    episode_savings: list[Saving | None] = field(default_factory=list)
    all_syncs: Saving = field(default_factory=Saving)  # every counted episode removed
    counted: list[int] = field(default_factory=list)  # episode indices counted as syncs
    group_savings: dict[Hashable, Saving] = field(default_factory=dict)
    window_us: float = 0.0  # recorded: first step start to last step completion
    replayed_window_us: float = 0.0
    no_sync_window_us: float = 0.0
    gpu_idle_us: float = 0.0  # device idle inside the window (recorded)
    gpu_idle_from_syncs_us: float = 0.0  # the part of it that goes away with the syncs
    # Recorded: per step, the union of the device work launched in it, added up
    # (``_Graph.busy_us``): without the profiler no fix that keeps the device's work makes a
    # step shorter.
    device_busy_us: float = 0.0
    fidelity_error: float = 0.0  # worst |replayed / recorded - 1| over steps
    notes: list[str] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    # With explain=True: the replayed window's critical path, us per kind of edge:
    # device (busy), host (host work and launches), stream_gap (beyond the typical gap:
    # device waits nothing in the trace explains, e.g. other ranks), event_wait, sync
    # (a blocking call's own work after the device), fixed (work kept at recorded times).
    critical_path: dict[str, float] = field(default_factory=dict)
    _graph: _Graph | None = field(default=None, repr=False, compare=False)
    # A whole trace's "every counted sync removed" replay (its variables), kept with the
    # live graph for ``fix_together``; None for a window's, and once pickled.
    _no_sync: _Metrics | None = field(default=None, repr=False, compare=False)

    @property
    def gpu_idle_share(self) -> float:
        """Share of the step time that is GPU idle caused by the counted syncs."""
        return self.gpu_idle_from_syncs_us / self.window_us if self.window_us > 0 else 0.0

    @property
    def fidelity_ok(self) -> bool:
        return self.available and self.fidelity_error <= FIDELITY_GOAL

    def saving(self, episode_indices: Iterable[int]) -> Saving:
        """The saving of removing these episodes' syncs together (a site's episodes).

        Answered from the precomputed episodes and groups; any other set needs the live
        graph, which a pickled result no longer has (``KeyError`` then)."""
        key = frozenset(episode_indices)
        if not self.available or not key:
            return Saving.of_steps(0.0, len(self.steps), {})
        if len(key) == 1:
            (index,) = key
            if 0 <= index < len(self.episode_savings):
                saving = self.episode_savings[index]
                if saving is not None:  # None: not replayed alone (the budget)
                    return saving
        cached = self._sets.get(key)
        if cached is not None:
            return cached
        # The length first: a set of every counted sync per site cost a long run's 300
        # sites 6 million insertions.
        if len(key) == len(self.counted) and key == frozenset(self.counted):
            return self.all_syncs
        if self._graph is None:
            raise KeyError(
                f"no saving precomputed for episodes {sorted(key)}; pass them "
                "as a group to replay()"
            )
        result = self._graph.saving(key)
        self._sets[key] = result
        return result

    def saving_us(self, episode_indices: Iterable[int]) -> float:
        """Total over the profiled steps (us) of removing these episodes' syncs."""
        return self.saving(episode_indices).total_us

    @property
    def all_syncs_saving_us(self) -> float:
        return self.all_syncs.total_us

    @property
    def _sets(self) -> dict[frozenset[int], Saving]:
        cache = self.__dict__.get("_set_cache")
        if cache is None:
            cache = self.__dict__["_set_cache"] = {}
        return cache

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_graph"] = None  # numbers only, but big: the cached result keeps the figures
        state["_no_sync"] = None
        return state


# ---------------------------------------------------------------------------------------
# Public entry points


def replay(
    tl: Timeline,
    episodes: Sequence[Episode],
    *,
    counted: Iterable[int] | None = None,
    groups: Mapping[Hashable, Collection[int]] | None = None,
    explain: bool = False,
    span_steps: Collection[int] | None = None,
    carry: ReplayCarry | None = None,
) -> WhatIf:
    """Replay the trace and every what-if: each episode alone, each group (e.g. the
    episodes of one site), and all ``counted`` episodes together (default: all).

    ``episodes`` must be what ``detect.detect_syncs(tl)`` returned (all of them: the ones
    not counted still wait in every replay); indices refer to that list. ``counted``
    leaves out, e.g., ``profiler_episodes``. ``explain`` adds ``WhatIf.critical_path``
    (a walk along the recorded critical path: costs about one more replay).

    ``span_steps``: the numbers of the steps the trace-wide figures cover (a window of a
    larger trace, ``windows``: the steps around them are only context). "Every sync removed" is
    then its per-step savings over those steps, and the window and the GPU idle theirs;
    savings of syncs alone and of groups still count every step (a sync's bubble may land
    in the step after the span).

    ``carry`` (with ``span_steps``: the windows of one trace, replayed in time order): the
    state the window before left. "Every sync removed" and each group then start from it
    (the steps before the span pinned there), count the span's steps only, and leave their
    state at the span's end in ``carry`` for the next window: what a what-if gained before
    a window (a host running ahead of a device queue) goes on in it as in a whole replay.
    A group in ``carry`` but not in ``groups`` (a site with no syncs in this window) is
    replayed with its state alone.
    """
    episodes = list(episodes)
    counted_list = sorted(set(range(len(episodes)) if counted is None else counted))
    built = _build(
        tl,
        episodes,
        keyed=carry is not None,
        typical=carry.typical if carry else None,
        lane_prev=carry.lanes if carry else None,
    )
    carried_in = carry.states if carry is not None else {}
    if carry is not None:
        carry.states = {}  # what this window leaves: filled below when it replays
        carried_completions = carry.completions
        carried_index = carry.device_index
        carried_lanes = carry.lanes
        carry.completions = None
    if isinstance(built, str):
        return WhatIf(trace=tl.path, available=False, reason=built, counted=counted_list)
    graph = built
    base = graph.base_metrics
    n_steps = len(base.host_start)
    result = WhatIf(
        trace=tl.path,
        available=True,
        counted=counted_list,
        step_markers=graph.step_markers,
        _graph=graph,
    )
    result.notes = list(graph.notes)
    result.stats = dict(graph.stats)
    span = None
    if span_steps is not None:
        wanted = set(span_steps)
        inside = [n for n, number in enumerate(graph.step_numbers) if number in wanted]
        span = (inside[0], inside[-1]) if inside else None
    zero = Saving.of_steps(0.0, n_steps, {})
    # Each sync alone is a replay of what follows it: a long trace with a sync in every
    # step makes that quadratic (a 100 MB trace's 360 syncs took 32 s). The replays stop
    # once they have changed ALONE_REPLAY_PASSES times the graph's variables (at least
    # ALONE_REPLAY_MIN): every recorded trace here stays far below; the syncs past it
    # keep their bound, and a note says so.
    budget = max(ALONE_REPLAY_PASSES * len(graph.base_values), ALONE_REPLAY_MIN)
    spent = 0
    skipped = 0
    result.episode_savings = []
    for i in range(len(episodes)):
        if not graph.episode_jumps[i]:
            result.episode_savings.append(zero)
        elif spent > budget:
            result.episode_savings.append(None)
            skipped += 1
        else:
            saving, changed = graph.saving_and_work(frozenset((i,)))
            spent += changed
            result.episode_savings.append(saving)
    if skipped:
        result.notes.append(
            f"{skipped} of {len(episodes)} syncs were not replayed each alone (a long trace: "
            "each costs a replay of everything after it); their savings are bounds"
        )
    all_key = frozenset(counted_list)
    carrying = carry is not None and span is not None

    def pins(key: Hashable) -> _Pins | None:
        if not carrying or span[0] < 1:
            return None
        state = carried_in.get(key)
        if state is None:
            # It moved nothing before this window: its context step completes as the
            # unmodified replay's does (which device work from before may hold back).
            return _Pins({}, (span[0] - 1, base.completion[span[0] - 1]))
        return graph.carry_pins(state, carried_index, span[0])

    if carrying and carried_completions is not None and span[0] >= 1:
        graph.carry_completions(span[0] - 1, *carried_completions)
    no_sync = graph.metrics_for(all_key, pins(ALL_SYNCS))
    result.all_syncs = graph.saving_from(no_sync)
    if carry is None and span is None:
        result._no_sync = no_sync
    if carry is not None:
        carry.typical = graph.typical
    if carrying:
        carry.device_index = graph.device_index(span[1])
        state = graph.carried_state(
            graph.moved_in(no_sync), result.all_syncs, span[1], carried_in.get(ALL_SYNCS)
        )
        if state is not None:
            carry.states[ALL_SYNCS] = state
    if span is not None:
        result.all_syncs = _within(result.all_syncs, span)
    if carrying:
        carry.completions = (
            graph.recorded_metrics.completion[span[1]] + graph.t0,
            base.completion[span[1]] + graph.t0,
        )
        carry.lanes = graph.next_lane_items(span[1], carried_lanes)
        groups = dict(groups or {})
        for key in carried_in:
            if key != ALL_SYNCS:
                groups.setdefault(key, ())
    for key, members in (groups or {}).items():
        if carrying:
            saving, state = graph.carried_saving(
                frozenset(members), pins(key), span[1], carried_in.get(key)
            )
            if state is not None:
                carry.states[key] = state
            result.group_savings[key] = _within(saving, span)
        else:
            result.group_savings[key] = result.saving(members)
        if members:
            result._sets[frozenset(members)] = result.group_savings[key]
    rec = graph.recorded_metrics
    fidelity_error = 0.0
    for n in range(n_steps):
        recorded = max(rec.host_us[n], rec.device_us[n])
        replayed = max(base.host_us[n], base.device_us[n])
        fid = replayed / recorded if recorded > 0 else 1.0
        fidelity_error = max(fidelity_error, abs(fid - 1.0))
        result.steps.append(
            StepReplay(
                step=graph.step_numbers[n],
                recorded_host_us=rec.host_us[n],
                recorded_device_us=rec.device_us[n],
                replayed_host_us=base.host_us[n],
                replayed_device_us=base.device_us[n],
                recorded_us=recorded,
                replayed_us=replayed,
                fidelity=fid,
                no_sync_us=max(no_sync.host_us[n], no_sync.device_us[n]),
                interval_us=base.intervals[n],
                no_sync_interval_us=no_sync.intervals[n],
            )
        )
    result.fidelity_error = fidelity_error
    if fidelity_error > FIDELITY_GOAL:
        result.notes.append(
            f"the unmodified replay is off by up to {fidelity_error:.1%} per step: "
            f"{graph.stats.get('deviating_nodes', 0):.0f} nodes did not reproduce "
            "(see stats: order violations or contradicted edges)"
        )
    result.window_us = _span_window(rec, span)
    result.replayed_window_us = _span_window(base, span)
    result.no_sync_window_us = _span_window(no_sync, span)
    idle_base = graph.idle_us(graph.base_values, base, span)
    idle_no_sync = graph.idle_us(no_sync.values, no_sync, span) if no_sync.values else idle_base
    result.gpu_idle_us = idle_base
    # A span's figure may be negative (the syncs before it, removed too, move work into
    # it): the spans of a trace are added first, then the sum is clamped (``windows``).
    from_syncs = idle_base - idle_no_sync
    result.gpu_idle_from_syncs_us = from_syncs if span is not None else max(0.0, from_syncs)
    result.device_busy_us = graph.busy_us(span)
    if explain:
        result.critical_path = graph.critical_path()
        unexplained = result.critical_path.get("stream_gap", 0.0)
        if result.window_us > 0 and unexplained > 0.25 * result.window_us:
            result.notes.append(
                f"{unexplained / result.window_us:.0%} of the replayed window's critical "
                "path is the device waiting between activities for something the trace "
                "does not show (other ranks, unrecorded waits): no sync removal moves it"
            )
    return result


def _within(saving: Saving, span: tuple[int, int]) -> Saving:
    """``saving`` over the steps of ``span`` only (its per-step figures kept whole)."""
    first_step, last_step = span
    return Saving.of_steps(saving.over(first_step, last_step), saving.step_count, saving.nonzero)


def _span_window(m: _Metrics, span: tuple[int, int] | None) -> float:
    """The window of the steps in ``span``: from the completion of the step before (the
    first step's start for the first) to the completion of its last."""
    if span is None or not m.completion:
        return m.window
    first_step, last_step = span
    start = m.host_start[0] if first_step == 0 else m.completion[first_step - 1]
    return m.completion[last_step] - start


def profiler_episodes(tl: Timeline, episodes: Sequence[Episode]) -> list[int]:
    """Indices of the episodes the profiler itself caused: its ``cudaDeviceSynchronize``
    when a cycle stops (see KINETO_NOTES). Going up from the blocking call past operators,
    built-ins and ``torch/cuda`` frames, the first frame is the profiler's
    (``torch/profiler/...``, ``torch/autograd/profiler.py``). Only traces with Python
    stacks can tell; for others this returns []. (A user's ``item()`` inside a
    ``record_function`` also has profiler frames above it, but its annotation comes first.)
    """
    found = []
    for index, episode in enumerate(episodes):
        if episode.latent or not episode.calls:
            continue
        thread = episode.thread
        call = episode.calls[0].event
        node = thread.innermost(call.ts, call.ts + call.dur)
        while node >= 0:
            kind = thread.kinds[node]
            name = thread.nodes[node].name
            if kind == PYTHON and not (name.startswith("<built-in") or "torch/cuda/" in name):
                if is_profiler_frame(name):
                    found.append(index)
                break
            if kind == ANNOTATION:
                break
            node = thread.parent[node]
    return found


class TraceWhatIf(msgspec.Struct):
    """The engine's what-if stage for one trace: the replay (``None`` for a trace without
    device activity) and, per episode, what removing it alone saves (empty when the replay
    is unavailable: the caller uses the bound)."""

    result: WhatIf | None
    episode_us: list[float | None]  # None: not replayed alone (the engine uses the bound)
    steps: dict[int, StepReplay]  # by step number
    per_step_us: dict[int, float]  # step number -> saving of all counted syncs


def replay_stage(
    tl: Timeline,
    episodes: Sequence[Episode],
    site_keys: Sequence[str],
    listed_apart: Collection[int] = (),
    span_steps: Collection[int] | None = None,
    carry: ReplayCarry | None = None,
) -> TraceWhatIf:
    """Replay one trace for the engine: every episode alone, the episodes of each site
    together (``site_keys`` parallel to ``episodes``) and every episode but the profiler's
    own (``profiler_episodes``) and those in ``listed_apart`` (indices the engine keeps out
    of the findings) for "all syncs removed". A CPU-only trace is not replayed.
    ``span_steps``: the step numbers the trace-wide figures cover (``replay``'s ``span``);
    ``carry``: a window's (``replay``): every site is then a group, even of one sync, so
    that its state goes on to the next window."""
    if not tl.has_gpu_activity and not (carry is not None and carry.states):
        if carry is not None:
            carry.states = {}
        return TraceWhatIf(None, [], {}, {})
    profiler = set(profiler_episodes(tl, episodes)) | set(listed_apart)
    apart = set(listed_apart)
    groups: dict[str, list[int]] = {}
    for index, key in enumerate(site_keys):
        if carry is None or index not in apart:
            groups.setdefault(key, []).append(index)
    counted = [i for i in range(len(episodes)) if i not in profiler]
    result = replay(
        tl,
        episodes,
        counted=counted,
        groups=groups if carry is not None else {k: v for k, v in groups.items() if len(v) > 1},
        span_steps=span_steps,
        carry=carry,
    )
    if not result.available:
        return TraceWhatIf(result, [], {}, {})
    steps = {s.step: s for s in result.steps}
    per_step = dict(zip((s.step for s in result.steps), result.all_syncs.per_step_us, strict=True))
    return TraceWhatIf(
        result,
        [s.total_us if s is not None else None for s in result.episode_savings],
        steps,
        per_step,
    )


# The profiler's estimated host overhead (``cost``'s weights) is scaled by at most this to
# reproduce a step the user measured without the profiler. Past it, what the profiler added
# is not the host's work alone (CUPTI slowed the device too, or the program timed is not the
# one profiled), and no corrected figure is given. On the GPU recordings of
# docs/validation.md section 15 the fits that held took 0.09 to 1.94.
UNPROFILED_SCALE_MAX = 4.0
UNPROFILED_FIT_ROUNDS = 12


class UnprofiledSavings(msgspec.Struct):
    """What removing the syncs saves in the program as it runs without the profiler
    (``unprofiled_savings``): the trace replayed with each host thread's work less the
    profiler's estimated overhead times ``scale``, the scale that makes the replayed steps
    take the step time measured without the profiler."""

    step_us: float  # the unprofiled step given
    scale: float | None = None  # None: no scale reproduces it (``reason``)
    profiled_step_us: float = 0.0  # the unmodified replay's typical step (``query.typical_step``)
    replayed_step_us: float = 0.0  # the replay's typical step at ``scale``
    # What removing every counted sync and each group (site key) takes off the typical
    # step (``_typical_saving``), the statistic the fit matched (None: not fitted).
    all_syncs_per_step_us: float | None = None
    groups: dict[str, float] = msgspec.field(default_factory=dict)
    reason: str | None = None


def _steady_step(graph: _Graph) -> float:
    return typical_step(graph.base_metrics.intervals)


def _typical_saving(graph: _Graph, saving: Saving) -> float:
    """What a what-if takes off the typical step (``query.typical_step``): the statistic the fit
    matched the step given with, on both sides (a mean of the savings let one slow step
    the median leaves out make most of the figure)."""
    base = graph.base_metrics.intervals
    after = [b - s for b, s in zip(base, saving.per_step_us, strict=True)]
    return typical_step(base) - typical_step(after)


def unprofiled_savings(
    tl: Timeline,
    episodes: Sequence[Episode],
    counted: Collection[int],
    groups: Mapping[str, Collection[int]],
    step_us: float,
    graph: _Graph | None = None,
) -> UnprofiledSavings:
    """The savings of every counted sync removed and of each group (a site's syncs), in the
    program as it runs without the profiler, whose mean step the user measured
    (``step_us``). The profiler's estimated cost of each host event (``cost``: 3.5 us per
    operator, runtime call or annotation, 1 us per Python frame) is taken out of each host
    thread's work, times a scale found so that the replayed steps take ``step_us``: the
    host then reaches each launch, sync and step boundary earlier, and the device's work
    runs as the launches and queues allow (its durations are the recorded ones); the figures
    are what removing the syncs takes off the typical step (``_typical_saving``). A step the
    profiled replay already takes no longer than ``step_us`` is replayed as recorded (scale
    0); one that no scale up to ``UNPROFILED_SCALE_MAX`` brings down to it, or a step time
    the trace rules out, gets none, and says why. ``graph``: the trace's unmodified replay
    graph, if built (its base values as built)."""
    found = UnprofiledSavings(step_us=step_us)
    episodes = list(episodes)
    if not step_us > 0 or step_us == float("inf"):
        found.reason = "not fitted: the step time given is not a positive number"
        return found
    if not tl.steps:
        found.reason = f"{NOT_FITTED_NO_STEPS}, so no step of it is the step measured"
        return found

    def graph_at(scale: float) -> _Graph:
        built = _build(tl, episodes, overhead_scale=scale)
        if isinstance(built, str):
            raise _Unavailable(built)
        return built

    try:
        graph = graph if graph is not None else graph_at(0.0)
        profiled = found.profiled_step_us = _steady_step(graph)
        scale = 0.0
        # Steps end one after the other this often: a device span per step (the step time
        # shown beside it) can be longer where steps overlap on the device.
        which = typical_step_words(len(graph.base_metrics.intervals), "replayed")
        typical = (
            f"{profiled / 1000:.2f} ms, the only step replayed"
            if which is None
            else f"{profiled / 1000:.2f} ms from one step's end to the next, {which}"
        )
        if step_us > profiled * (1 + UNPROFILED_STEP_ABOVE):
            found.reason = (
                f"{NOT_FITTED_LONGER_THAN_PROFILED} "
                f"step ({typical}), which the profiler's overhead cannot make: another "
                "program's step, or one timed with more in it"
            )
            return found
        busy = graph.busy_us() / max(len(graph.step_refs), 1)
        if step_us < busy * (1 - UNPROFILED_FIT_TOL):
            found.reason = (
                f"{NOT_FITTED_SHORTER_THAN_BUSY} GPU's busy "
                f"time per step ({busy / 1000:.2f} ms), which no program doing this GPU work "
                "runs faster than: another program's step?"
            )
            return found
        if not counted:  # nothing to remove: saves nothing, whatever the host's overhead
            found.all_syncs_per_step_us = 0.0
            found.groups = {key: 0.0 for key in groups}
            found.reason = NO_SYNC_TO_REMOVE
            return found
        if profiled > step_us * (1 + UNPROFILED_FIT_TOL):
            top = graph_at(UNPROFILED_SCALE_MAX)
            if _steady_step(top) > step_us * (1 + UNPROFILED_FIT_TOL):
                found.replayed_step_us = _steady_step(top)
                found.reason = (
                    f"not fitted: even with {UNPROFILED_SCALE_MAX:g}x the profiler's "
                    "estimated host overhead taken out, the replayed step "
                    f"({which or 'the only one'}) "
                    f"takes {found.replayed_step_us / 1000:.2f} ms, above the step time "
                    "given: what the profiler added here is not the "
                    "host's work per recorded event alone (or the step given is another "
                    "program's)"
                )
                return found
            low, high = 0.0, UNPROFILED_SCALE_MAX
            graph = top
            for _ in range(UNPROFILED_FIT_ROUNDS):
                middle = (low + high) / 2
                trial = graph_at(middle)
                if _steady_step(trial) > step_us:
                    low = middle
                else:
                    high, graph = middle, trial
                if abs(_steady_step(graph) - step_us) <= step_us * UNPROFILED_FIT_TOL:
                    break
            scale = high
    except _Unavailable as exc:
        found.reason = f"replay unavailable: {exc}"
        return found
    everything = frozenset(counted)
    all_syncs = graph.saving_from(graph.metrics_for(everything))
    typical_saving = _typical_saving(graph, all_syncs)
    # Each step's saving is how much earlier it ends than the step before: a host that runs
    # ahead into a queue saves much in a step or two and gives some back in the next ones,
    # and with a few profiled steps their median can come out longer than the recorded one.
    # No typical saving is told then (and the trace is not fitted: no scale is kept); the
    # profiled figure, a mean over the steps, stands.
    slack = step_us * UNPROFILED_FIT_TOL
    if typical_saving < -slack:
        later = all_syncs.per_step_us[1:] or all_syncs.per_step_us
        sides = [
            f"{most / 1000:.2f} ms less" if (most := max(later)) > 0 else None,
            f"{-least / 1000:.2f} ms more" if (least := min(later)) < 0 else None,
        ]
        found.reason = (
            "not fitted: without the syncs the replayed steps after the first take "
            f"{' to '.join(side for side in sides if side)} than recorded, their median "
            f"{-typical_saving / 1000:.2f} ms more: the {len(all_syncs.per_step_us)} "
            "profiled steps give no typical saving to tell (more steps profiled may)"
        )
        return found
    found.scale = scale
    found.replayed_step_us = _steady_step(graph)
    found.all_syncs_per_step_us = max(typical_saving, 0.0)
    for key, members in groups.items():
        group = _typical_saving(graph, graph.saving(frozenset(members))) if members else 0.0
        if group >= -slack:  # a site's alike: no figure (None), not a negative one
            found.groups[key] = max(group, 0.0)
    return found


def _live_graph(result: WhatIf) -> _Graph | None:
    if not result.available:
        return None
    if result._graph is None:
        raise KeyError("the job stage's figures need the live replay result (not a pickled one)")
    return result._graph


def retimed_collectives(result: WhatIf, collectives: Sequence[Any]) -> set[int]:
    """The ``Collective.index`` of each collective ``collective_earlier`` can re-time: with
    its kernel in the graph, or (gloo) its enqueue on a host thread of the graph."""
    graph = _live_graph(result)
    return {index for index, _var in _collective_items(graph, collectives)} if graph else set()


def _collective_items(graph: _Graph, collectives: Sequence[Any]) -> list[tuple[int, int]]:
    """(collective index, the graph variable of its start), in index order."""
    n_dev = graph.n_dev
    rec_start = np.asarray(graph.rec[:n_dev], dtype=float)
    rec_end = np.asarray(graph.rec[n_dev : 2 * n_dev], dtype=float)
    order = np.argsort(rec_start, kind="stable")
    sorted_start = rec_start[order]
    kernels = [
        coll
        for coll in sorted(collectives, key=attrgetter("index"))
        if getattr(coll, "exec_kind", None) == "kernel" and coll.exec_ts is not None
    ]
    # The device items recorded within TOL_US of each kernel's start, all searched at once
    # (per collective, the numpy calls were most of this on a rank of 2,000 collectives).
    starts = np.asarray([coll.exec_ts for coll in kernels], dtype=float) - graph.t0
    first = np.searchsorted(sorted_start, starts - TOL_US, side="left").tolist()
    past = np.searchsorted(sorted_start, starts + TOL_US, side="right").tolist()
    items: list[tuple[int, int]] = []  # (collective index, device item), in index order
    for coll, ts, lo, hi in zip(kernels, starts.tolist(), first, past, strict=True):
        if hi <= lo:
            continue
        if hi == lo + 1:
            items.append((coll.index, int(order[lo])))
            continue
        candidates = order[lo:hi]
        end = (coll.exec_end - graph.t0) if coll.exec_end is not None else ts
        best = candidates[
            np.argmin(np.abs(rec_end[candidates] - end) + np.abs(rec_start[candidates] - ts))
        ]
        items.append((coll.index, int(best)))
    for coll in collectives:
        if getattr(coll, "exec_kind", None) == "cpu_op" and coll.enqueue_ts is not None:
            var = graph.host_point(coll.thread, coll.enqueue_ts)
            if var >= 0:
                items.append((coll.index, var))
    items.sort()
    return items


def collective_earlier(
    result: WhatIf, collectives: Sequence[Any], waits: Mapping[str, Collection[int]]
) -> dict[str, dict[int, float]]:
    """For the job stage (``ranks.what_ifs_for_rank``): per wait id (e.g. a ``Sync.id``,
    mapped to its episode indices in ``waits``), per ``Collective.index``, how much earlier
    this rank's collective kernel would start with that wait's sync edges dropped.

    Interval-local, as ``ranks.WhatIf`` asks: a collective's figure is its shift minus the
    shift of this rank's previous collective (at least 0), so the figures of one wait add
    up over the collectives instead of carrying an early gain into every later one.
    A gloo collective (run on gloo's worker thread, no kernel) moves as its enqueue on the
    calling thread does. Collectives with neither (a kernel outside the trace) get no
    figure: the job stage falls back to its bound for them. Needs the live result of ``replay``
    (``KeyError`` after pickling) and an available replay (else ``{}``)."""
    graph = _live_graph(result)
    if graph is None:
        return {}
    items = _collective_items(graph, collectives)
    if not items:
        return {}
    base = graph.base_values
    found: dict[str, dict[int, float]] = {}
    budget = max(ALONE_REPLAY_PASSES * len(base), ALONE_REPLAY_MIN)  # as in ``replay``
    spent = 0
    indices = np.array([index for index, _var in items], dtype=np.int64)
    item_vars = np.array([var for _index, var in items], dtype=np.int64)
    items_of_var: dict[int, list[int]] = {}
    for n, (_index, var) in enumerate(items):
        items_of_var.setdefault(var, []).append(n)
    for wait_id, episodes in waits.items():
        jumps = graph._jumps_of(episodes)
        if not jumps or spent > budget:
            continue  # past the budget: the job stage keeps its bound for this wait
        # In place: only the collectives' start values are read (a copy of every variable
        # per wait made this quadratic in the trace's length).
        with graph._removed(jumps) as changed:
            spent += len(changed)
            moved = _moved_earlier_at(graph, changed, item_vars, items_of_var)
        # Each collective's shift less the one before it (at least 0): numpy over the
        # collectives, as a Python call per collective and wait was quadratic in a rank's
        # length (1,600 steps: 3.1 s of 3.7).
        shift = np.fmax(moved, 0.0)  # fmax: a NaN is no shift, as max(0.0, nan) was
        local = shift - np.concatenate(([0.0], shift[:-1]))
        gained = np.flatnonzero(local > 0)
        if len(gained):
            found[wait_id] = dict(
                zip(indices[gained].tolist(), local[gained].tolist(), strict=True)
            )
    return found


def _moved_earlier_at(
    graph: _Graph, changed: _Changes, item_vars: np.ndarray, items_of_var: dict[int, list[int]]
) -> np.ndarray:
    """``graph.moved_earlier(changed)`` of each of ``item_vars`` (call it inside
    ``_removed``), as an array: the cut's and the stretches' shifts by position, then the
    variables the what-if wrote."""
    moved = np.zeros(len(item_vars))
    tables = graph._shift_tables
    if tables is not None:
        pos = tables.def_pos[item_vars]
        stretches = changed.stretches
        if stretches:
            starts = np.array([stretch[0] for stretch in stretches])
            ends = np.array([stretch[1] for stretch in stretches])
            shifts = np.array([stretch[2] for stretch in stretches], dtype=float)
            k = np.searchsorted(starts, pos, side="right") - 1
            inside = k >= 0
            inside[inside] = pos[inside] < ends[k[inside]]
            moved[inside] = shifts[k[inside]]
        if changed.cut is not None:
            moved[pos >= changed.cut] = changed.shift
    base_values = graph.base_values
    if len(changed) <= len(items_of_var):
        written = [(var, changed[var]) for var in changed if var in items_of_var]
    else:
        written = [(var, changed[var]) for var in items_of_var if var in changed]
    for var, old in written:
        for n in items_of_var[var]:
            moved[n] = old - base_values[var]
    return moved


class FixTogether(msgspec.Struct):
    """What fixing each site saves once the others are fixed too (``fix_together``)."""

    # Site -> saving(every counted sync) - saving(every counted sync but the site's), us over
    # the profiled steps. Sites left out were not replayed so (past the caps).
    with_others: dict[Hashable, float] = msgspec.field(default_factory=dict)
    # Site whose own saving is much smaller than that -> (the other site whose syncs it
    # makes wait for the same device work, what removing both sites' syncs saves).
    partners: dict[Hashable, tuple[Hashable, float]] = msgspec.field(default_factory=dict)
    # Sites past ``WITH_OTHERS_SITES`` or the work budget: not replayed with the others.
    skipped: int = 0


def fix_together(
    result: WhatIf,
    sites: Mapping[Hashable, Collection[int]],
    by_wait: Sequence[Hashable],
    own: Mapping[Hashable, float],
    min_with_us: float,
) -> FixTogether:
    """Per site (``sites``: its counted episodes; ``by_wait``: the sites, longest host wait
    first), what removing its syncs saves when every other counted sync is removed too:
    saving(all) - saving(all but the site's). The first ``WITH_OTHERS_SITES`` of
    ``by_wait`` only, within ``WITH_OTHERS_PASSES`` times the graph's tasks evaluated (at
    least ``WITH_OTHERS_MIN``; no site starts that would pass it at the mean work of those
    before; the first always does).

    A site whose own saving (``own``, the replay's figure: sites without one are left out)
    is below ``FIX_WITH_OWN_SHARE`` of that, where that is at least ``min_with_us``, waits for
    device work another sync waits for too: among the first ``FIX_WITH_CANDIDATES`` other
    sites of ``by_wait`` that have an own saving, its partner is the one T maximising
    saving({S, T}) - saving(S) - saving(T), when that exceeds ``TOL_US`` (the pairs' replays
    within ``FIX_WITH_PASSES`` times the graph's variables changed).

    Needs the live result of a whole trace's ``replay`` (not a window's, not pickled)."""
    graph = result._graph
    no_sync = result._no_sync
    found = FixTogether()
    if not result.available or graph is None or no_sync is None or no_sync.values is None:
        found.skipped = len(sites)
        return found
    counted = frozenset(result.counted)
    ctx = graph.no_sync_ends(no_sync.values, frozenset(graph._jumps_of(counted)))
    base_window = graph.base_metrics.window
    no_sync_window = graph.window_of(no_sync.values)
    all_us = base_window - no_sync_window
    budget = max(WITH_OTHERS_PASSES * len(graph.tasks), WITH_OTHERS_MIN)
    spent = 0
    order = [key for key in by_wait if key in sites]
    for key in order:
        done = len(found.with_others)
        # Stop where the next site would pass the budget at the sites' mean work so far.
        if done >= WITH_OTHERS_SITES or (done and spent + spent / done > budget):
            break
        window, work = graph.window_with_edges_back(ctx, graph._jumps_of(sites[key]))
        spent += work
        # saving(all) - saving(all but the site's): how much later the window ends with
        # the site's edges back.
        found.with_others[key] = all_us - (base_window - window)
    found.skipped = len(sites) - len(found.with_others)
    candidates = [key for key in order if key in own][:FIX_WITH_CANDIDATES]
    budget = FIX_WITH_PASSES * len(graph.base_values)
    spent = 0
    for key, with_us in found.with_others.items():
        alone = own.get(key)
        if alone is None or with_us < min_with_us or alone >= FIX_WITH_OWN_SHARE * with_us:
            continue
        best: tuple[float, Hashable, float] | None = None
        for other in candidates:
            if other == key:
                continue
            members = frozenset(sites[key]) | frozenset(sites[other])
            both = result._sets.get(members)
            if both is None:
                if spent >= budget:
                    continue
                both, work = graph.saving_and_work(members)
                spent += work
                result._sets[members] = both
            gain = both.total_us - alone - own[other]
            if gain > TOL_US and (best is None or gain > best[0]):
                best = (gain, other, both.total_us)
        if best is not None:
            found.partners[key] = (best[1], best[2])
    return found


def _latest_end(
    by_base: Sequence[int],
    moved_ends: Sequence[float],
    values: Sequence[float],
    changed: Container[int],
    shift_of: Callable[[int], float] | None,
) -> float:
    """The latest device end of a step in a what-if: the largest of ``moved_ends`` (the
    ends it changed, none NaN) and of every other variable of ``by_base`` (the step's ends,
    largest base value first; those not in ``changed`` hold their base value in
    ``values``), less the shift (>= 0) ``shift_of`` gives where the base replay shifted
    it. Reads the others only down to the first that cannot be later."""
    latest = max(moved_ends, default=float("-inf"))
    for var in by_base:
        if var in changed:
            continue
        end = values[var]
        if end <= latest:
            break  # neither it nor any after it (smaller bases) is later
        shift = shift_of(var) if shift_of is not None else 0.0
        if shift:
            end -= shift  # a smaller base after it may still be later
            if end > latest:
                latest = end
            continue
        return end
    return latest


def _shift_of(changed: _Changes, def_pos: np.ndarray) -> Callable[[int], float]:
    """How much earlier than the base replay a variable not in ``changed`` is in that
    what-if: its stretch's shift or, past the cut, the cut's (0 elsewhere)."""
    cut, shift, stretches = changed.cut, changed.shift, changed.stretches
    starts = [stretch[0] for stretch in stretches]

    def shift_of(var: int) -> float:
        pos = def_pos[var]
        if cut is not None and pos >= cut:
            return shift
        if stretches:
            index = bisect_right(starts, pos) - 1
            if index >= 0 and pos < stretches[index][1]:
                return stretches[index][2]
        return 0.0

    return shift_of


# ---------------------------------------------------------------------------------------
# The graph


class _Metrics(msgspec.Struct):
    host_start: list[float]
    host_us: list[float]
    device_us: list[float]
    completion: list[float]
    intervals: list[float]
    window: float
    values: list[float] | None = None
    # Per step: the host end and the latest device end (NaN: no device work), the inputs
    # of ``completion``; kept so that a what-if can recompute only the steps it moved.
    host_end: list[float] | None = None
    dev_hi: list[float] | None = None


class _Jump(msgspec.Struct):
    """A point of a host thread's chain where the thread may wait (see module docstring)."""

    thread: int
    t: float  # recorded time
    wait: float = 0.0  # recorded time spent waiting just before t (not own work)
    const: float | None = None  # a source: cannot move earlier than this
    chained: bool = True  # False: no chain input from the thread's previous point
    # (device item, own work)
    sync: list[tuple[int, float]] = msgspec.field(default_factory=list)
    # (thread, t, +w)
    host_refs: list[tuple[int, float, float]] = msgspec.field(default_factory=list)
    episode: int = -1


class _Identity(msgspec.Struct):
    """What names a graph's variables in the graph of another window of the same trace
    (``windows``): device item i by its lane and recorded start, host points by thread."""

    lanes: list[Any]
    lane_of: np.ndarray  # per device item: its lane's index in ``lanes`` (grouped by lane)
    events: list[Any]  # per device item: its event
    thread_keys: list[Any]  # per host thread of the graph: its timeline key
    thread_vars: list[tuple[int, int]]  # per host thread: its points' variables [lo, hi)
    _next_preds: dict[int, dict[Any, int]] = msgspec.field(default_factory=dict)

    def next_predecessors(self, step_of_item: np.ndarray, step: int) -> dict[Any, int]:
        """Per lane, the device item that runs just before the next window's first item on
        it: that window holds the items launched in ``step`` (its context step), so the
        last item launched before ``step`` where the lane has some in it, else the last
        launched up to ``step``. Lanes with neither are left out."""
        cached = self._next_preds.get(step)
        if cached is None:
            cached = {}
            lane_of = self.lane_of
            in_step = set(lane_of[step_of_item == step].tolist())
            for j, lane in enumerate(self.lanes):
                limit = step - 1 if j in in_step else step
                idx = np.flatnonzero((lane_of == j) & (step_of_item >= 0) & (step_of_item <= limit))
                if len(idx):
                    cached[lane] = int(idx[-1])
            self._next_preds[step] = cached
        return cached


class CarriedState(msgspec.Struct):
    """One what-if's state at the end of a window's own steps: how much earlier than in
    the unmodified replay the device work launched in its last step runs (by lane and
    recorded start), and each host thread's points from just before that step (recorded
    trace times, sorted, and how much earlier each is)."""

    devices: array  # parallel to ``ReplayCarry.device_index``'s items
    threads: dict[Any, tuple[list[float], list[float]]]
    # lane -> how much earlier than recorded the item before the next window's first item
    # on it ends (``ReplayCarry.lanes``); lanes where it did not move are left out
    lanes: dict[Any, float]
    completion: float  # trace time the last step completes


class _Pins(msgspec.Struct):
    """A window's what-if state before its own steps (``_Graph.carry_pins``)."""

    values: dict[int, float]  # variable -> its value there
    completion: tuple[int, float] | None  # (step, its completion)

    def __bool__(self) -> bool:
        return bool(self.values or self.completion)


class ReplayCarry(msgspec.Struct):
    """What the what-ifs of one window of a trace hand to the next (``windows``): by
    what-if (``ALL_SYNCS``, or a site's key), its ``CarriedState``. The next window pins its
    context step (the last step of this one) there, so that what a what-if gained in
    earlier windows (a host running ahead, a device queue) goes on in it as in a replay of
    the whole trace."""

    states: dict[Hashable, CarriedState] = msgspec.field(default_factory=dict)
    # The device items launched in the last step, (lane, recorded start) -> position in
    # each state's ``devices`` (one index for all the states: a site's state costs 8 bytes
    # per item). A what-if that moved nothing leaves no state: the next window replays it
    # from the recording.
    device_index: dict[tuple[Any, float], int] = msgspec.field(default_factory=dict)
    # Trace times the last step completes as recorded and in the unmodified replay: device
    # work launched before the next window's context step may still run after it.
    completions: tuple[float, float] | None = None
    # The typical launch latency and stream gap of the window with the most launches so
    # far (``_Graph.typical``): a window of a few kernels takes them from it.
    typical: tuple[float, float, int] | None = None
    # Per lane, the recorded start (trace time) and duration of the item before the next
    # window's first item on it: that window holds it as an item of its own (``_Builder``),
    # so that its lanes and synchronizes wait for it as in a whole graph; each what-if moves
    # it by ``CarriedState.lanes``.
    lanes: dict[Any, tuple[float, float]] = msgspec.field(default_factory=dict)


ALL_SYNCS = "every counted sync"  # ReplayCarry's key of "every sync removed"


class _Changes(dict):
    """The variables a what-if changed in place (variable -> its base value), and where it
    is the base replay shifted without being written (``_Graph.run``): past ``cut`` (None:
    no such tail), every variable whose task is at position ``cut`` or later is ``shift``
    us earlier; in each of ``stretches`` (first position, position after the last, shift;
    in order, all before ``cut``, between two of the what-if's own positions), every
    variable its tasks define is that much earlier, and only those read after the stretch
    are written (and in the dict)."""

    cut: int | None = None
    shift: float = 0.0
    stretches: list[tuple[int, int, float]] | tuple[()] = ()


class _ShiftTables(msgspec.Struct):
    """What the uniform-shift check and its readers need, built once per graph."""

    # numpy, not lists: a list of Python ints per variable took ~0.4x the JSON at 1 GB.
    def_pos: np.ndarray  # per variable: the position of the task that writes it
    live: np.ndarray  # per position: variables written before it and read at or after it
    slack: np.ndarray  # per position: least (base value - fixed lower bound) from there on
    step_first: np.ndarray  # per step: earliest task position of its end inputs (-1: fixed)
    step_last: np.ndarray  # per step: latest task position of its end inputs
    # Lists, for a binary search and a lookup per what-if (numpy's cost more per call).
    later_first: list[int]  # per step n: least step_first over the steps after n
    last_so_far: list[int]  # per step n: the largest step_last of the steps up to n
    # step_first and step_last again, for the lookups of one step (a numpy scalar per
    # lookup and comparison was most of a long run's per-site walk over its steps).
    first_of_step: list[int]
    last_of_step: list[int]


class _StretchTables(msgspec.Struct):
    """What skipping a stretch between a what-if's own positions needs (``_Graph.
    _skip_stretch``), built once per graph at the first skip."""

    defines: np.ndarray  # per position p: the variables its task defines at 2p, 2p + 1 (-1)
    lastuse: np.ndarray  # per variable: the position of its last reader
    slack: np.ndarray  # per position: base value - fixed lower bound (inf: none)


class _StepArrays(msgspec.Struct):
    """The base replay's per-step figures as arrays (``_Graph._walk_steps``), with the
    lists they were made from: ``carry_completions`` replaces those lists."""

    made_from: tuple[list[float], list[float], list[float]]
    host_end: np.ndarray
    dev_hi: np.ndarray
    intervals: np.ndarray
    has_end_vars: np.ndarray  # per step: whether it launched device work


class _StepEnds(msgspec.Struct):
    """A step's device end variables in the order of the tasks that define them, with those
    positions and their base values (``_Graph._latest_end_in_regions``). Lists as well as
    arrays: a step has a handful of ends in most traces, where a numpy call per region
    cost more than the search (half of a sync's what-if in a long run of short steps)."""

    positions: list[int]
    variables: list[int]
    base: np.ndarray
    base_list: list[float]
    has_nan: bool


class _Readers(msgspec.Struct):
    """Per variable, the positions of the tasks that read it (``positions[first[v]:
    first[v + 1]]``) and of those whose base value it sets (``binding_positions
    [binding_first[v]: binding_first[v + 1]]``: its value plus the edge's offset is the
    task's value), and a flag per position for the tasks a what-if has still to evaluate
    (all clear between what-ifs). Arrays of machine ints: lists of Python ints would take
    ~10x the memory on a large graph."""

    first: array
    positions: array
    binding_first: array
    binding_positions: array
    pending: bytearray


class _NoSyncEnds(msgspec.Struct):
    """A what-if's variables (``values``, worked on in place) with what putting a site's
    edges back into it needs (``_Graph.no_sync_ends``): the jumps it dropped, the last
    position where a task's fixed lower bound is above its inputs, and the ends a window is
    the latest of, by the position of the task defining each, with their values there and
    each end variable's offset."""

    values: list[float]
    pristine: array  # ``values`` as they are between sites (compact: 8 bytes a value)
    disabled: frozenset[int]
    last_fixed: int
    end_positions: np.ndarray  # sorted
    ends: np.ndarray  # in that order, their values in ``values`` (plus offsets)
    offset_of: dict[int, float]
    fixed_end: float  # the latest end no variable holds (a step ending at a fixed time)


def _later_by(
    frontier: list[int], live: int, values: list[float], before: Sequence[float]
) -> float | None:
    """The amount d > 0 by which every variable still to be read (``live`` of them: all in
    ``frontier``) is later than ``before`` it changed, if they all are by the same."""
    if not frontier or len(frontier) != live:
        return None
    first = frontier[0]
    shift = values[first] - before[first]
    if not shift > 0:
        return None
    for var in frontier:
        if abs(values[var] - before[var] - shift) > SHIFT_TOL_US:
            return None
    return shift


class _Graph:
    """Numbers only. Variables: device starts [0, n), device ends [n, 2n), host points
    [2n, 2n + m). Tasks are evaluated in an order where every input comes first."""

    def __init__(self) -> None:
        self.n_dev = 0
        self.t0 = 0.0  # the trace time node values are relative to
        self.tasks: list[tuple[Any, ...]] = []
        self.jump_pos: list[int] = []
        self.rec: list[float] = []
        self.lastuse: list[int] = []
        self.episode_jumps: list[list[int]] = []
        self.step_numbers: list[int] = []
        self.step_markers = True
        self.step_refs: list[tuple[int, float, int, float]] = []  # start var/off, end var/off
        self.step_of_item: np.ndarray = np.zeros(0, dtype=np.int64)
        # Per device item: whether the trace holds its launch (not work queued before it).
        self.item_launched: np.ndarray = np.zeros(0, dtype=bool)
        self.item_order: np.ndarray = np.zeros(0, dtype=np.int64)
        self.item_bounds: np.ndarray = np.zeros(0, dtype=np.int64)
        self.notes: list[str] = []
        self.stats: dict[str, float] = {}
        self.base_values: list[float] = []
        self.stream_floor = 0.0
        self.base_metrics: _Metrics
        self.recorded_metrics: _Metrics
        self._steps_of: tuple[list[int], dict[int, list[int]]] | None = None
        self._end_vars: list[list[int]] | None = None  # see ``_step_end_vars``
        self._ends_by_base: dict[int, list[int] | None] = {}  # see ``_step_ends_by_base``
        self._ends_by_pos: dict[int, _StepEnds] = {}  # see ``_latest_end_in_regions``
        self._step_arrays: _StepArrays | None = None  # see ``_base_step_arrays``
        self._shift_tables: _ShiftTables | None = None
        self.identity: _Identity | None = None
        # Items that ran before this window on a lane (``ReplayCarry.lanes``): item -> lane.
        self.ghosts: dict[int, Any] = {}
        # Typical launch latency and stream gap (us), and how many launches they are from.
        self.typical: tuple[float, float, int] = (0.0, 0.0, 0)
        self._completion_pin: tuple[int, float] | None = None  # see ``_pinned``
        self._unpinned: dict[int, tuple[Any, ...]] = {}  # tasks as before ``_pinned``
        self._readers: _Readers | None = None
        self._readers_wanted = False  # built at the start of the next what-if (``run``)
        self._stretch_tables: _StretchTables | None = None  # see ``_stretch_index``
        # Whole-range what-if evaluations so far: tasks evaluated, and how many changed.
        self._dense_evaluated = 0
        self._dense_changed = 0
        # Per host thread (tid; left out where two processes share one): its points'
        # recorded times (relative to ``t0``) and variables, for ``host_point``.
        self.host_points: dict[Any, tuple[np.ndarray, np.ndarray]] = {}

    def host_point(self, thread: Any, ts: float) -> int:
        """The variable of the last point of host thread ``thread`` (its tid) at or before
        trace time ``ts``: every host time of the thread after it moves as it does.
        -1: no such point."""
        found = self.host_points.get(thread)
        if found is None:
            return -1
        times, vars_ = found
        k = int(np.searchsorted(times, ts - self.t0, side="right")) - 1
        return int(vars_[k]) if k >= 0 else -1

    # -- evaluation ----------------------------------------------------------------------
    def run(
        self,
        values: list[float],
        disabled: Collection[int],
        lo: int,
        horizon: int | None,
        undo: _Changes | None = None,
        stops: Sequence[int] = (),
    ) -> None:
        """Evaluate tasks from position ``lo`` in place. With ``horizon``: a what-if from
        base values, stopping once no later task can read a changed value; ``undo`` then
        collects the old value of every variable changed (to put them back), and the run
        also stops where the rest is the base replay shifted (``undo.cut``).

        The shift: a removed sync in a host-bound trace moves everything after it earlier
        by the same amount, so its what-if would re-evaluate the whole rest of the trace.
        Past the removed edges, once every variable still to be read has moved earlier by
        the same ``d`` > 0 and no later task's fixed lower bound is within ``d`` of its
        base value, every later variable is its base value - ``d`` (each is a max of
        inputs + offsets: all of them shifted by ``d``).

        A what-if on a graph whose what-ifs change few of the tasks they pass evaluates
        only the tasks that read a changed variable (``_run_sparse``): in a GPU-bound trace
        with a sync in every step, one changed device end read at the end of the trace kept
        each what-if evaluating everything in between (660k tasks for 42k changes on a real
        A100 trace). Both give the same values: the base values are a fixed point of the
        tasks, so a task none of whose inputs changed keeps its base value; and removing
        edges only moves values earlier, so a task whose base value another input set keeps
        it when this one moves earlier.

        ``stops`` (sorted): the positions where the what-if changes the graph (its removed
        edges, the pins of a window's carried state). Between two of them, the run skips to
        the next where nothing it changed is read any more (the base values hold there), or
        where the uniform shift holds over the stretch as it may past the last one
        (``_skip_stretch``)."""
        # A what-if whose own edges span much of the graph (every sync removed, a site of
        # many syncs) has most tasks to evaluate anyway: the whole range is cheaper there.
        if horizon is not None and self._readers_wanted and (horizon - lo) * 4 < len(self.tasks):
            if self._readers is None:  # here: the base values are as the base replay left them
                self._readers = self._build_readers()
            self._run_sparse(values, disabled, lo, horizon, undo)
            return
        tasks = self.tasks
        lastuse = self.lastuse
        n = len(tasks)
        hi = n if horizon is None else horizon
        changes = 0
        skipped = 0
        pos = lo
        tables = None
        next_check = n
        check_every = SHIFT_CHECK_EVERY
        # Between two of the what-if's own edges (a site's syncs in successive steps), skip
        # ahead to the next where that is exact (``_skip_stretch``): a site's what-if
        # otherwise re-evaluated everything between its first and last sync.
        stretch_check = n
        stretch_every = SHIFT_CHECK_EVERY
        stops_passed = 0
        frontier: list[int] = []
        if undo is not None and horizon is not None:
            tables = self._shift_tables or self._build_shift_tables()
            next_check = hi + 1
            if len(stops) > 1:
                stretch_check = lo + 1 + SHIFT_CHECK_EVERY
        check_at = min(next_check, stretch_check)
        while pos < n and pos <= hi:
            if pos >= check_at:
                if pos >= next_check:
                    next_check = pos + check_every
                    check_every *= 2
                    frontier = [v for v in frontier if lastuse[v] >= pos]
                    if self._shifted_from(pos, frontier, values, undo, tables):  # type: ignore[arg-type]
                        self._count_dense(pos - lo - skipped, changes)
                        return
                if pos >= stretch_check:
                    passed = bisect_left(stops, pos)  # stops before pos (the one at pos is to run)
                    if passed != stops_passed:  # a new stretch: check early again
                        stops_passed = passed
                        stretch_every = SHIFT_CHECK_EVERY
                    stretch_check = pos + stretch_every if passed < len(stops) else n
                    stretch_every *= 2
                    if passed < len(stops):
                        frontier = [v for v in frontier if lastuse[v] >= pos]
                        resume = stops[passed]
                        skip = self._skip_stretch(pos, resume, values, undo, frontier, tables)  # type: ignore[arg-type]
                        if skip is not None:
                            frontier, last_read = skip
                            if last_read > hi:
                                hi = last_read
                            skipped += resume - pos
                            pos = resume
                            # The stop at resume runs next: the stretch after it starts
                            # there, checked from the start of the schedule.
                            stretch_check = resume + 1 + SHIFT_CHECK_EVERY
                            stretch_every = SHIFT_CHECK_EVERY * 2
                            stops_passed = passed + 1
                check_at = min(next_check, stretch_check)
                if pos > hi:
                    break
            out, out2, dur, av, ao, bv, bo, extra, syncs, const, jump = tasks[pos]
            v = const
            if av >= 0:
                x = values[av] + ao
                if x > v:
                    v = x
            if bv >= 0:
                x = values[bv] + bo
                if x > v:
                    v = x
            for src, off in extra:
                x = values[src] + off
                if x > v:
                    v = x
            if syncs and jump not in disabled:
                for src, off in syncs:
                    x = values[src] + off
                    if x > v:
                        v = x
            if horizon is not None:
                if v != values[out]:
                    changes += 1
                    use = lastuse[out]
                    if out2 >= 0 and lastuse[out2] > use:
                        use = lastuse[out2]
                    if use > hi:
                        hi = use
                    if undo is not None:
                        undo.setdefault(out, values[out])
                        frontier.append(out)
                        if out2 >= 0:
                            undo.setdefault(out2, values[out2])
                            frontier.append(out2)
                    values[out] = v
                    if out2 >= 0:
                        values[out2] = v + dur
            else:
                values[out] = v
                if out2 >= 0:
                    values[out2] = v + dur
            pos += 1
        if horizon is not None:
            self._count_dense(pos - lo - skipped, changes)

    def _count_dense(self, evaluated: int, changed: int) -> None:
        """Switch this graph's what-ifs to ``_run_sparse`` once their whole-range
        evaluations have cost a few passes over the graph and changed few of its tasks."""
        self._dense_evaluated += evaluated
        self._dense_changed += changed
        if (
            self._dense_evaluated > SPARSE_AFTER_PASSES * len(self.tasks)
            and self._dense_changed < SPARSE_BELOW_CHANGED_SHARE * self._dense_evaluated
        ):
            self._readers_wanted = True

    def _build_readers(self) -> _Readers:
        """The readers of each variable, from the tasks as built (not as ``_pinned``
        changed them) and the base values."""
        base = self.base_values
        sources = array("q")
        readers = array("q")
        binding = bytearray()
        unpinned = self._unpinned
        for pos, task in enumerate(self.tasks):
            if unpinned:
                task = unpinned.get(pos, task)
            out, _out2, _dur, av, ao, bv, bo, extra, syncs, _const, _jump = task
            value = base[out]
            if av >= 0:
                sources.append(av)
                readers.append(pos)
                binding.append(base[av] + ao == value)
            if bv >= 0:
                sources.append(bv)
                readers.append(pos)
                binding.append(base[bv] + bo == value)
            for src, off in (*extra, *syncs):
                sources.append(src)
                readers.append(pos)
                binding.append(base[src] + off == value)
        source = np.frombuffer(sources, dtype=np.int64)
        order = np.argsort(source, kind="stable")
        source = source[order]
        positions = np.frombuffer(readers, dtype=np.int64)[order]
        sets = np.frombuffer(binding, dtype=bool)[order]
        every_var = np.arange(len(self.rec) + 1)
        first = np.searchsorted(source, every_var, side="left")
        binding_first = np.searchsorted(source[sets], every_var, side="left")
        return _Readers(
            array("q", first.astype(np.int64).tobytes()),
            array("q", positions.tobytes()),
            array("q", binding_first.astype(np.int64).tobytes()),
            array("q", positions[sets].tobytes()),
            bytearray(len(self.tasks)),
        )

    def _run_sparse(
        self,
        values: list[float],
        disabled: Collection[int],
        lo: int,
        horizon: int,
        undo: _Changes | None,
    ) -> None:
        """``run`` with a horizon, evaluating past it only the tasks that read a variable
        changed before them: those whose base value it set when it moved earlier, all of
        them when it moved later (which removing edges never does; a window's carried
        state might). The uniform-shift checks happen at the positions the whole-range
        evaluation checks at (with the same variables changed), so the two give the same
        values and the same ``undo``."""
        tasks = self.tasks
        lastuse = self.lastuse
        readers = self._readers
        assert readers is not None
        pending = readers.pending
        all_first, all_positions = readers.first, readers.positions
        binding_first, binding_positions = readers.binding_first, readers.binding_positions
        hi = min(horizon, len(tasks) - 1)
        pending[lo : hi + 1] = b"\x01" * (hi + 1 - lo)
        tables = None
        next_check = len(tasks)
        check_every = SHIFT_CHECK_EVERY
        frontier: list[int] = []
        if undo is not None:
            tables = self._shift_tables or self._build_shift_tables()
            next_check = hi + 1
        pos = lo
        try:
            while True:
                pos = pending.find(1, pos, hi + 1)
                if pos < 0:
                    return
                while next_check <= pos:
                    at = next_check
                    next_check = at + check_every
                    check_every *= 2
                    frontier = [v for v in frontier if lastuse[v] >= at]
                    if self._shifted_from(at, frontier, values, undo, tables):  # type: ignore[arg-type]
                        return
                pending[pos] = 0
                out, out2, dur, av, ao, bv, bo, extra, syncs, const, jump = tasks[pos]
                v = const
                if av >= 0:
                    x = values[av] + ao
                    if x > v:
                        v = x
                if bv >= 0:
                    x = values[bv] + bo
                    if x > v:
                        v = x
                for src, off in extra:
                    x = values[src] + off
                    if x > v:
                        v = x
                if syncs and jump not in disabled:
                    for src, off in syncs:
                        x = values[src] + off
                        if x > v:
                            v = x
                if v != values[out]:
                    use = lastuse[out]
                    if out2 >= 0 and lastuse[out2] > use:
                        use = lastuse[out2]
                    if use > hi:
                        hi = use
                    if undo is not None:
                        undo.setdefault(out, values[out])
                        frontier.append(out)
                        if out2 >= 0:
                            undo.setdefault(out2, values[out2])
                            frontier.append(out2)
                    if v < values[out]:
                        first, positions = binding_first, binding_positions
                    else:
                        first, positions = all_first, all_positions
                    values[out] = v
                    for reader in positions[first[out] : first[out + 1]]:
                        pending[reader] = 1
                    if out2 >= 0:
                        values[out2] = v + dur
                        for reader in positions[first[out2] : first[out2 + 1]]:
                            pending[reader] = 1
                pos += 1
        finally:
            pending[lo : hi + 1] = bytes(hi + 1 - lo)

    def _shifted_from(
        self,
        pos: int,
        frontier: list[int],
        values: list[float],
        undo: _Changes,
        tables: _ShiftTables,
    ) -> bool:
        """Whether everything from ``pos`` on is the base replay shifted (then ``undo``
        says by how much). ``frontier``: the changed variables still read at ``pos``."""
        shift = self._uniform_shift(pos, frontier, values, undo, tables, tables.slack[pos])
        if shift is None:
            return False
        undo.cut = pos
        undo.shift = shift
        return True

    @staticmethod
    def _uniform_shift(
        pos: int,
        frontier: list[int],
        values: list[float],
        undo: _Changes,
        tables: _ShiftTables,
        slack: float,
    ) -> float | None:
        """The amount by which every variable still to be read at ``pos`` moved earlier, if
        they all moved by the same and no task's fixed lower bound over the stretch to be
        skipped (its least ``slack``) is within it; else None."""
        if not frontier or len(frontier) != tables.live[pos]:
            return None  # some variable still to be read did not move
        first = frontier[0]
        shift = undo[first] - values[first]
        if not shift > 0 or slack < shift:
            return None
        for var in frontier:
            if not abs(undo[var] - values[var] - shift) <= SHIFT_TOL_US:  # NaN: not the same
                return None
        return shift

    def _skip_stretch(
        self,
        pos: int,
        resume: int,
        values: list[float],
        undo: _Changes,
        frontier: list[int],
        tables: _ShiftTables,
    ) -> tuple[list[int], int] | None:
        """Skip the tasks in [pos, resume) (``resume``: the what-if's next own position)
        where they are the base replay, or it shifted: the new frontier and the last
        position reading what the skip wrote; None where neither holds (or the stretch is
        too short for a shift to pay)."""
        if not frontier:
            return [], -1  # nothing changed is read from here on: the base values hold
        if resume - pos < STRETCH_MIN_TASKS:
            return None
        index = self._stretch_index()
        # The least slack over this stretch only: a fixed lower bound later in the trace
        # (a thread whose first point is in the last step) does not stop it.
        slack = float(index.slack[pos:resume].min())
        shift = self._uniform_shift(pos, frontier, values, undo, tables, slack)
        if shift is None or shift == float("inf"):  # inf: a value at -inf moved
            return None
        return self._shift_stretch(pos, resume, shift, values, undo, frontier, index)

    def _shift_stretch(
        self,
        pos: int,
        resume: int,
        shift: float,
        values: list[float],
        undo: _Changes,
        frontier: list[int],
        index: _StretchTables,
    ) -> tuple[list[int], int]:
        """Skip the tasks in [pos, resume), each the base replay less ``shift`` (as past
        ``undo.cut``): write only the variables they define that are read at or after
        ``resume``, and record the stretch in ``undo``. Returns the new frontier and the
        last position that reads a variable written here."""
        written = index.defines[2 * pos : 2 * resume]
        written = written[written >= 0]
        read_later = written[index.lastuse[written] >= resume]
        last_read = int(index.lastuse[read_later].max()) if len(read_later) else -1
        for var in read_later.tolist():
            old = values[var]
            undo.setdefault(var, old)
            values[var] = old - shift
        lastuse = self.lastuse
        frontier = [v for v in frontier if lastuse[v] >= resume] + read_later.tolist()
        if not undo.stretches:
            undo.stretches = []
        undo.stretches.append((pos, resume, shift))  # type: ignore[union-attr]
        return frontier, last_read

    def _stretch_index(self) -> _StretchTables:
        """What ``_skip_stretch`` needs, built at its first use (graphs whose what-ifs never
        skip a stretch do not pay the memory)."""
        if self._stretch_tables is None:
            tasks = self.tasks
            count = len(tasks)
            unpinned = self._unpinned  # the tasks as built, not as ``_pinned`` made them
            if unpinned:
                tasks = [unpinned.get(pos, task) for pos, task in enumerate(tasks)]
            defines = np.empty(2 * count, dtype=np.int64)
            outs = np.fromiter((t[0] for t in tasks), dtype=np.int64, count=count)
            defines[0::2] = outs
            defines[1::2] = np.fromiter((t[1] for t in tasks), dtype=np.int64, count=count)
            consts = np.fromiter((t[9] for t in tasks), dtype=float, count=count)
            base = np.asarray(self.base_values, dtype=float)
            with np.errstate(invalid="ignore"):
                slack = np.where(np.isneginf(consts), np.inf, base[outs] - consts)
            self._stretch_tables = _StretchTables(
                defines,
                np.asarray(self.lastuse, dtype=np.int64),
                np.nan_to_num(slack, nan=0.0, posinf=np.inf),
            )
        return self._stretch_tables

    def _build_shift_tables(self) -> _ShiftTables:
        tasks = self.tasks
        n_tasks = len(tasks)
        n_vars = len(self.rec)
        def_pos = np.full(n_vars, n_tasks, dtype=np.int64)
        outs = np.fromiter((t[0] for t in tasks), dtype=np.int64, count=n_tasks)
        outs2 = np.fromiter((t[1] for t in tasks), dtype=np.int64, count=n_tasks)
        positions = np.arange(n_tasks, dtype=np.int64)
        def_pos[outs] = positions
        has2 = outs2 >= 0
        def_pos[outs2[has2]] = positions[has2]
        lastuse = np.asarray(self.lastuse, dtype=np.int64)
        # Live at p: written before p (def_pos < p) and read at p or later (lastuse >= p).
        read = lastuse > def_pos
        change = np.zeros(n_tasks + 2, dtype=np.int64)
        np.add.at(change, def_pos[read] + 1, 1)
        np.add.at(change, lastuse[read] + 1, -1)
        live = np.cumsum(change)[: n_tasks + 1]
        consts = np.fromiter((t[9] for t in tasks), dtype=float, count=n_tasks)
        base = np.asarray(self.base_values, dtype=float)
        with np.errstate(invalid="ignore"):
            slack = np.where(np.isneginf(consts), np.inf, base[outs] - consts)
        slack = np.nan_to_num(slack, nan=0.0, posinf=np.inf)
        suffix = np.minimum.accumulate(slack[::-1])[::-1] if n_tasks else slack
        suffix = np.append(suffix, np.inf)
        n_steps = len(self.step_refs)
        step_first = np.full(n_steps, n_tasks, dtype=np.int64)
        step_last = np.full(n_steps, -1, dtype=np.int64)
        bounds = self.item_bounds
        order = self.item_order
        dev_end_pos = def_pos[self.n_dev + order] if len(order) else np.zeros(0, np.int64)
        for step, (_sv, _so, ev, _eo) in enumerate(self.step_refs):
            parts = []
            if len(bounds) > step + 1 and bounds[step + 1] > bounds[step]:
                parts.append(dev_end_pos[int(bounds[step]) : int(bounds[step + 1])])
            if ev >= 0:
                parts.append(def_pos[[ev]])
            if parts:
                joined = np.concatenate(parts)
                step_first[step] = joined.min()
                step_last[step] = joined.max()
            if ev < 0:
                step_first[step] = -1  # a fixed host end: never moves with the shift
        later = np.append(step_first, n_tasks)[::-1]
        later_first = np.minimum.accumulate(later)[::-1][1:]
        self._shift_tables = _ShiftTables(
            def_pos,
            live.astype(np.int64),
            suffix,
            step_first,
            step_last,
            later_first.tolist(),
            (np.maximum.accumulate(step_last) if n_steps else step_last).tolist(),
            step_first.tolist(),
            step_last.tolist(),
        )
        return self._shift_tables

    def moved_earlier(self, changed: _Changes) -> Callable[[int], float]:
        """How much earlier each variable is in the what-if ``changed`` describes (call it
        inside ``_removed``: ``base_values`` holds the what-if's values then)."""
        base_values = self.base_values
        tables = self._shift_tables
        shift_of = _shift_of(changed, tables.def_pos) if tables is not None else None

        def moved(var: int) -> float:
            if var in changed:
                return changed[var] - base_values[var]
            return shift_of(var) if shift_of is not None else 0.0

        return moved

    def base_run(self) -> int:
        """The unmodified replay from nothing; returns how many inputs were read before
        they were computed (an order violation: 0 when the order is sound)."""
        nan = float("nan")
        values = [nan] * len(self.rec)
        violations = 0
        for out, out2, dur, av, ao, bv, bo, extra, syncs, const, _jump in self.tasks:
            v = const
            if av >= 0:
                x = values[av] + ao
                if x != x:
                    violations += 1
                elif x > v:
                    v = x
            if bv >= 0:
                x = values[bv] + bo
                if x != x:
                    violations += 1
                elif x > v:
                    v = x
            for src, off in extra:
                x = values[src] + off
                if x != x:
                    violations += 1
                elif x > v:
                    v = x
            for src, off in syncs:
                x = values[src] + off
                if x != x:
                    violations += 1
                elif x > v:
                    v = x
            values[out] = v
            if out2 >= 0:
                values[out2] = v + dur
        self.base_values = values
        return violations

    # -- metrics -------------------------------------------------------------------------
    def metrics(self, values: list[float]) -> _Metrics:
        n_dev = self.n_dev
        starts = np.asarray(values[:n_dev], dtype=float)
        ends = np.asarray(values[n_dev : 2 * n_dev], dtype=float)
        n_steps = len(self.step_refs)
        host_start = []
        host_end = []
        for sv, so, ev, eo in self.step_refs:
            host_start.append((values[sv] if sv >= 0 else 0.0) + so)
            host_end.append((values[ev] if ev >= 0 else 0.0) + eo)
        dev_lo = [float("nan")] * n_steps
        dev_hi = [float("nan")] * n_steps
        if len(self.item_order):
            order = self.item_order
            bounds = self.item_bounds
            # reduceat over the non-empty steps only: an empty step has no segment.
            full = np.flatnonzero(np.diff(bounds) > 0)
            lo = np.minimum.reduceat(starts[order], bounds[full]).tolist()
            hi = np.maximum.reduceat(ends[order], bounds[full]).tolist()
            for k, n in enumerate(full.tolist()):
                dev_lo[n] = lo[k]
                dev_hi[n] = hi[k]
        host_us = [e - s for s, e in zip(host_start, host_end, strict=True)]
        device_us = [0.0 if h != h else h - lo_ for lo_, h in zip(dev_lo, dev_hi, strict=True)]
        completion = []
        done = host_start[0] if n_steps else 0.0
        pinned_step, pinned_done = self._completion_pin or (-1, 0.0)
        for n in range(n_steps):
            done = max(done, host_end[n], dev_hi[n] if dev_hi[n] == dev_hi[n] else done)
            if n == pinned_step:
                done = pinned_done
            completion.append(done)
        first = host_start[0] if n_steps else 0.0
        intervals = [c - p for c, p in zip(completion, [first] + completion[:-1], strict=True)]
        window = completion[-1] - first if n_steps else 0.0
        return _Metrics(
            host_start,
            host_us,
            device_us,
            completion,
            intervals,
            window,
            host_end=host_end,
            dev_hi=dev_hi,
        )

    def metrics_for(self, disabled: frozenset[int], pins: _Pins | None = None) -> _Metrics:
        """Metrics with the sync edges of these episodes dropped (all at once), from the
        state ``pins`` (``carry_pins``) holds."""
        jumps = self._jumps_of(disabled)
        if not jumps and not pins:
            m = self.base_metrics
            return _Metrics(
                m.host_start, m.host_us, m.device_us, m.completion, m.intervals, m.window, None
            )
        values = list(self.base_values)
        with self._pinned(pins) as pinned:
            positions = [self.jump_pos[j] for j in jumps] + pinned
            if positions:
                self.run(values, frozenset(jumps), min(positions), max(positions))
            m = self.metrics(values)
        m.values = values
        return m

    # -- windows of one trace, replayed one after the other ------------------------------
    @contextlib.contextmanager
    def _pinned(self, pins: _Pins | None) -> Iterator[list[int]]:
        """The state ``pins`` holds, in the tasks (a pinned variable's task made a constant)
        and the completions while inside; yields the positions of the tasks changed."""
        if not pins:
            yield []
            return
        tasks = self.tasks
        def_pos = (self._shift_tables or self._build_shift_tables()).def_pos
        saved: dict[int, tuple[Any, ...]] = {}
        for var, value in pins.values.items():
            pos = int(def_pos[var])
            task = saved[pos] = tasks[pos]
            tasks[pos] = (task[0], task[1], task[2], -1, 0.0, -1, 0.0, (), (), value, task[10])
        self._completion_pin = pins.completion
        self._unpinned = saved
        try:
            yield list(saved)
        finally:
            self._completion_pin = None
            self._unpinned = {}
            for pos, task in saved.items():
                tasks[pos] = task

    def carry_pins(
        self, state: CarriedState, device_index: Mapping[tuple[Any, float], int], first_own: int
    ) -> _Pins:
        """The steps before ``first_own`` (a window's context step: the last step of the
        window before) where the window before left them in the same what-if: each device
        item (by lane and recorded start) and host point (by how much earlier its thread was
        there) pinned, each lane's item from before the window (``_CarriedItem``) where that
        window moved it, and the step's completion."""
        ident = self.identity
        if ident is None or first_own < 1:
            return _Pins({}, None)
        base_values = self.base_values
        values: dict[int, float] = {}
        moves = state.devices
        for i in self.item_order[: int(self.item_bounds[first_own])].tolist():
            at = device_index.get((ident.lanes[ident.lane_of[i]], ident.events[i].ts))
            if at is not None:
                values[i] = base_values[i] - max(moves[at], 0.0)
        own_start = self.recorded_metrics.host_start[first_own]
        rec = self.rec
        for h, key in enumerate(ident.thread_keys):
            carried = state.threads.get(key)
            if not carried:
                continue
            times, thread_moves = carried
            lo, hi = ident.thread_vars[h]
            for var in range(lo, hi):
                t = rec[var]
                if t >= own_start:
                    break
                # Before the first point carried: the thread's lead where the step began.
                k = max(bisect_right(times, t + self.t0 + TOL_US / 1000) - 1, 0)
                values[var] = base_values[var] - max(thread_moves[k], 0.0)
        for item, lane in self.ghosts.items():
            moved = state.lanes.get(lane)
            if moved:
                values[item] = base_values[item] - max(moved, 0.0)
        return _Pins(values, (first_own - 1, state.completion - self.t0))

    def carry_completions(self, step: int, recorded: float, base: float) -> None:
        """The recorded and base completions from step ``step`` on no earlier than the
        window before found them (trace times): device work launched before this window
        may still run then."""
        for m, carried in ((self.recorded_metrics, recorded), (self.base_metrics, base)):
            floor = carried - self.t0
            if not m.completion or m.completion[step] >= floor:
                continue
            completion = list(m.completion)
            for n in range(step, len(completion)):
                if completion[n] >= floor:
                    break
                completion[n] = floor
            first = m.host_start[0]
            m.completion = completion
            previous = [first, *completion[:-1]]
            m.intervals = [c - p for c, p in zip(completion, previous, strict=True)]
            m.window = completion[-1] - first

    def next_lane_items(
        self, step: int, before: Mapping[Any, tuple[float, float]]
    ) -> dict[Any, tuple[float, float]]:
        """``ReplayCarry.lanes`` after step ``step`` (the window's last own step): per lane,
        the recorded start (trace time) and duration of the item before the next window's
        first item on it; ``before``: the window before's, for lanes this window has no
        such item on."""
        lanes = dict(before)
        if self.identity is not None:
            n_dev = self.n_dev
            rec = self.rec
            for lane, pred in self.identity.next_predecessors(self.step_of_item, step).items():
                lanes[lane] = (rec[pred] + self.t0, rec[n_dev + pred] - rec[pred])
        return lanes

    def device_index(self, step: int) -> dict[tuple[Any, float], int]:
        """``ReplayCarry.device_index`` of the device items launched in step ``step``."""
        ident = self.identity
        if ident is None:
            return {}
        lo, hi = int(self.item_bounds[step]), int(self.item_bounds[step + 1])
        items = self.item_order[lo:hi].tolist()
        return {(ident.lanes[ident.lane_of[i]], ident.events[i].ts): n for n, i in enumerate(items)}

    def carried_state(
        self,
        moved: Callable[[int], float],
        saving: Saving,
        step: int,
        before: CarriedState | None,
    ) -> CarriedState | None:
        """What a what-if (``moved``: how much earlier than the base replay it has each
        variable; ``saving``: its saving) leaves at the end of step ``step`` (a window's
        last own step) for the next window's ``carry_pins`` (devices in the order of
        ``device_index``); what ``before`` (the state this window started from) held of
        lanes and threads this window does not have goes on. None: it moved nothing."""
        ident = self.identity
        if ident is None:
            return None
        threads: dict[Any, tuple[list[float], list[float]]] = {}
        lanes: dict[Any, float] = {}
        if before is not None:
            # Those this window has no work on go on as they were, where they moved.
            lanes.update((k, v) for k, v in before.lanes.items() if v != 0.0)
            threads.update((k, v) for k, v in before.threads.items() if any(v[1]))
        passed_lanes = set(lanes)
        passed_threads = set(threads)
        # How much earlier the step completes: the first step's start moved, and each
        # step's interval shortened by its saving.
        sv = self.step_refs[0][0]
        completion_moved = (moved(sv) if sv >= 0 else 0.0) + saving.over(0, step)
        completion = self.base_metrics.completion[step] - completion_moved + self.t0
        lo, hi = int(self.item_bounds[step]), int(self.item_bounds[step + 1])
        devices = array("d", map(moved, self.item_order[lo:hi].tolist()))
        moved_any = completion_moved != 0.0 or any(devices)
        n_dev = self.n_dev
        for lane, pred in ident.next_predecessors(self.step_of_item, step).items():
            passed_lanes.discard(lane)
            lane_moved = moved(n_dev + pred)
            if lane_moved != 0.0:
                lanes[lane] = lane_moved
                moved_any = True
            else:
                lanes.pop(lane, None)
        host_start = self.recorded_metrics.host_start
        start = host_start[step]
        end = host_start[step + 1] if step + 1 < len(host_start) else float("inf")
        rec = self.rec
        for h, key in enumerate(ident.thread_keys):
            first, last = ident.thread_vars[h]
            # The thread's last point before the step (its lead there), then its points in it.
            k = max(bisect_left(rec, start, first, last) - 1, first)
            times = []
            moves = []
            for var in range(k, last):
                if rec[var] >= end:
                    break
                times.append(rec[var] + self.t0)
                moves.append(moved(var))
            if times:
                moved_any = moved_any or any(moves)
                threads[key] = (times, moves)
                passed_threads.discard(key)
        if not (moved_any or passed_lanes or passed_threads):
            return None
        return CarriedState(devices, threads, lanes, completion)

    def carried_saving(
        self,
        disabled: frozenset[int],
        pins: _Pins | None,
        last_own: int,
        before: CarriedState | None,
    ) -> tuple[Saving, CarriedState | None]:
        """``saving`` of a window's what-if from the state ``pins`` holds, and the state it
        leaves after step ``last_own`` for the next window (``carried_state``)."""
        jumps = self._jumps_of(disabled)
        with self._pinned(pins) as pinned:
            positions = [self.jump_pos[j] for j in jumps] + pinned
            if not positions:
                zero = Saving.of_steps(0.0, len(self.step_refs), {})
                return zero, self.carried_state(lambda var: 0.0, zero, last_own, before)
            with self._removed(jumps, positions) as changed:
                quick = self._saving_of_changes(changed)
                if quick is not None:
                    state = self.carried_state(self.moved_earlier(changed), quick, last_own, before)
                    return quick, state
        m = self.metrics_for(disabled, pins)
        saving = self.saving_from(m)
        return saving, self.carried_state(self.moved_in(m), saving, last_own, before)

    def moved_in(self, m: _Metrics) -> Callable[[int], float]:
        """How much earlier than the base replay each variable is in ``m``'s what-if."""
        base_values = self.base_values
        values = m.values
        if values is None:
            return lambda var: 0.0
        return lambda var: base_values[var] - values[var]

    def saving_from(self, m: _Metrics) -> Saving:
        base = self.base_metrics
        return Saving(
            base.window - m.window,
            [b - w for b, w in zip(base.intervals, m.intervals, strict=True)],
        )

    def saving(self, disabled: frozenset[int]) -> Saving:
        return self.saving_and_work(disabled)[0]

    def saving_and_work(self, disabled: frozenset[int]) -> tuple[Saving, int]:
        """``saving_from(metrics_for(disabled))``, computed from the variables and steps
        the what-if changes only (copying every variable and recomputing every step per
        sync cost a pass over the whole graph each), and how many variables it changed."""
        jumps = self._jumps_of(disabled)
        changed_count = 0
        if jumps:
            # ``_removed`` spelled out: its generator's set-up was a few percent of each
            # of a long run's 20,000 what-ifs.
            changed = self._remove(jumps)
            try:
                quick = self._saving_of_changes(changed)
                changed_count = len(changed)
            finally:
                self._put_back(changed)
            if quick is not None:
                return quick, changed_count
        return self.saving_from(self.metrics_for(disabled)), max(changed_count, len(self.tasks))

    def _jumps_of(self, disabled: Collection[int]) -> list[int]:
        return [
            j for i in disabled if 0 <= i < len(self.episode_jumps) for j in self.episode_jumps[i]
        ]

    @contextlib.contextmanager
    def _removed(self, jumps: list[int], positions: list[int] | None = None) -> Iterator[_Changes]:
        """The base values with these sync edges dropped, in place; yields the changed
        variables (with their base values; past ``cut``, the shift) and puts the base values
        back after. In place, so one graph serves one thread at a time (each analysis builds
        its own). ``positions``: where the what-if starts changing (default: the jumps')."""
        changed = self._remove(jumps, positions)
        try:
            yield changed
        finally:
            self._put_back(changed)

    def _remove(self, jumps: list[int], positions: list[int] | None = None) -> _Changes:
        """``_removed``'s set-up: the what-if in place, its changes returned (put back with
        ``_put_back``; here already if the run fails)."""
        changed = _Changes()
        if positions is None:
            positions = [self.jump_pos[j] for j in jumps]
        try:
            stops = sorted(set(positions))
            self.run(self.base_values, frozenset(jumps), stops[0], stops[-1], changed, stops)
        except BaseException:
            self._put_back(changed)
            raise
        return changed

    def _put_back(self, changed: _Changes) -> None:
        values = self.base_values
        for index, old in changed.items():
            values[index] = old

    # -- a site's edges put back into the "every sync removed" replay (``fix_together``) ---
    def window_of(self, values: list[float]) -> float:
        """``metrics(values).window`` of a whole trace's graph, from the last completion
        alone: the latest host end or device end of the steps (no step list built)."""
        n_steps = len(self.step_refs)
        if not n_steps:
            return 0.0
        sv, so, _ev, _eo = self.step_refs[0]
        first = (values[sv] if sv >= 0 else 0.0) + so
        done = first
        for _sv, _so, ev, eo in self.step_refs:
            end = (values[ev] if ev >= 0 else 0.0) + eo
            if end > done:
                done = end
        if len(self.item_order):
            n_dev = self.n_dev
            ends = np.asarray(values[n_dev : 2 * n_dev], dtype=float)[self.item_order]
            bounds = self.item_bounds
            full = np.flatnonzero(np.diff(bounds) > 0)
            # Per step as ``metrics`` takes it: a step whose ends hold a NaN is left out.
            hi = np.maximum.reduceat(ends, bounds[full])
            hi = hi[hi == hi]
            if len(hi):
                done = max(done, float(hi.max()))
        return done - first

    def no_sync_ends(self, values: list[float], disabled: Collection[int]) -> _NoSyncEnds:
        """What ``window_with_edges_back`` needs of the what-if ``values`` holds (the tasks
        with the jumps ``disabled`` dropped), built once for all its sites."""
        tables = self._shift_tables or self._build_shift_tables()
        def_pos = tables.def_pos
        # The last task whose fixed lower bound is above every input: past it, tasks whose
        # inputs all move later by d move by d.
        last_fixed = -1
        neg_inf = _NEG_INF
        for pos, task in enumerate(self.tasks):
            if task[9] == neg_inf:
                continue
            _o, _o2, _d, av, ao, bv, bo, extra, syncs, const, jump = task
            x = neg_inf
            if av >= 0:
                x = max(x, values[av] + ao)
            if bv >= 0:
                x = max(x, values[bv] + bo)
            for src, off in extra:
                x = max(x, values[src] + off)
            if syncs and jump not in disabled:
                for src, off in syncs:
                    x = max(x, values[src] + off)
            if const > x:
                last_fixed = pos
        # The ends a window is the latest of: each step's host end, its device items' ends.
        end_vars: list[int] = []
        end_offs: list[float] = []
        fixed_end = neg_inf
        for _sv, _so, ev, eo in self.step_refs:
            if ev >= 0:
                end_vars.append(ev)
                end_offs.append(eo)
            else:
                fixed_end = max(fixed_end, eo)
        item_ends = (self.item_order + self.n_dev).tolist()
        variables = np.asarray(end_vars + item_ends, dtype=np.int64)
        offsets = np.asarray(end_offs + [0.0] * len(item_ends), dtype=float)
        ends = np.asarray(values, dtype=float)[variables] + offsets
        positions = def_pos[variables] if len(variables) else np.zeros(0, dtype=np.int64)
        order = np.argsort(positions, kind="stable")
        positions, ends = positions[order], ends[order]
        offset_of: dict[int, float] = {}
        for var, off in zip(end_vars, end_offs, strict=True):
            if off > offset_of.get(var, neg_inf):
                offset_of[var] = off
        for var in item_ends:
            offset_of.setdefault(var, 0.0)
        return _NoSyncEnds(
            values,
            array("d", values),
            frozenset(disabled),
            last_fixed,
            positions,
            ends,
            offset_of,
            fixed_end,
        )

    def window_with_edges_back(self, ctx: _NoSyncEnds, back: Collection[int]) -> tuple[float, int]:
        """The window of the what-if ``ctx`` holds (the fixed point of the tasks with the
        jumps ``ctx.disabled`` dropped: every counted sync removed) with the sync edges of
        the jumps ``back`` kept after all, and how many tasks that evaluated. In place:
        ``ctx.values`` is as it was on return.

        Only the tasks that may move are evaluated: from each of those jumps on, while a
        variable it moved is still to be read (putting edges back only moves values later);
        where the graph's what-ifs indexed the readers of each variable (``_Readers``), only
        the readers of what moved. So a site whose syncs wait for nothing once the others
        are gone costs about its own syncs, wherever they are. Where every variable still
        to be read is later by the same d (past the last task a fixed lower bound holds,
        ``_NoSyncEnds.last_fixed``), every task up to the site's next jump is d later too (a
        max of inputs all d later): that stretch is skipped, writing only what is read after
        it, and past its last jump the rest of the trace; the window's ends there are taken
        d later (``_window_shifted``)."""
        values = ctx.values
        stops = sorted({self.jump_pos[j] for j in back})
        if not stops:
            return self.window_of(values), 0
        still = ctx.disabled - frozenset(back)
        readers = self._readers  # None: evaluate every task while something moved is read
        tables = self._shift_tables or self._build_shift_tables()
        live = tables.live
        tasks = self.tasks
        n_tasks = len(tasks)
        lastuse = self.lastuse
        lo = pos = stops[0]
        hi = stops[-1]  # the last position that may move (sparse: to clear after)
        reach = -1  # the last position reading a variable moved so far
        if readers is not None:
            pending = readers.pending
            first, readers_at = readers.first, readers.positions
            for stop in stops:
                pending[stop] = 1
        old = ctx.pristine  # each variable changes once at most: its value before is here
        moved = array("q")  # the variables changed (as machine ints: a long run moves 10^5)
        frontier: list[int] = []
        shifted: list[tuple[int, int, float]] = []  # (first position, past the last, d)
        next_check = max(lo + 1 + SHIFT_CHECK_EVERY, ctx.last_fixed + 1)
        check_every = SHIFT_CHECK_EVERY
        evaluated = 0
        try:
            while True:
                if readers is not None:
                    pos = pending.find(1, pos, hi + 1)
                    if pos < 0:
                        break
                elif pos > reach:  # nothing moved is read here: on to the next jump
                    ahead = bisect_left(stops, pos)
                    if ahead == len(stops):
                        break
                    pos = stops[ahead]
                while next_check <= pos and next_check < n_tasks:
                    at = next_check
                    next_check = at + check_every
                    check_every *= 2
                    ahead = bisect_left(stops, at)
                    resume = stops[ahead] if ahead < len(stops) else n_tasks
                    if resume - at < STRETCH_MIN_TASKS:
                        continue
                    frontier = [v for v in frontier if lastuse[v] >= at]
                    shift = _later_by(frontier, int(live[at]), values, old)
                    if shift is None:
                        continue
                    shifted.append((at, resume, shift))
                    if resume == n_tasks:  # past the site's last jump: all the rest
                        return self._window_shifted(ctx, shifted, moved), evaluated
                    # Write what the stretch defines and is read from ``resume`` on.
                    index = self._stretch_index()
                    written = index.defines[2 * at : 2 * resume]
                    written = written[written >= 0]
                    read_later = written[index.lastuse[written] >= resume]
                    frontier = [v for v in frontier if lastuse[v] >= resume]
                    for var in read_later.tolist():
                        moved.append(var)
                        values[var] += shift
                        frontier.append(var)
                        if lastuse[var] > reach:
                            reach = lastuse[var]
                        if readers is not None:
                            for reader in readers_at[first[var] : first[var + 1]]:
                                pending[reader] = 1
                    if readers is not None:
                        hi = max(hi, reach)
                        pending[at:resume] = bytes(resume - at)
                    pos = resume
                    next_check = resume + 1 + SHIFT_CHECK_EVERY
                    check_every = SHIFT_CHECK_EVERY * 2
                if readers is not None:
                    pending[pos] = 0
                evaluated += 1
                out, out2, dur, av, ao, bv, bo, extra, syncs, const, jump = tasks[pos]
                v = const
                if av >= 0:
                    x = values[av] + ao
                    if x > v:
                        v = x
                if bv >= 0:
                    x = values[bv] + bo
                    if x > v:
                        v = x
                for src, off in extra:
                    x = values[src] + off
                    if x > v:
                        v = x
                if syncs and jump not in still:
                    for src, off in syncs:
                        x = values[src] + off
                        if x > v:
                            v = x
                if v != values[out]:
                    moved.append(out)
                    values[out] = v
                    frontier.append(out)
                    use = lastuse[out]
                    if out2 >= 0:
                        moved.append(out2)
                        values[out2] = v + dur
                        frontier.append(out2)
                        if lastuse[out2] > use:
                            use = lastuse[out2]
                    if use > reach:
                        reach = use
                    if readers is not None:
                        for reader in readers_at[first[out] : first[out + 1]]:
                            pending[reader] = 1
                        if out2 >= 0:
                            for reader in readers_at[first[out2] : first[out2 + 1]]:
                                pending[reader] = 1
                        if use > hi:
                            hi = use
                pos += 1
            if shifted:
                return self._window_shifted(ctx, shifted, moved), evaluated
            return self.window_of(values), evaluated
        finally:
            if readers is not None:
                pending[lo : hi + 1] = bytes(hi + 1 - lo)
            for var in moved:
                values[var] = old[var]

    def _window_shifted(
        self, ctx: _NoSyncEnds, shifted: Sequence[tuple[int, int, float]], changed: array
    ) -> float:
        """``window_of`` the values once every task of each stretch of ``shifted`` (first
        position, past the last, d) is d later than in ``ctx.values``, whose other values
        are as they are now (``changed``: the variables that moved, only ever later; their
        values before are ``ctx.pristine``)."""
        values = ctx.values
        tables = self._shift_tables
        assert tables is not None
        sv, so, _ev, _eo = self.step_refs[0]
        start = (values[sv] if sv >= 0 else 0.0) + so
        if sv >= 0 and values[sv] == ctx.pristine[sv]:
            at = int(tables.def_pos[sv])
            start += next((d for a, b, d in shifted if a <= at < b), 0.0)
        done = max(start, ctx.fixed_end)
        positions, ends = ctx.end_positions, ctx.ends
        done_before = 0
        for a, b, d in shifted:
            ka, kb = np.searchsorted(positions, (a, b), side="left").tolist()
            if ka > done_before:
                done = max(done, float(ends[done_before:ka].max()))
            if kb > ka:
                done = max(done, float(ends[ka:kb].max()) + d)
            done_before = kb
        if done_before < len(ends):
            done = max(done, float(ends[done_before:].max()))
        offset_of = ctx.offset_of
        for var in changed:
            off = offset_of.get(var)
            if off is not None and values[var] + off > done:
                done = values[var] + off
        return done - start

    def _step_index(self) -> tuple[list[int], dict[int, list[int]]]:
        """The step of each device item (-1: none), and the steps whose host start or end
        each host variable is."""
        if self._steps_of is None:
            host: dict[int, list[int]] = {}
            for n, (sv, _so, ev, _eo) in enumerate(self.step_refs):
                for var in {sv, ev}:
                    if var >= 0:
                        host.setdefault(var, []).append(n)
            self._steps_of = (self.step_of_item.tolist(), host)
        return self._steps_of

    def _step_end_vars(self) -> list[list[int]]:
        """Per step, the end variables of its device items."""
        if self._end_vars is None:
            bounds = self.item_bounds.tolist()
            ends = (self.item_order + self.n_dev).tolist()
            self._end_vars = [ends[lo:hi] for lo, hi in zip(bounds, bounds[1:], strict=False)]
        return self._end_vars

    def _step_ends_by_base(self, step: int, changed: _Changes) -> list[int] | None:
        """The step's device end variables by base value, largest first; None when one of
        them is NaN (``_saving_of_changes`` then takes them all). Kept per step, built in
        a what-if: ``changed`` holds the base values it changed in place."""
        ends = self._ends_by_base.get(step, ())
        if ends == ():
            values = self.base_values
            base = {v: changed.get(v, values[v]) for v in self._step_end_vars()[step]}
            if any(b != b for b in base.values()):
                ends = None
            else:
                ends = sorted(base, key=base.__getitem__, reverse=True)
            self._ends_by_base[step] = ends
        return ends  # type: ignore[return-value]

    def _latest_end_in_regions(
        self,
        step: int,
        changed: _Changes,
        regions: Sequence[tuple[int, int, float]],
    ) -> float | None:
        """The latest device end of a step in a what-if whose ``regions`` (first position,
        position after the last, shift; in order, apart) are the base replay shifted: per
        region, the largest base value of the step's ends defined there less its shift,
        and the other ends as the what-if left them. None where more than a few ends lie
        outside the regions (``_latest_end`` reads those by base, down to the first that
        cannot be later) or one is NaN. Reading each shifted end was a pass over the step
        per what-if: a site syncing in each of 1,500 steps shifts the later ones by more
        than a step lasts."""
        ends = self._ends_by_pos.get(step)
        values = self.base_values
        if ends is None:
            tables = self._shift_tables
            assert tables is not None
            variables = np.asarray(self._step_end_vars()[step], dtype=np.int64)
            positions = tables.def_pos[variables]
            order = np.argsort(positions, kind="stable")
            in_order = variables[order].tolist()
            base = np.fromiter(
                (changed.get(v, values[v]) for v in in_order), dtype=float, count=len(in_order)
            )
            ends = _StepEnds(
                positions[order].tolist(),
                in_order,
                base,
                base.tolist(),
                bool(np.isnan(base).any()),
            )
            self._ends_by_pos[step] = ends
        if ends.has_nan:
            return None
        spans = []  # per region, the range of the step's ends (in position order) in it
        inside = 0
        for first, after, shift in regions:
            lo = bisect_left(ends.positions, first)
            hi = bisect_left(ends.positions, after, lo)
            if hi > lo:
                spans.append((lo, hi, shift))
                inside += hi - lo
        if len(ends.variables) - inside > REGION_OTHER_ENDS_MAX:
            return None
        latest = float("-inf")
        others: list[int] = []
        done = 0  # the ends before this index are in a span or in others
        for lo, hi, shift in spans:
            others += ends.variables[done:lo]
            # The same float either way (no NaN here): numpy for many ends, Python for few.
            largest = max(ends.base_list[lo:hi]) if hi - lo <= 32 else float(ends.base[lo:hi].max())
            latest = max(latest, largest - shift)
            done = hi
        others += ends.variables[done:]
        if others:
            moved = list(map(values.__getitem__, others))
            total = sum(moved)  # NaN when one is (or when +inf meets -inf)
            if total != total and any(e != e for e in moved):
                return None
            latest = max(latest, *moved)
        return latest

    def _steps_in_stretches(
        self, stretches: Sequence[tuple[int, int, float]]
    ) -> tuple[set[int], np.ndarray, np.ndarray]:
        """The steps with an end input in one of ``stretches``: those with only some of
        them in one, and those with all of them in one (in order), with its shift."""
        tables = self._shift_tables
        assert tables is not None
        starts = np.fromiter((st[0] for st in stretches), dtype=np.int64, count=len(stretches))
        ends = np.fromiter((st[1] for st in stretches), dtype=np.int64, count=len(stretches))
        first, last = tables.step_first, tables.step_last  # first -1: a fixed host end
        # The stretches are in order and apart: of those starting at or before a step's last
        # end input, the last ends latest, so the step touches one if that one ends after
        # its first end input.
        index = np.searchsorted(starts, last, side="right") - 1
        has = (index >= 0) & (last >= 0)
        index = np.where(has, index, 0)
        touched = has & (ends[index] > first)
        in_one = touched & (first >= starts[index]) & (last < ends[index])
        # Sets of Python ints for the few steps partly in a stretch only: a site syncing in
        # each of 10,000 steps has most of them wholly in one.
        partly = set(np.flatnonzero(touched & ~in_one).tolist())
        whole = np.flatnonzero(in_one)
        shifts = np.fromiter((st[2] for st in stretches), dtype=np.float64, count=len(stretches))
        return partly, whole, shifts[index[whole]]

    def _base_step_arrays(self) -> _StepArrays:
        """The base replay's per-step host ends, device ends and intervals as arrays."""
        base = self.base_metrics
        assert base.host_end is not None and base.dev_hi is not None
        made_from = (base.host_end, base.dev_hi, base.intervals)
        arrays = self._step_arrays
        if arrays is None or any(
            a is not b for a, b in zip(arrays.made_from, made_from, strict=True)
        ):
            arrays = self._step_arrays = _StepArrays(
                made_from,
                np.asarray(base.host_end, dtype=np.float64),
                np.asarray(base.dev_hi, dtype=np.float64),
                np.asarray(base.intervals, dtype=np.float64),
                np.diff(self.item_bounds) > 0,
            )
        return arrays

    def _walk_steps(
        self,
        start: int,
        stop: int,
        done: float,
        recomputed: tuple[dict[int, float], dict[int, float]],
        shifted: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
        cut: int | None,
        shift: float,
        per_step: dict[int, float],
    ) -> float:
        """``_saving_of_changes``'s walk over steps ``start`` to ``stop`` (exclusive) in
        numpy, the same floats: each step completes at the latest of the step before, its
        host end and its device end (NaN: none), a running maximum. ``recomputed``: the host
        and device ends of the steps it recomputed; ``shifted``: the steps shifted wholly,
        their host and device ends; every other step is the base replay's, less ``shift``
        past ``cut``. Adds the steps' nonzero savings to ``per_step``; returns the last
        completion. ``done`` (the completion before ``start``) must not be NaN: Python's
        ``max`` keeps a NaN first argument, ``fmax`` would not."""
        arrays = self._base_step_arrays()
        host_end = arrays.host_end[start:stop].copy()
        dev_hi = arrays.dev_hi[start:stop].copy()
        if cut is not None:
            tables = self._shift_tables
            assert tables is not None
            past = tables.step_first[start:stop] >= cut
            host_end[past] -= shift
            dev_hi[past] -= shift
        if shifted is not None:
            steps, shifted_host, shifted_dev = shifted
            inside = steps < stop  # every one is at or after ``start``
            host_end[steps[inside] - start] = shifted_host[inside]
            dev_hi[steps[inside] - start] = shifted_dev[inside]
        for values, into in zip(recomputed, (host_end, dev_hi), strict=True):
            for n, value in values.items():
                if start <= n < stop:
                    into[n - start] = value
        # fmax skips a NaN as ``max(done, end, device if device == device else done)``
        # does (Python's max keeps its first argument when the others compare False).
        completion = np.fmax.accumulate(np.concatenate(([done], np.fmax(host_end, dev_hi))))
        savings = arrays.intervals[start:stop] - np.diff(completion)
        nonzero = np.flatnonzero(savings != 0.0)
        per_step.update(zip((nonzero + start).tolist(), savings[nonzero].tolist(), strict=True))
        return float(completion[-1])

    def _regions_of(
        self,
        step: int,
        stretches: Sequence[tuple[int, int, float]],
        cut: int | None,
        shift: float,
    ) -> list[tuple[int, int, float]]:
        """The stretches and the tail past the cut that hold any of the step's end inputs."""
        tables = self._shift_tables
        assert tables is not None
        first, last = tables.first_of_step[step], tables.last_of_step[step]
        regions = []
        # From the last stretch starting before the step's first end input, in order.
        for k in range(max(bisect_left(stretches, (max(first, 0),)) - 1, 0), len(stretches)):
            stretch = stretches[k]
            if stretch[0] > last:
                break
            if stretch[1] > first:
                regions.append(stretch)
        if cut is not None and last >= cut:
            regions.append((cut, len(self.tasks) + 1, shift))
        return regions

    def _saving_of_changes(self, changed: _Changes) -> Saving | None:
        """The saving of a what-if whose changed variables are ``changed`` (its values
        are in ``base_values`` now): the same floats ``metrics`` would give, recomputing
        only the steps whose inputs changed and the completions until they rejoin the
        base replay, or its shift past ``changed.cut``. None when a step it needs holds a
        NaN (the full path decides)."""
        base = self.base_metrics
        n_steps = len(self.step_refs)
        if base.host_end is None or base.dev_hi is None:
            return None
        values = self.base_values
        n_dev = self.n_dev
        step_of_item, host_steps = self._step_index()
        affected: set[int] = set()
        changed_ends: dict[int, list[int]] = {}  # per step, its device ends changed in place
        # Once per changed variable of every what-if (a million in a long run): most host
        # variables bound no step, so the lookup is all they cost.
        two_n_dev = 2 * n_dev
        steps_of_host = host_steps.get
        for var in changed:
            if var >= two_n_dev:
                steps = steps_of_host(var)
                if steps:
                    affected.update(steps)
            elif var >= n_dev:
                step = step_of_item[var - n_dev]
                if step >= 0:
                    affected.add(step)
                    ends = changed_ends.get(step)
                    if ends is None:
                        changed_ends[step] = [var]
                    else:
                        ends.append(var)
            else:
                step = step_of_item[var]
                if step >= 0:
                    affected.add(step)
        cut = changed.cut
        shift = changed.shift
        tables = self._shift_tables
        stretches = changed.stretches if tables is not None else ()
        within: dict[int, float] = {}  # steps whose every end input is in one stretch: its shift
        partly: set[int] = set()  # steps with some end input in a stretch
        # Many steps shifted wholly: their ends as arrays (steps, host ends, device ends),
        # and those steps left out of ``affected``.
        wholly: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        if stretches:
            partly, whole, whole_shifts = self._steps_in_stretches(stretches)
            affected.update(partly)
            if len(whole) and len(whole) >= VECTOR_STEPS_MIN:
                arrays = self._base_step_arrays()
                device = arrays.dev_hi[whole]
                if np.any((device != device) & arrays.has_end_vars[whole]):
                    return None  # a NaN end: the full path decides
                wholly = (whole, arrays.host_end[whole] - whole_shifts, device - whole_shifts)
            else:
                within = dict(zip(whole.tolist(), whole_shifts.tolist(), strict=True))
                affected.update(within)
        if cut is not None and tables is not None:
            # Steps with an end input at or past the cut: recomputed (all of them shifted
            # wholly after the last one recomputed, see the loop). Found by binary search
            # in monotone tables: a pass over every step per what-if was 0.2 s of the
            # what-ifs of 20,000 syncs in 10,000 steps.
            first_moved = bisect_left(tables.last_so_far, cut)
            if first_moved < n_steps:
                affected.add(first_moved)
                # After the first step whose later steps all start at or past the cut,
                # none straddles it: a step or two in most what-ifs.
                after = min(bisect_left(tables.later_first, cut) + 1, n_steps)
                if after - first_moved <= VECTOR_STEPS_MIN:
                    step_first, step_last = tables.first_of_step, tables.last_of_step
                    for n in range(first_moved + 1, after):
                        if step_last[n] >= cut and step_first[n] < cut:
                            affected.add(n)
                else:
                    near = slice(first_moved, after)
                    straddling = np.flatnonzero(
                        (tables.step_last[near] >= cut) & (tables.step_first[near] < cut)
                    )
                    affected.update((straddling + first_moved).tolist())
        else:
            cut = None
        pinned_step, pinned_done = self._completion_pin or (-1, 0.0)
        if pinned_step >= 0:
            affected.add(pinned_step)
        recomputed = affected
        if wholly is not None:  # a step shifted wholly is that, whatever else touched it
            is_whole = np.zeros(n_steps, dtype=bool)
            is_whole[wholly[0]] = True
            listed = np.fromiter(affected, dtype=np.int64, count=len(affected))
            recomputed = set(listed[~is_whole[listed]].tolist())
            affected.update((int(wholly[0][0]), int(wholly[0][-1])))  # its first and last
        if not affected:
            return Saving.of_steps(0.0, n_steps, {})

        shift_of = _shift_of(changed, tables.def_pos) if tables is not None else None

        def value(var: int) -> float:
            if shift_of is None or var in changed:
                return values[var]
            return values[var] - shift_of(var)

        host_end: dict[int, float] = {}
        dev_hi: dict[int, float] = {}
        end_vars = self._step_end_vars()
        # A step's latest device end from the ends this what-if changed and the largest
        # of the others by base value: reading all of a step's ends per what-if was
        # quadratic in a step with many syncs (8,000 syncs in 5 steps: 15 s of 20).
        # A shifted end stays below its base (the stretches' shifts are finite and > 0).
        ordered = shift >= 0.0 and shift != float("inf")
        for n in recomputed:
            _sv, _so, ev, eo = self.step_refs[n]
            moved_by = within.get(n)
            if moved_by is not None:  # all of it the base replay shifted, as past the cut
                device = base.dev_hi[n]
                if device != device and end_vars[n]:
                    return None  # a NaN end: the full path decides
                host_end[n] = base.host_end[n] - moved_by
                dev_hi[n] = device - moved_by
                continue
            host_end[n] = (value(ev) if ev >= 0 else 0.0) + eo
            step_vars = end_vars[n]
            past_cut = cut is not None and tables.last_of_step[n] >= cut  # type: ignore[union-attr]
            if step_vars and ordered and (n in partly or past_cut):
                regions = self._regions_of(n, stretches, cut, shift)
                latest = self._latest_end_in_regions(n, changed, regions)
                if latest is not None:
                    dev_hi[n] = latest
                    continue
            by_base = self._step_ends_by_base(n, changed) if step_vars and ordered else None
            if by_base is not None:
                moved_ends = [value(var) for var in changed_ends.get(n, ())]
                if any(end != end for end in moved_ends):
                    return None
                shifted = stretches or past_cut
                dev_hi[n] = _latest_end(
                    by_base, moved_ends, values, changed, shift_of if shifted else None
                )
            elif step_vars:
                ends = list(map(values.__getitem__, step_vars))
                if stretches or past_cut:
                    ends = list(map(value, step_vars))  # some are the base replay shifted
                total = sum(ends)  # NaN when one is (or when +inf meets -inf)
                if total != total and any(e != e for e in ends):
                    return None
                dev_hi[n] = max(ends)
            else:
                dev_hi[n] = float("nan")
        first = base.host_start[0]
        sv, so, _ev, _eo = self.step_refs[0]
        if 0 not in affected and stretches and sv >= 0 and value(sv) != values[sv]:
            affected.add(0)  # the first step's start in a stretch, its ends after it
        if 0 in affected:
            first = (value(sv) if sv >= 0 else 0.0) + so
        completion = base.completion
        start = min(affected)
        last = max(affected)
        done = first if start == 0 else completion[start - 1]
        previous = done
        per_step: dict[int, float] = {}  # the steps it changes (``Saving``)
        final = completion[-1]
        walked = start
        if last - start >= VECTOR_STEPS_MIN and done == done and not start <= pinned_step < last:
            # No step before ``last`` can end the walk: numpy takes them.
            done = previous = self._walk_steps(
                start, last, done, (host_end, dev_hi), wholly, cut, shift, per_step
            )
            walked = last
        if wholly is not None:  # the Python walk reads them from the dicts
            steps = wholly[0]
            rest = np.flatnonzero(steps >= walked)
            host_end.update(zip(steps[rest].tolist(), wholly[1][rest].tolist(), strict=True))
            dev_hi.update(zip(steps[rest].tolist(), wholly[2][rest].tolist(), strict=True))
        for n in range(walked, n_steps):
            end = host_end.get(n)
            device = dev_hi.get(n)
            if end is None:  # not recomputed: as the base replay has it, or shifted wholly
                end = base.host_end[n]
                device = base.dev_hi[n]
                if cut is not None and tables.first_of_step[n] >= cut:  # type: ignore[union-attr]
                    end -= shift
                    device -= shift
            done = max(done, end, device if device == device else done)  # type: ignore[operator]
            if n == pinned_step:
                done = pinned_done
            step_saving = base.intervals[n] - (done - previous)
            if step_saving != 0.0:
                per_step[n] = step_saving
            previous = done
            if n >= last:
                if cut is None and done == completion[n]:
                    break  # every later step is as the base replay has it
                if (
                    cut is not None
                    and tables.later_first[n] >= cut  # type: ignore[union-attr]
                    and done == completion[n] - shift
                ):
                    final = completion[-1] - shift  # every later step is shifted wholly
                    break
        else:
            final = done
        return Saving.of_steps(base.window - (final - first), n_steps, per_step)

    def critical_path(self) -> dict[str, float]:
        """Walk back from the end of the replayed window along the inputs that bound each
        node, adding up the time per kind of edge (see ``WhatIf.critical_path``)."""
        values = self.base_values
        n = self.n_dev
        producer: dict[int, tuple[Any, ...]] = {}
        for task in self.tasks:
            producer[task[0]] = task
            if task[1] >= 0:
                producer[task[1]] = task
        totals = dict.fromkeys(("device", "host", "stream_gap", "event_wait", "sync", "fixed"), 0.0)
        m = self.base_metrics
        if not m.completion:
            return totals
        end = m.completion[-1]
        # The window ends at the last step's host end or at its latest device end.
        var = -1
        sv, so, ev, eo = self.step_refs[-1]
        if ev >= 0 and abs(values[ev] + eo - end) < 1e-6:
            var = ev
            totals["host"] += eo
        else:
            ends = np.asarray(values[n : 2 * n])
            items = self.item_order[self.item_bounds[-2] : self.item_bounds[-1]]
            if len(items):
                var = n + int(items[np.argmax(ends[items])])
        start = m.host_start[0]
        while var >= 0 and values[var] > start:
            task = producer.get(var)
            if task is None:
                break
            out, out2, dur, av, ao, bv, bo, extra, syncs, const, jump = task
            if var == out2:
                totals["device"] += dur
                var = out
                continue
            v = values[out]
            best = (const, -1, "fixed")
            candidates = [(av, ao, "host"), (bv, bo, "stream_gap")]
            candidates += [(src, off, "host" if jump >= 0 else "event_wait") for src, off in extra]
            candidates += [(src, off, "sync") for src, off in syncs]
            for src, off, kind in candidates:
                if src >= 0 and values[src] + off >= best[0]:
                    best = (values[src] + off, src, kind)
            _, src, kind = best
            if src < 0:
                totals["fixed"] += max(0.0, v - start)
                break
            gap = v - max(values[src], start)  # the window starts at the first step
            if kind == "stream_gap":
                # The typical gap between back-to-back work counts as device time.
                totals["device"] += min(gap, self.stream_floor)
                gap -= min(gap, self.stream_floor)
            totals[kind] += gap
            var = src
        return totals

    def busy_us(self, span: tuple[int, int] | None = None) -> float:
        """The device's busy time in the steps (``span``: those steps only), as recorded:
        per step, the union of the device work launched in it (every device and stream
        together; work whose launch the trace does not hold, queued before it, in none),
        added over the steps. Not the window less its idle: where the host runs ahead, a
        step's window also holds work launched in the step before."""
        order, bounds = self.item_order, self.item_bounds
        if not len(order):
            return 0.0
        first, last = span if span is not None else (0, len(bounds) - 2)
        items = order[bounds[first] : bounds[last + 1]]
        segment = np.repeat(np.arange(last + 1 - first), np.diff(bounds[first : last + 2]))
        if len(self.item_launched) == self.n_dev:  # work queued before the trace: no step's
            launched = self.item_launched[items]
            items, segment = items[launched], segment[launched]
        if not len(items):
            return 0.0
        counts = np.bincount(segment, minlength=last + 1 - first)
        n_dev = self.n_dev
        rec = np.asarray(self.rec[: 2 * n_dev], dtype=float)
        starts, ends = rec[items], rec[n_dev + items]
        # Each step's items apart from the others': from its first start, each step in a
        # slot of its own on one axis (the longest step's extent apart), so that one sweep
        # of running ends unites each step's intervals and never two steps'.
        full = np.flatnonzero(counts > 0)
        origin = np.minimum.reduceat(starts, np.concatenate([[0], np.cumsum(counts)[:-1]])[full])
        at = np.zeros(len(counts))
        at[full] = origin
        starts = starts - at[segment]
        ends = ends - at[segment]
        slot = float(ends.max()) + 1.0
        starts = starts + segment * slot
        ends = ends + segment * slot
        sort = np.argsort(starts, kind="stable")
        starts, ends = starts[sort], ends[sort]
        reach = np.maximum.accumulate(ends)
        new_block = np.empty(len(starts), dtype=bool)
        new_block[0] = True
        new_block[1:] = starts[1:] > reach[:-1]
        block_id = np.cumsum(new_block) - 1
        block_end = np.zeros(int(block_id[-1]) + 1)
        np.maximum.at(block_end, block_id, ends)
        return float(np.sum(block_end - starts[new_block]))

    def idle_us(
        self, values: list[float], m: _Metrics, span: tuple[int, int] | None = None
    ) -> float:
        """Device idle inside the window: window minus the union of busy intervals of the
        device work launched in the steps (every device of the trace together); with
        ``span``, inside those steps' window (``_span_window``), the work of every step cut
        to it (the spans of a trace then add up to its whole window's figure)."""
        window = _span_window(m, span)
        idx = self.item_order
        if not len(idx) or window <= 0:
            return max(0.0, window)
        n_dev = self.n_dev
        starts = np.asarray(values[:n_dev], dtype=float)[idx]
        ends = np.asarray(values[n_dev : 2 * n_dev], dtype=float)[idx]
        if span is not None:
            span_end = m.completion[span[1]]
            span_start = span_end - window
            starts = np.clip(starts, span_start, span_end)
            ends = np.clip(ends, span_start, span_end)
            inside = ends > starts
            starts, ends = starts[inside], ends[inside]
            if not len(starts):
                return window
        order = np.argsort(starts, kind="stable")
        starts = starts[order]
        ends = ends[order]
        reach = np.maximum.accumulate(ends)
        # A new busy block starts where an activity starts after everything before ended.
        new_block = np.empty(len(starts), dtype=bool)
        new_block[0] = True
        new_block[1:] = starts[1:] > reach[:-1]
        block_id = np.cumsum(new_block) - 1
        block_start = starts[new_block]
        block_end = np.zeros(len(block_start))
        np.maximum.at(block_end, block_id, ends)
        busy = float(np.sum(block_end - block_start))
        return max(0.0, window - busy)


# ---------------------------------------------------------------------------------------
# Building the graph


def _device_corr(event: Any) -> Any:
    args = event.args
    if args is None:
        return None
    return args.correlation if args.correlation is not None else args.external_id


def _is_launch_api(name: str) -> bool:
    return ("Launch" in name and "HostFunc" not in name) or "Memcpy" in name or "Memset" in name


_CORRELATION = attrgetter("correlation")


def _correlations(
    events: list[Any],
    thread: HostThread | None,
    flows: dict[tuple[Any, Any, float], Any] | None,
    runtime: bool,
) -> list[Any]:
    """Each event's correlation id, as ``Timeline`` joins them: ``args.correlation``, else
    ``External id`` (runtime calls: also the legacy key, then the ``ac2g`` flow)."""
    try:
        corrs = list(map(_CORRELATION, map(_ARGS, events)))  # the usual case, at C speed
    except AttributeError:  # an event without args
        corrs = [None if a is None else a.correlation for a in map(_ARGS, events)]
    if None not in corrs:
        return corrs
    for i, c in enumerate(corrs):
        if c is None:
            a = events[i].args
            if a is not None:
                c = a.external_id
                if c is None and runtime:
                    c = a.external_id_legacy
            if c is None and flows and thread is not None:
                c = flows.get((thread.pid, thread.tid, events[i].ts))
            corrs[i] = c
    return corrs


def _join(rt_corrs: list[list[Any]], d_corrs: list[Any]) -> np.ndarray:
    """For each device activity, the global index of the runtime call with its
    correlation id (-1: none). Integer ids go through a sorted search, others a dict."""
    flat = [c for corrs in rt_corrs for c in corrs]
    try:
        keys = np.array(flat, dtype=np.int64)
        wanted = np.array(d_corrs, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        table = dict(zip(flat, range(len(flat)), strict=True))
        table.pop(None, None)
        return np.array([table.get(c, -1) for c in d_corrs], dtype=np.int64)
    if not len(keys):
        return np.full(len(wanted), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    pos = np.searchsorted(ordered, wanted)
    pos = np.minimum(pos, len(ordered) - 1)
    return np.where(ordered[pos] == wanted, order[pos], -1).astype(np.int64)


def _percentile(values: np.ndarray, q: float) -> float:
    """np.percentile's default (linear) method, without the numpy.ma import it makes."""
    values = np.sort(values[np.isfinite(values)])
    if not len(values):
        return 0.0
    # numpy's own arithmetic (position, then interpolation from the nearer end): the same
    # floats, not just close ones.
    position = (len(values) - 1) * (q / 100.0)
    lo = int(position)
    hi = min(lo + 1, len(values) - 1)
    fraction = position - lo
    below, above = float(values[lo]), float(values[hi])
    step = above - below
    return above - step * (1.0 - fraction) if fraction >= 0.5 else below + step * fraction


class _Builder:
    """Collects the graph's pieces from one timeline (lives only during ``_build``)."""

    def __init__(
        self,
        tl: Timeline,
        episodes: list[Episode],
        keyed: bool = False,
        typical: tuple[float, float, int] | None = None,
        lane_prev: Mapping[Any, tuple[float, float]] | None = None,
        overhead_scale: float = 0.0,
    ) -> None:
        self.tl = tl
        self.episodes = episodes
        self.keyed = keyed
        self.overhead_scale = overhead_scale
        self.typical = typical
        self.lane_prev = lane_prev or {}  # ``ReplayCarry.lanes``
        self.t0 = tl.span[0]
        self.notes: list[str] = []
        self.stats: dict[str, float] = {}

    # -- host threads and device items ----------------------------------------------------
    def collect(self) -> str | None:
        tl = self.tl
        t0 = self.t0
        lanes = []
        for lane, items in tl.lane_activity.items():
            lanes.append((lane, tl.lane_device.get(lane, lane[0]), items))
        # A window of a larger trace: on each lane, the item that ran just before this
        # window's first one there (``ReplayCarry.lanes``) goes first, as an item of no launch
        # at its recorded times, so that the lane's first item and every synchronize here
        # wait for it as in a whole graph, and each what-if moves it as it moved there.
        ghost_lanes: list[Any] = []
        if self.lane_prev:
            present = {lane: k for k, (lane, _, _) in enumerate(lanes)}
            for lane, (start, dur) in self.lane_prev.items():
                ghost = _CarriedItem(start, dur)
                k = present.get(lane)
                if k is None:
                    lanes.append((lane, lane[0] if isinstance(lane, tuple) else lane, [ghost]))
                elif lanes[k][2] and start + dur <= lanes[k][2][0].ts + TOL_US:
                    lanes[k] = (lane, lanes[k][1], [ghost, *lanes[k][2]])
                else:
                    continue
                ghost_lanes.append(lane)
        self.lanes = lanes
        events = [e for _, _, items in lanes for e in items]
        n = self.n_dev = len(events)
        if n == 0 and not self.keyed:  # keyed: a window that goes on from the one before
            return "no device activity in the trace (CPU only): nothing to replay"
        self.lane_of = np.repeat(np.arange(len(lanes)), [len(items) for _, _, items in lanes])
        self.lane_first = np.concatenate(
            ([0], np.cumsum([len(items) for _, _, items in lanes])[:-1])
        ).astype(np.int64)
        self.events = events
        self.d_ts = np.fromiter(map(_TS, events), float, n) - t0
        self.d_dur = np.fromiter(map(_DUR, events), float, n)
        self.d_end = self.d_ts + self.d_dur
        self._item_of_event: dict[int, int] | None = None
        self.lane_index = {lane: i for i, (lane, _, _) in enumerate(lanes)}
        self.lanes_of_device: dict[Any, list[int]] = {}
        for i, (_, device, _) in enumerate(lanes):
            self.lanes_of_device.setdefault(device, []).append(i)
        self.ghosts = {
            int(self.lane_first[self.lane_index[lane]]): lane for lane in ghost_lanes
        }  # item -> its lane

        # Host threads: every thread with runtime calls, plus the one with the steps.
        step_keys = [(s.pid, s.tid) for s in tl.steps if (s.pid, s.tid) not in tl.lanes]
        self.step_key = max(set(step_keys), key=step_keys.count) if step_keys else None
        keys = [k for k, th in tl.threads.items() if k not in tl.lanes and th.runtime]
        if self.step_key is not None and self.step_key not in keys:
            keys.append(self.step_key)
        if n > len(self.ghosts) and not any(tl.threads[k].runtime for k in keys):
            return (
                "the trace has device activity but no runtime calls: launches cannot be "
                "linked to the host"
            )
        if self.step_key is None:
            if not keys:
                return "no host thread with runtime calls or steps: nothing to replay"
            self.step_key = max(keys, key=lambda k: len(tl.threads[k].runtime))
        self.keys = keys
        self.threads: list[HostThread] = [tl.threads[k] for k in keys]

        rt_ts: list[np.ndarray] = []
        rt_thread: list[np.ndarray] = []
        rt_corrs: list[list[Any]] = []
        offset = 0
        self.rt_offset: list[int] = []
        self.rt_names: list[list[str]] = []
        self.rt_corrs: list[list[Any]] = []
        launch_api_calls = 0
        launch_names_all: set[str] = set()
        for h, th in enumerate(self.threads):
            runtime = th.runtime
            self.rt_offset.append(offset)
            corrs = _correlations(runtime, th, tl.flow_correlation, runtime=True)
            rt_corrs.append(corrs)
            rt_ts.append(np.array(th.runtime_starts, dtype=float) - t0)
            rt_thread.append(np.full(len(runtime), h, dtype=np.int64))
            names = list(map(_NAME, runtime))
            self.rt_names.append(names)
            self.rt_corrs.append(corrs)
            launch_names = [name for name in set(names) if _is_launch_api(name)]
            launch_names_all.update(launch_names)
            launch_api_calls += sum(map(names.count, launch_names))
            offset += len(runtime)
        self.rt_ts = np.concatenate(rt_ts) if rt_ts else np.zeros(0)
        self.rt_thread = np.concatenate(rt_thread) if rt_thread else np.zeros(0, np.int64)

        d_corrs = _correlations(events, None, None, runtime=False)
        d_launch = _join(rt_corrs, d_corrs)
        self.d_launch = d_launch
        linked = d_launch >= 0
        self.launch_ts = (
            np.where(linked, self.rt_ts[np.maximum(d_launch, 0)], np.nan)
            if len(self.rt_ts)
            else np.full(n, np.nan)
        )

        # Is the linking good enough to replay?
        # Copies are counted apart: a library's own copies through the driver API (cuFFT
        # making a plan uploads its tables with cuMemcpyHtoD) reach the trace as device
        # copies whose call Kineto did not record, while kernels launched through the driver
        # keep theirs (cuLaunchKernel). Such copies say nothing of broken links. Memsets
        # only where the operator that made them made such copies too (cuFFT's plans clear
        # buffers with driver memsets: 8 beside 12 copies in an H200 recording, all with
        # their transform's External id): Kineto records the calls of the memsets torch
        # makes, so any other memset without its call is a broken link.
        is_copy = np.fromiter(map(_COPY_CATS.__contains__, map(_CAT, events)), bool, n)
        # Activity a stream ran before its first recorded launch was launched before the
        # trace began (a warm-up step's work still queued): no profiled step's.
        self.queued_before = np.zeros(n, dtype=bool)
        unlinked_after_first = np.zeros(n, dtype=bool)
        for i in range(len(lanes)):
            lo = self.lane_first[i]
            hi = lo + len(lanes[i][2])
            lane_linked = linked[lo:hi]
            first = np.argmax(lane_linked) if lane_linked.any() else hi - lo
            unlinked_after_first[lo + first : hi] = ~lane_linked[first:]
            if lane_linked.any():
                self.queued_before[lo : lo + first] = True
        unlinked_mid = int(unlinked_after_first.sum())
        copies_at = np.flatnonzero(unlinked_after_first & is_copy)
        unlinked_copies = len(copies_at)
        unlinked_memsets = 0
        if unlinked_copies:
            copiers = {_external_id(events[i]) for i in copies_at.tolist()} - {None}
            unlinked_memsets = sum(
                1
                for i in np.flatnonzero(unlinked_after_first).tolist()
                if events[i].cat in _MEMSET_CATS and _external_id(events[i]) in copiers
            )
        prefix = int((~linked).sum()) - unlinked_mid - len(self.ghosts)
        self.stats.update(
            device_items=float(n),
            unlinked_before_first_launch=float(prefix),
            unlinked_items=float(unlinked_mid),
            unlinked_copies=float(unlinked_copies),
            unlinked_memsets=float(unlinked_memsets),
        )
        if n > len(self.ghosts) and not linked.any():
            return (
                f"none of the {n} device activities is linked to a runtime call "
                "(correlation ids and ac2g flows missing)"
            )
        unlinked_kernels = unlinked_mid - unlinked_copies - unlinked_memsets
        kinds = [
            (count, kind)
            for count, kind in ((unlinked_copies, "copies"), (unlinked_memsets, "memsets"))
            if count
        ]
        transfers = " and ".join(f"{count} {kind}" for count, kind in kinds)
        if unlinked_kernels > max(2, MAX_UNLINKED_SHARE * n):
            also = f" (and {transfers})" if transfers else ""
            return (
                f"{unlinked_kernels} of {n} device activities have no launching runtime "
                f"call{also} (missing or inconsistent correlation ids / ac2g flows)"
            )
        if prefix:
            self.notes.append(
                f"{prefix} device activities were queued before the first recorded launch "
                "on their stream: kept at their recorded times"
            )
        if unlinked_kernels:
            self.notes.append(
                f"{unlinked_kernels} device activities have no launching runtime "
                "call: kept at their recorded times"
            )
        if kinds:
            what = " and ".join(kind for _count, kind in kinds)
            # "5 device copies", "8 device memsets", "12 device copies and 8 memsets"
            counted = f"{kinds[0][0]} device {transfers.split(' ', 1)[1]}"
            self.notes.append(
                f"{counted} have no recorded call (a library's own {what} through the "
                "driver API, such as cuFFT setting up a plan): kept at their recorded times"
            )
        launched = np.zeros(len(self.rt_ts), dtype=bool)
        launched[d_launch[linked]] = True
        lonely = max(0, launch_api_calls - int(launched.sum()))
        limit = max(2, MAX_UNLINKED_SHARE * launch_api_calls)
        unrecorded_memsets = 0
        if lonely > limit:
            # Launches after the last recorded device activity may just have run after the
            # profiler stopped: only the others count. Nor do memsets: cuDNN's RNNs call
            # cudaMemsetAsync for zero bytes hundreds of times a step and CUPTI records no
            # activity for those, so a memset without one says nothing of the links.
            last_device_end = float(self.d_end.max())
            lonely = 0
            memset_names = {name for name in launch_names_all if "Memset" in name}
            for h, names in enumerate(self.rt_names):
                mask = np.fromiter(map(launch_names_all.__contains__, names), bool, len(names))
                first = self.rt_offset[h]
                ids = np.flatnonzero(mask) + first
                missing = ids[~launched[ids] & (self.rt_ts[ids] < last_device_end)]
                memsets = sum(names[i - first] in memset_names for i in missing.tolist())
                unrecorded_memsets += memsets
                lonely += len(missing) - memsets
        self.stats["launch_calls"] = float(launch_api_calls)
        self.stats["memset_calls_without_device_records"] = float(unrecorded_memsets)
        if unrecorded_memsets:
            self.notes.append(
                f"{unrecorded_memsets} memset calls have no device activity (zero-size: "
                "CUPTI records none): replayed as host calls only"
            )
        self.stats["launch_calls_without_device_work"] = float(lonely)
        if launch_api_calls:
            if lonely > limit:
                return (
                    f"{lonely} of {launch_api_calls} launch / copy calls have no "
                    "device activity (missing or inconsistent correlation ids / ac2g "
                    "flows)"
                )
        lat = self.d_ts - self.launch_ts
        negative = int(np.sum(lat < -TOL_US))
        self.stats["negative_launch_latency"] = float(negative)
        if negative > max(2, MAX_NEGATIVE_LATENCY_SHARE * n):
            return (
                f"{negative} of {n} device activities start before the runtime call that "
                "launched them (inconsistent clocks or correlations)"
            )
        if negative:
            bad = lat < -TOL_US
            self.d_launch = np.where(bad, -1, self.d_launch)
            self.launch_ts = np.where(bad, np.nan, self.launch_ts)
            self.notes.append(
                f"{negative} device activities start before their launch call: "
                "kept at their recorded times"
            )

        # Per lane: launch times in FIFO order, as a running maximum (for "the last activity
        # on this stream launched before t"). Unlinked activity counts as launched at -inf.
        lt = np.where(np.isnan(self.launch_ts), -np.inf, self.launch_ts)
        self.lane_launch_max = []
        for i in range(len(lanes)):
            lo = self.lane_first[i]
            hi = lo + len(lanes[i][2])
            self.lane_launch_max.append(
                np.maximum.accumulate(lt[lo:hi]) if hi > lo else np.zeros(0)
            )
        # Per thread: its launches in host order (for "the next launch after t").
        order = np.flatnonzero(self.d_launch >= 0)
        thread_of_item = self.rt_thread[self.d_launch[order]]
        self.thread_launches: list[tuple[np.ndarray, np.ndarray]] = []
        for h in range(len(self.threads)):
            mine = order[thread_of_item == h]
            ts = self.launch_ts[mine]
            srt = np.argsort(ts, kind="stable")
            self.thread_launches.append((ts[srt], mine[srt]))
        return None

    def last_launched_before(self, lane: int, t: float) -> int:
        """Global index of the last activity on ``lane`` launched at or before ``t``."""
        arr = self.lane_launch_max[lane]
        k = int(np.searchsorted(arr, t, side="right")) - 1
        return int(self.lane_first[lane]) + k if k >= 0 else -1

    # -- sync edges -----------------------------------------------------------------------
    def _device_of_call(self, call: Call, h: int, start: float) -> Any:
        for d in call.device_events:
            lane = self.lane_index.get((d.pid, d.tid))
            if lane is not None:
                return self.lanes[lane][1]
            args = d.args
            if args is not None and isinstance(args.device, int):
                return args.device
        ts, items = self.thread_launches[h]
        k = int(np.searchsorted(ts, start, side="right")) - 1
        if k >= 0:
            return self.lanes[int(self.lane_of[items[k]])][1]
        return self.tl.default_device()

    def _lane_for_stream(self, device: Any, stream: Any) -> int | None:
        for i in self.lanes_of_device.get(device, []):
            if self.lanes[i][0][1] == stream:
                return i
        return None

    def sync_targets(self, call: Call, h: int, start: float) -> list[int]:
        """The device activities this blocking call waited for (latest per stream)."""
        if call.reason == "copy":
            if self._item_of_event is None:
                self._item_of_event = dict(
                    zip(map(id, self.events), range(self.n_dev), strict=True)
                )
            own = [
                self._item_of_event[id(d)]
                for d in call.device_events
                if d.cat != "cuda_sync" and id(d) in self._item_of_event
            ]
            if own:
                return own
        device = self._device_of_call(call, h, start)
        device_lanes = self.lanes_of_device.get(device, [])
        record = next((d for d in call.device_events if d.cat == "cuda_sync"), None)
        kind = None
        stream = None
        if record is not None:
            args = record.args
            kind = (args.cuda_sync_kind if args is not None else None) or record.name
            if args is not None:
                stream = args.wait_on_stream if kind == "Event Sync" else args.stream
        name = call.event.name
        if kind is None:
            if name in DEVICE_SYNC_APIS or call.reason in ("allocator", "copy"):
                kind = "Context Sync"
            elif "StreamSynchronize" in name or "SynchronizeStream" in name:
                kind = "Stream Sync"
            elif "EventSynchronize" in name or "SynchronizeEvent" in name:
                kind = "Event Sync"
            elif name in EXPLICIT_SYNC_APIS:
                kind = "Context Sync"
        per_lane = [(i, self.last_launched_before(i, start)) for i in device_lanes]
        per_lane = [(i, j) for i, j in per_lane if j >= 0]
        if kind == "Stream Sync":
            lane = self._lane_for_stream(device, stream) if stream is not None else None
            if lane is None:
                ts, items = self.thread_launches[h]
                k = int(np.searchsorted(ts, start, side="right")) - 1
                lane = int(self.lane_of[items[k]]) if k >= 0 else None
            return [j for i, j in per_lane if i == lane]
        if kind == "Event Sync":
            if isinstance(stream, int) and stream >= 0:
                lane = self._lane_for_stream(device, stream)
                return [j for i, j in per_lane if i == lane]
            # Unknown event: the latest-ending work the recording allows it to have waited for.
            end = start + call.event.dur
            fits = [j for _, j in per_lane if self.d_end[j] <= end + TOL_US]
            return [max(fits, key=lambda j: self.d_end[j])] if fits else []
        return [j for _, j in per_lane]

    def sync_jumps(self) -> None:
        t0 = self.t0
        thread_index = {id(th): h for h, th in enumerate(self.threads)}
        self.jumps: list[_Jump] = []
        self.episode_jumps: list[list[int]] = [[] for _ in self.episodes]
        contradicted = 0
        waited = 0.0
        blocked = 0.0
        for index, episode in enumerate(self.episodes):
            if episode.latent:
                continue
            h = thread_index.get(id(episode.thread))
            if h is None:
                continue
            for call in episode.calls:
                if call.reason == "maybe_copy":
                    continue  # an async copy that a later stream sync of the episode waits for
                event = call.event
                start = event.ts - t0
                end = start + event.dur
                targets = self.sync_targets(call, h, start)
                kept = [j for j in targets if self.d_end[j] <= end + TOL_US]
                contradicted += len(targets) - len(kept)
                done = min(max((float(self.d_end[j]) for j in kept), default=_NEG_INF), end)
                wait = max(0.0, done - start)
                own = end - max(start, done)
                blocked += end - start
                waited += wait
                jump = _Jump(h, end, wait=wait, sync=[(j, own) for j in kept], episode=index)
                self.episode_jumps[index].append(len(self.jumps))
                self.jumps.append(jump)
        self.stats.update(
            sync_edges_contradicted=float(contradicted),
            blocked_us=blocked,
            blocked_explained_us=waited,
        )

    # -- forks and joins between host threads ------------------------------------------------
    def _last_activity(self, h: int, t: float) -> float:
        """The latest start or end on thread ``h`` strictly before ``t`` (relative time);
        -inf if none. Nodes nest, so only the last node started and its ancestors (and the
        last runtime call) can have ended since."""
        th = self.threads[h]
        at = t + self.t0
        best = _NEG_INF
        i = bisect_left(th.starts, at) - 1
        if i >= 0:
            best = th.starts[i]
            while i >= 0:
                end = th.ends[i]
                if best < end < at:
                    best = end
                i = th.parent[i]
        r = bisect_left(th.runtime_starts, at) - 1
        if r >= 0:
            call = th.runtime[r]
            best = max(best, call.ts)
            if call.ts + call.dur < at:
                best = max(best, call.ts + call.dur)
        return best - self.t0

    def _first_activity(self, h: int, t: float) -> float:
        """The earliest start or end on thread ``h`` strictly after ``t``; inf if none.
        Only nodes open at ``t`` (the last one started and its ancestors), the runtime
        call open at ``t`` and the next starts can come first."""
        th = self.threads[h]
        at = t + self.t0
        best = float("inf")
        i = bisect_right(th.starts, at)
        if i < len(th.starts):
            best = th.starts[i]
        i -= 1
        while i >= 0:
            end = th.ends[i]
            if at < end < best:
                best = end
            i = th.parent[i]
        r = bisect_right(th.runtime_starts, at)
        if r < len(th.runtime_starts):
            best = min(best, th.runtime_starts[r])
        if r > 0:
            call = th.runtime[r - 1]
            if at < call.ts + call.dur < best:
                best = call.ts + call.dur
        return best - self.t0

    def fork_joins(self) -> None:
        """Where thread B runs while thread A records nothing and sits inside an open
        operator or frame, A waits for B: A resumes after B's burst (join) and B's burst
        starts when A began waiting (fork). Autograd's backward thread and the main thread
        inside ``run_backward`` are the usual pair.

        A cheap pass first: B's launches and blocking calls that fall into a long gap
        between A's starts; only those gaps get the exact test (A's ends too)."""
        n_threads = len(self.threads)
        if n_threads < 2:
            return
        jump_times: list[list[float]] = [[] for _ in range(n_threads)]
        for j in self.jumps:  # by thread once: a pass over all jumps per thread was quadratic
            jump_times[j.thread].append(j.t)
        relevant = []
        for h in range(n_threads):
            arr = np.concatenate([self.thread_launches[h][0], np.asarray(jump_times[h], float)])
            arr.sort()
            relevant.append(arr)
        # A waits for B only at a point of B's between A's first and last activity (else
        # _burst finds A inactive on one side): the pairs are narrowed by those spans first,
        # as a test of every pair of threads was quadratic in the threads (800: 6.4 s).
        first_act, last_act = self._activity_spans()
        bursts: dict[tuple[int, float], tuple[int, float, float, float, float]] = {}
        for b in range(n_threads):
            if not len(relevant[b]):
                continue
            b_lo, b_hi = float(relevant[b][0]), float(relevant[b][-1])
            for a in np.flatnonzero((first_act < b_hi) & (last_act > b_lo)).tolist():
                if a == b:
                    continue
                after_first = np.searchsorted(relevant[b], first_act[a], side="right")
                if after_first >= np.searchsorted(relevant[b], last_act[a], side="left"):
                    continue  # no point of B strictly inside A's span
                # A blocked on B makes no runtime call meanwhile: look for wide gaps
                # between A's runtime calls first (nodes are checked in _burst).
                lo_a = self.rt_offset[a]
                if not self.threads[a].starts:
                    continue
                # Open-ended at both sides: A may wait for B before its first call or after
                # its last one (_burst checks A's operators there).
                starts_a = np.concatenate(
                    [[-np.inf], self.rt_ts[lo_a : lo_a + len(self.threads[a].runtime)], [np.inf]]
                )
                k = np.searchsorted(starts_a, relevant[b], side="right")
                wide = starts_a[k] - starts_a[k - 1] > MIN_JOIN_GAP_US
                for gap in sorted(set(k[wide].tolist())):  # np.unique would import numpy.ma (25 ms)
                    found = self._burst(
                        a, b, float(starts_a[gap - 1]), float(starts_a[gap]), relevant[b]
                    )
                    if found is None:
                        continue
                    lo, hi, b0, b1 = found
                    prev = bursts.get((b, lo))
                    if prev is None or b1 - b0 < prev[4] - prev[3]:
                        bursts[(b, lo)] = (a, lo, hi, b0, b1)
        for (b, _), (a, lo, hi, b0, b1) in sorted(bursts.items(), key=lambda kv: kv[1][1]):
            before = self._last_activity(b, lo)
            fork = _Jump(b, lo, host_refs=[(a, b0, lo - b0)])
            if before > _NEG_INF:
                fork.wait = lo - before  # B was idle since its last activity
            else:
                fork.chained = False
            join = _Jump(a, b1, wait=hi - b0, host_refs=[(b, hi, b1 - hi)])
            self.jumps += [fork, join]
        self.stats["thread_joins"] = float(len(bursts))

    def _activity_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Per thread, its first and last activity (relative times): the earliest start,
        and the latest start or end, of its nodes and runtime calls (inf / -inf: none)."""
        t0 = self.t0
        firsts, lasts = [], []
        for th in self.threads:
            lo, hi = np.inf, -np.inf
            if th.starts:
                lo = min(lo, th.starts[0])
                hi = max(hi, max(th.ends), th.starts[-1])
            if th.runtime:
                lo = min(lo, th.runtime_starts[0])
                hi = max(hi, max(map(add, th.runtime_starts, map(_DUR, th.runtime))))
                hi = max(hi, th.runtime_starts[-1])
            firsts.append(lo - t0)
            lasts.append(hi - t0)
        return np.asarray(firsts, float), np.asarray(lasts, float)

    def _burst(
        self, a: int, b: int, s_lo: float, s_hi: float, relevant_b: np.ndarray
    ) -> tuple[float, float, float, float] | None:
        """B's burst inside A's gap between starts ``s_lo`` and ``s_hi``, if A is blocked
        all through it: (burst start, burst end, A's last point before, A's first after)."""
        j = int(np.searchsorted(relevant_b, s_lo, side="right"))
        if j >= len(relevant_b) or relevant_b[j] >= s_hi:
            return None
        first = float(relevant_b[j])
        # A's ends can split the gap between its starts: find the piece around B's work.
        b0 = self._last_activity(a, first)
        b1 = self._first_activity(a, first)
        if not (np.isfinite(b0) and np.isfinite(b1)) or b1 - b0 <= MIN_JOIN_GAP_US:
            return None  # A was not active on both sides: not waiting inside an operator
        t0 = self.t0
        th_b = self.threads[b]
        n_lo = bisect_right(th_b.starts, b0 + t0)
        n_hi = bisect_right(th_b.starts, b1 + t0)
        r_lo = bisect_right(th_b.runtime_starts, b0 + t0)
        r_hi = bisect_right(th_b.runtime_starts, b1 + t0)
        firsts = []
        tails = []
        if n_hi > n_lo:
            firsts.append(th_b.starts[n_lo])
            tails.append(max(th_b.ends[n_lo:n_hi]))
        if r_hi > r_lo:
            firsts.append(th_b.runtime_starts[r_lo])
            tails.append(
                max(map(add, th_b.runtime_starts[r_lo:r_hi], map(_DUR, th_b.runtime[r_lo:r_hi])))
            )
        if not firsts:
            return None
        lo = min(firsts) - t0
        hi = max(tails) - t0
        if hi > b1 + TOL_US:
            return None  # A went on while B was still running: not a wait for B
        hi = min(hi, b1)
        th_a = self.threads[a]
        r = bisect_right(th_a.runtime_starts, lo + t0) - 1
        if r >= 0 and th_a.runtime[r].ts + th_a.runtime[r].dur >= hi + t0 - TOL_US:
            # A sat in a runtime call of its own all through B's burst (a synchronize, as
            # gloo's worker thread does beside an item() for the same work): it waited for
            # the device, not for B.
            return None
        node = th_a.innermost(lo + t0, hi + t0)
        if node < 0 or (
            th_a.kinds[node] == ANNOTATION and th_a.nodes[node].name.startswith("ProfilerStep#")
        ):
            return None
        return lo, hi, b0, b1

    # -- assemble -------------------------------------------------------------------------
    def assemble(self) -> _Graph:
        t0 = self.t0
        n = self.n_dev
        g = _Graph()
        g.t0 = self.t0
        g.n_dev = n
        # Each thread starts at its first activity, a source (unless a fork starts it).
        earliest_unchained: dict[int, float] = {}  # per thread (one pass over the jumps)
        for j in self.jumps:
            if not j.chained and j.t < earliest_unchained.get(j.thread, np.inf):
                earliest_unchained[j.thread] = j.t
        for h, th in enumerate(self.threads):
            firsts = []
            if th.starts:
                firsts.append(th.starts[0])
            if th.runtime:
                firsts.append(th.runtime[0].ts)
            t = min(firsts) - t0
            if earliest_unchained.get(h, np.inf) <= t + 1e-9:
                continue
            self.jumps.append(_Jump(h, t, const=t, chained=False))
        order = sorted(
            range(len(self.jumps)), key=lambda i: (self.jumps[i].thread, self.jumps[i].t)
        )
        renumber = {old: new for new, old in enumerate(order)}
        jumps = [self.jumps[i] for i in order]
        g.episode_jumps = [[renumber[i] for i in lst] for lst in self.episode_jumps]
        m = len(jumps)
        base = 2 * n
        thread_times: list[list[float]] = [[] for _ in self.threads]
        thread_vars: list[list[int]] = [[] for _ in self.threads]
        place_in_thread: list[int] = []  # per point: its index in its thread's lists
        for p, jump in enumerate(jumps):
            place_in_thread.append(len(thread_vars[jump.thread]))
            thread_times[jump.thread].append(jump.t)
            thread_vars[jump.thread].append(base + p)

        tids = Counter(th.tid for th in self.threads)
        # As arrays: the lists die with this function, and these live with the graph.
        g.host_points = {
            th.tid: (np.asarray(thread_times[h], float), np.asarray(thread_vars[h], np.int64))
            for h, th in enumerate(self.threads)
            if tids[th.tid] == 1
        }

        # Host times as the program would run them without the profiler (``_overhead_warps``):
        # each offset from a host point is taken between warped times. None: as recorded.
        warps = self._overhead_warps() if self.overhead_scale > 0 else None

        def warped(h: int, t: Any) -> Any:
            if warps is None:
                return t
            starts, cost, reached = warps[h]
            k = np.searchsorted(starts, t, side="right") - 1
            if np.ndim(t) == 0:
                return t if k < 0 else max(reached[k], t - cost[k])
            out = np.array(t, dtype=float)
            after = k >= 0
            out[after] = np.maximum(reached[k[after]], out[after] - cost[k[after]])
            return out

        warped_times = [
            list(warped(h, np.asarray(times, float)).tolist()) if warps is not None else times
            for h, times in enumerate(thread_times)
        ]

        def host_ref(h: int, t: float) -> tuple[int, float]:
            times = thread_times[h]
            k = bisect_right(times, t) - 1
            if k < 0:
                return -1, t
            return thread_vars[h][k], float(warped(h, t)) - warped_times[h][k]

        # Device inputs: launch, stream predecessor, event waits.
        d_ts, d_end = self.d_ts, self.d_end
        has_launch = self.d_launch >= 0
        g_launch = np.where(has_launch, d_ts - self.launch_ts, np.inf)
        same_lane = np.zeros(n, dtype=bool)
        same_lane[1:] = self.lane_of[1:] == self.lane_of[:-1]
        prev_end = np.full(n, np.nan)
        prev_end[1:] = d_end[:-1]
        g_prev = np.where(same_lane, d_ts - prev_end, np.inf)
        wait_dst, wait_src = self.event_waits()
        wait_gap = d_ts[wait_dst] - d_end[wait_src]
        g_event = np.full(n, np.inf)
        np.minimum.at(g_event, wait_dst, wait_gap)
        # Typical launch latency: from activities that found their stream idle and waited
        # for nothing else (behind a busy queue the latency says nothing about launching).
        idle_stream = has_launch & (g_prev > IDLE_GAP_US) & ~np.isfinite(g_event)
        sample = g_launch[idle_stream] if idle_stream.sum() >= 20 else g_launch[has_launch]
        launch_floor = max(0.0, _percentile(sample, 5))
        gaps = g_prev[same_lane]
        stream_floor = min(max(0.0, _percentile(gaps[gaps >= 0], 5)), launch_floor)
        g.typical = (launch_floor, stream_floor, len(sample))
        if self.typical is not None and self.typical[2] > len(sample):
            # A window of a larger trace with fewer samples than one before it: that one's.
            g.typical = self.typical
            launch_floor, stream_floor, _ = self.typical
        self.stats.update(launch_latency_us=launch_floor, stream_gap_us=stream_floor)
        g.stream_floor = stream_floor
        r_launch = g_launch - launch_floor
        r_prev = g_prev - stream_floor
        binding = np.argmin(np.vstack([r_launch, r_prev, g_event]), axis=0)
        w_launch = np.where(binding == 0, g_launch, np.minimum(g_launch, launch_floor))
        w_prev = np.where(binding == 1, g_prev, np.minimum(g_prev, stream_floor))
        orphan = ~has_launch

        # Launch: host point of the launching call + offset.
        la_var = np.full(n, -1, dtype=np.int64)
        la_off = np.zeros(n)
        for h in range(len(self.threads)):
            ts, items = self.thread_launches[h]
            if not len(items):
                continue
            times = np.asarray(thread_times[h], float)
            k = np.searchsorted(times, ts, side="right") - 1
            vars_ = np.asarray(thread_vars[h], dtype=np.int64)
            valid = k >= 0
            la_var[items[valid]] = vars_[k[valid]]
            times_w = times if warps is None else np.asarray(warped_times[h], float)
            la_off[items[valid]] = warped(h, ts[valid]) - times_w[k[valid]] + w_launch[items[valid]]
            if not valid.all():
                orphan[items[~valid]] = True
        pv_var = np.where(same_lane, np.arange(n) + n - 1, -1)
        pv_off = np.where(same_lane, w_prev, 0.0)
        const = np.where(orphan, d_ts, _NEG_INF)
        g.ghosts = dict(self.ghosts)
        la_var = np.where(orphan, -1, la_var)

        # A wait's weight: its recorded gap if it bound the start (the tightest wait of an
        # activity whose binding input is a wait), else at most 0.
        tight = (binding[wait_dst] == 2) & (wait_gap == g_event[wait_dst])
        wait_w = np.where(tight, wait_gap, np.minimum(wait_gap, 0.0))
        empty: tuple[()] = ()
        extras: list[tuple[tuple[int, float], ...]] = [empty] * n
        for dst, src, w in zip(
            wait_dst.tolist(), (wait_src + n).tolist(), wait_w.tolist(), strict=True
        ):
            extras[dst] = extras[dst] + ((src, w),)
        tasks_dev = list(
            zip(
                range(n),
                range(n, 2 * n),
                self.d_dur.tolist(),
                la_var.tolist(),
                la_off.tolist(),
                pv_var.tolist(),
                pv_off.tolist(),
                extras,
                repeat(empty, n),
                const.tolist(),
                repeat(-1, n),
                strict=True,
            )
        )

        # Host points.
        tasks_host = []
        for p, jump in enumerate(jumps):
            times = warped_times[jump.thread]
            # The point before this one (a search of the list here was quadratic: 0.33 s
            # of a 1 GB trace's 4,004 syncs).
            k = place_in_thread[p] - 1
            if jump.chained and k >= 0:
                av = thread_vars[jump.thread][k]
                ao = times[k + 1] - times[k] - jump.wait
                if warps is not None:  # a wait may start where time was taken out before it
                    ao = max(0.0, ao)
            else:
                av, ao = -1, 0.0
            extra = []
            c = jump.const if jump.const is not None else _NEG_INF
            for h2, t2, plus in jump.host_refs:
                var, off = host_ref(h2, t2)
                if var < 0:
                    c = max(c, t2 + plus)  # before that thread's first point: fixed
                else:
                    extra.append((var, off + plus))
            syncs = tuple((n + j, own) for j, own in jump.sync)
            if av < 0 and not extra and not syncs and c == _NEG_INF:
                c = jump.t  # nothing feeds it: keep it where it was
            tasks_host.append((base + p, -1, 0.0, av, ao, -1, 0.0, tuple(extra), syncs, c, p))

        # Evaluation order: by recorded time; host points first at equal times.
        keys = np.concatenate([d_ts, np.asarray([j.t for j in jumps], float)])
        rank = np.concatenate([np.ones(n), np.zeros(m)])
        order_ = np.lexsort((np.arange(n + m), rank, keys))
        all_tasks = tasks_dev + tasks_host
        g.tasks = [all_tasks[i] for i in order_.tolist()]
        g.rec = np.concatenate([d_ts, d_end, np.asarray([j.t for j in jumps], float)]).tolist()
        violations = self.finish_order(g)
        g.jump_pos = [0] * m
        pos_of_task = np.empty(n + m, dtype=np.int64)
        if violations == 0:
            pos_of_task[order_] = np.arange(n + m)
        else:
            for pos, task in enumerate(g.tasks):
                pos_of_task[task[0] if task[10] < 0 else n + task[10]] = pos
        g.jump_pos = pos_of_task[n:].tolist()
        # What names a variable in another window's graph of the same trace (``carry``):
        # a device item by its lane and recorded start, a host point by its thread.
        if self.keyed:
            # Points are numbered by thread, then time: each thread's are one range.
            ranges = [(points[0], points[-1] + 1) if points else (0, 0) for points in thread_vars]
            g.identity = _Identity(
                [lane for lane, _, _ in self.lanes],
                self.lane_of,
                self.events,
                list(self.keys),
                ranges,
            )
        # Last position reading each variable: a what-if stops once it is passed.
        lastuse = np.full(len(g.rec), -1, dtype=np.int64)
        dev_pos = pos_of_task[:n]
        for var in (la_var, pv_var):
            used = var >= 0
            np.maximum.at(lastuse, var[used], dev_pos[used])
        if len(wait_dst):
            np.maximum.at(lastuse, wait_src + n, dev_pos[wait_dst])
        src_list: list[int] = []
        pos_list: list[int] = []
        for p, task in enumerate(tasks_host):
            pos = int(pos_of_task[n + p])
            for var in [task[3]] + [v for v, _ in task[7]] + [v for v, _ in task[8]]:
                if var >= 0:
                    src_list.append(var)
                    pos_list.append(pos)
        if src_list:
            np.maximum.at(lastuse, np.asarray(src_list), np.asarray(pos_list))
        g.lastuse = lastuse.tolist()

        # Steps.
        self.steps(g, thread_times, thread_vars, host_ref)
        g.notes = self.notes
        g.stats = self.stats
        g.stats.update(host_points=float(m), order_violations=float(violations))
        return g

    def _overhead_warps(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per thread: its host events' starts (relative to ``t0``), the profiler's estimated
        overhead of the events up to each (``cost``'s weights times ``overhead_scale``),
        and the warped time each start reaches (see ``assemble``'s ``warped``): a host time
        as the program would reach it unprofiled."""
        from tb_syncfinder.cost import PROFILER_US_PER_HOST_EVENT, PROFILER_US_PER_PYTHON_EVENT

        warps = []
        for th in self.threads:
            starts = np.concatenate(
                [
                    np.asarray(th.starts, float),
                    np.fromiter((r.ts for r in th.runtime), float, len(th.runtime)),
                ]
            )
            python = np.asarray(th.kinds, dtype=np.int64) == PYTHON
            if len(python) != len(th.starts):  # no nodes swept: none of them a frame
                python = np.zeros(len(th.starts), dtype=bool)
            weights = np.concatenate(
                [
                    np.where(python, PROFILER_US_PER_PYTHON_EVENT, PROFILER_US_PER_HOST_EVENT),
                    np.full(len(th.runtime), PROFILER_US_PER_HOST_EVENT),
                ]
            )
            order = np.argsort(starts, kind="stable")
            starts = starts[order] - self.t0
            # The overhead an event costs is the host's time right after it starts (the
            # profiler recording it), taken from there on as far as the host's time allows:
            # warped time W(t) = max over s <= t of (s - C(s)), C the overhead of the events
            # started by s. It never runs backwards (nested events that start within a
            # microsecond of each other leave no time to take, and their overhead is taken
            # after them), and it takes every microsecond of overhead where time allows.
            cost = np.cumsum(weights[order] * self.overhead_scale)
            before = np.concatenate([[0.0], cost[:-1]])
            warps.append((starts, cost, np.maximum.accumulate(starts - before)))
        return warps

    def finish_order(self, g: _Graph) -> int:
        """Check the evaluation order; rebuild it topologically if some input comes late."""
        violations = g.base_run()
        if violations == 0:
            return 0
        producer = {}
        for i, task in enumerate(g.tasks):
            producer[task[0]] = i
            if task[1] >= 0:
                producer[task[1]] = i
        deps: list[list[int]] = []
        for task in g.tasks:
            srcs = [v for v in (task[3], task[5]) if v >= 0]
            srcs += [v for v, _ in task[7]] + [v for v, _ in task[8]]
            deps.append(sorted({producer[v] for v in srcs if v in producer}))
        indegree = [len(d) for d in deps]
        users: list[list[int]] = [[] for _ in g.tasks]
        for i, d in enumerate(deps):
            for s in d:
                users[s].append(i)
        ready = [i for i, k in enumerate(indegree) if k == 0]
        ready.reverse()
        order = []
        while ready:
            i = ready.pop()
            order.append(i)
            for u in users[i]:
                indegree[u] -= 1
                if indegree[u] == 0:
                    ready.append(u)
        if len(order) != len(g.tasks):
            raise _Unavailable("the dependencies form a cycle (inconsistent correlations)")
        g.tasks = [g.tasks[i] for i in order]
        left = g.base_run()
        if left:
            raise _Unavailable("the dependency graph could not be ordered")
        return violations

    def event_waits(self) -> tuple[np.ndarray, np.ndarray]:
        """cudaStreamWaitEvent: (destination activity, activity it waited for) pairs.

        With a CUPTI ``Stream Wait Event`` record: the first activity launched on its
        ``stream`` after the call waits for the last one launched before it on
        ``wait_on_stream``. Without: the thread's next launch waits for the latest activity
        launched before the call on another stream of the same device."""
        records: dict[Any, Any] = {}
        for events in self.tl.lanes.values():
            for d in events:
                if (
                    d.cat == "cuda_sync"
                    and d.args is not None
                    and ((d.args.cuda_sync_kind or d.name) == "Stream Wait Event")
                ):
                    records[_device_corr(d)] = d
        pairs_dst: list[np.ndarray] = []
        pairs_src: list[np.ndarray] = []
        lane_device = np.array([hash(device) for _, device, _ in self.lanes], dtype=np.int64)
        for h in range(len(self.threads)):
            names = self.rt_names[h]
            if not STREAM_WAIT_EVENT_APIS.intersection(names):
                continue
            index = np.flatnonzero(
                np.fromiter(map(STREAM_WAIT_EVENT_APIS.__contains__, names), bool, len(names))
            )
            starts = self.rt_ts[self.rt_offset[h] + index]
            corrs = self.rt_corrs[h]
            with_record = np.array([corrs[i] in records for i in index.tolist()], dtype=bool)
            for i, start in zip(
                index[with_record].tolist(), starts[with_record].tolist(), strict=True
            ):
                record = records[corrs[i]]
                if record.args is None:
                    continue
                device = self.tl.lane_device.get((record.pid, record.tid), record.pid)
                dst_lane = self._lane_for_stream(device, record.args.stream)
                src_lane = self._lane_for_stream(device, record.args.wait_on_stream)
                if dst_lane is None or src_lane is None:
                    continue
                arr = self.lane_launch_max[dst_lane]
                k = int(np.searchsorted(arr, start, side="right"))
                src = self.last_launched_before(src_lane, start)
                if k < len(arr) and src >= 0:
                    pairs_dst.append(np.array([int(self.lane_first[dst_lane]) + k]))
                    pairs_src.append(np.array([src]))
            starts = starts[~with_record]
            launch_ts, launch_items = self.thread_launches[h]
            k = np.searchsorted(launch_ts, starts, side="left")
            ok = k < len(launch_ts)
            starts = starts[ok]
            dst = launch_items[k[ok]]
            dst_lane = self.lane_of[dst]
            best_ts = np.full(len(dst), -np.inf)
            src = np.full(len(dst), -1, dtype=np.int64)
            for lane in range(len(self.lanes)):
                arr = self.lane_launch_max[lane]
                kk = np.searchsorted(arr, starts, side="right") - 1
                cand = self.lane_first[lane] + kk
                cand_ts = np.where(kk >= 0, arr[np.maximum(kk, 0)], -np.inf)
                better = (
                    (dst_lane != lane)
                    & (lane_device[dst_lane] == lane_device[lane])
                    & (cand_ts > best_ts)
                )
                best_ts = np.where(better, cand_ts, best_ts)
                src = np.where(better, cand, src)
            found = src >= 0
            pairs_dst.append(dst[found])
            pairs_src.append(src[found])
        if not pairs_dst:
            self.stats.update(event_waits=0.0, event_waits_contradicted=0.0)
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        dst = np.concatenate(pairs_dst).astype(np.int64)
        src = np.concatenate(pairs_src).astype(np.int64)
        consistent = self.d_end[src] <= self.d_ts[dst] + TOL_US
        self.stats.update(
            event_waits=float(consistent.sum()), event_waits_contradicted=float((~consistent).sum())
        )
        # The distinct (dst, src) pairs, by dst then src (np.unique(axis=0) would import
        # numpy.ma: 25 ms of every start-up).
        dst, src = dst[consistent], src[consistent]
        order = np.lexsort((src, dst))
        dst, src = dst[order], src[order]
        first = np.ones(len(dst), dtype=bool)
        first[1:] = (np.diff(dst) != 0) | (np.diff(src) != 0)
        return dst[first], src[first]

    def steps(
        self,
        g: _Graph,
        thread_times: list[list[float]],
        thread_vars: list[list[int]],
        host_ref: Any,
    ) -> None:
        tl = self.tl
        t0 = self.t0
        h = self.keys.index(self.step_key)
        spans: dict[int, tuple[float, float]] = {}
        for s in tl.steps:
            if (s.pid, s.tid) != self.step_key:
                continue
            prev = spans.get(s.number)
            if prev is None or prev[1] - prev[0] < s.end - s.ts:
                spans[s.number] = (s.ts - t0, s.end - t0)
        if not spans:
            g.step_markers = False
            th = self.threads[h]
            lo = (
                min(
                    ([th.starts[0]] if th.starts else [])
                    + ([th.runtime[0].ts] if th.runtime else [])
                )
                - t0
            )
            ends = list(th.ends) + [r.ts + r.dur for r in th.runtime]
            hi = max(ends) - t0
            spans = {0: (lo, hi)}
        numbers = sorted(spans, key=lambda k: spans[k][0])
        g.step_numbers = numbers
        for number in numbers:
            lo, hi = spans[number]
            sv, so = host_ref(h, lo)
            ev, eo = host_ref(h, hi)
            g.step_refs.append((sv, so, ev, eo))
        # Device work of each step: launched inside it (by any thread).
        starts = np.asarray([spans[k][0] for k in numbers])
        ends = np.asarray([spans[k][1] for k in numbers])
        when = np.where(np.isnan(self.launch_ts), self.d_ts, self.launch_ts)
        if not g.step_markers:
            idx = np.zeros(self.n_dev, dtype=np.int64)
        else:
            idx = np.searchsorted(starts, when, side="right") - 1
            inside = idx >= 0
            inside[inside] &= when[inside] < ends[idx[inside]]
            # Not by where it ran: where the host runs steps ahead, the queued work of the
            # step before the trace runs inside the first steps' host spans, and each step's
            # device span would stretch back to it.
            inside &= ~self.queued_before
            idx = np.where(inside, idx, -1)
        keep = np.flatnonzero(idx >= 0)
        order = keep[np.argsort(idx[keep], kind="stable")]
        g.item_order = order
        counts = np.bincount(idx[keep], minlength=len(numbers))
        g.item_bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        if self.ghosts:
            idx = idx.copy()
            idx[list(self.ghosts)] = -1
            keep = np.flatnonzero(idx >= 0)
            order = keep[np.argsort(idx[keep], kind="stable")]
            g.item_order = order
            counts = np.bincount(idx[keep], minlength=len(numbers))
            g.item_bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        g.step_of_item = idx
        g.item_launched = ~np.isnan(self.launch_ts)


class _CarriedItem:
    """A device item of an earlier window, in a window's graph (``_Builder.collect``): a
    recorded start and duration, no launch."""

    __slots__ = ("ts", "dur")
    args = None
    name = "<device work from an earlier window>"
    cat = "carried"

    def __init__(self, ts: float, dur: float) -> None:
        self.ts = ts
        self.dur = dur


class _Unavailable(Exception):
    pass


def _build(
    tl: Timeline,
    episodes: list[Episode],
    keyed: bool = False,
    typical: tuple[float, float, int] | None = None,
    lane_prev: Mapping[Any, tuple[float, float]] | None = None,
    overhead_scale: float = 0.0,
) -> _Graph | str:
    """``keyed``: the graph keeps what names its variables (``_Identity``), for ``carry``;
    ``typical``: ``_Graph.typical`` of an earlier window, used if it had more samples;
    ``lane_prev``: ``ReplayCarry.lanes``; ``overhead_scale``: the host's work without the
    profiler's estimated overhead times this (0: as recorded)."""
    builder = _Builder(tl, episodes, keyed, typical, lane_prev, overhead_scale)
    reason = builder.collect()
    if reason is not None:
        return reason
    builder.sync_jumps()
    builder.fork_joins()
    try:
        graph = builder.assemble()
    except _Unavailable as exc:
        return str(exc)
    recorded = graph.metrics(graph.rec)
    graph.recorded_metrics = recorded
    graph.base_metrics = graph.metrics(graph.base_values)
    deviating = int(np.sum(~(np.abs(np.array(graph.base_values) - np.array(graph.rec)) <= 1e-6)))
    graph.stats["deviating_nodes"] = float(deviating)
    graph.stats["nodes"] = float(len(graph.rec))
    return graph
