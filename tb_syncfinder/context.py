"""The timeline around one sync, small enough for the dashboard to draw the wait and the
bubble: host operators / runtime calls of its thread and the device lanes, a few hundred
microseconds either side. Computed while the timeline is in memory (the plugin never
re-reads a trace for a detail view)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from operator import attrgetter
from typing import Any

from tb_syncfinder.models import Sync
from tb_syncfinder.reader import Event
from tb_syncfinder.timeline import (
    END_TOLERANCE_SHARE,
    END_TOLERANCE_US,
    PYTHON,
    HostThread,
    Timeline,
)

_TS = attrgetter("ts")


def _closest(items: list[Any], lo: float, hi: float, cap: int) -> list[Any]:
    """At most ``cap`` items, those nearest the sync interval, back in time order. Items
    are ``(event, ...)`` tuples: only the kept ones become the answer's dicts."""
    if len(items) <= cap:
        return items

    def distance(item: tuple[Any, ...]) -> float:
        start = item[0].ts
        end = start + item[0].dur
        if end >= lo and start <= hi:
            return 0.0
        return lo - end if end < lo else start - hi

    kept = sorted(items, key=distance)[:cap]
    kept.sort(key=lambda item: item[0].ts)
    return kept


def _without_overlaps(drawn: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    """The events (in time order) each on the first lane at or below its depth that is
    free when it starts: spans that overlap without one holding the other (Lightning's
    ``run_training_batch`` and the ``ProfilerStep#N`` its hook opens) have the same depth
    and were drawn on one row over each other. Nested events are left as they are."""
    busy_until: list[float] = []
    out = []
    for event, depth in drawn:
        start = event.ts
        # ``end_tolerance(start)`` inlined: a call per drawn event was a third of this loop,
        # run for every sync of a trace the tab shows.
        tolerance = abs(start) * END_TOLERANCE_SHARE
        if tolerance < END_TOLERANCE_US:
            tolerance = END_TOLERANCE_US
        free_from = start + tolerance
        while depth < len(busy_until) and busy_until[depth] > free_from:
            depth += 1
        while len(busy_until) <= depth:
            busy_until.append(float("-inf"))
        end = start + event.dur
        if end > busy_until[depth]:
            busy_until[depth] = end
        out.append((event, depth))
    return out


class _Threads:
    """The timeline's host threads by tid, and each one's last end, found once for the
    syncs of one timeline: per sync, a pass over every thread and (for a sync that starts
    no runtime call, as a CPU trace's latent ones) over its thread's nodes made the detail
    views quadratic (8,000 latent syncs: 19 s)."""

    def __init__(self, tl: Timeline) -> None:
        self.by_tid: dict[Any, list[HostThread]] = {}
        for thread in tl.threads.values():
            self.by_tid.setdefault(thread.tid, []).append(thread)
        self.last_ends: dict[int, float] = {}

    def last_end(self, thread: HostThread) -> float:
        found = self.last_ends.get(id(thread))
        if found is None:
            found = self.last_ends[id(thread)] = max(thread.ends)
        return found


def _thread_for(tl: Timeline, sync: Sync, threads: _Threads | None = None) -> HostThread | None:
    """The host thread of ``sync`` (``threads``: shared by the syncs of one timeline)."""
    threads = threads or _Threads(tl)
    candidates = threads.by_tid.get(sync.thread, [])
    for thread in candidates:
        i = bisect_left(thread.runtime_starts, sync.ts_us)
        if i < len(thread.runtime_starts) and thread.runtime_starts[i] == sync.ts_us:
            return thread
    for thread in candidates:
        if thread.starts and thread.starts[0] <= sync.ts_us <= threads.last_end(thread):
            return thread
    return candidates[0] if candidates else None


class _Depths:
    """Each drawn node's depth among the host lanes (python frames are not drawn): its
    drawn ancestors (a node's parent encloses it, ``timeline._sweep``), memoised, as a
    window's nodes share most of their chains; and the nodes open before a window."""

    def __init__(self, thread: HostThread) -> None:
        self.parent = thread.parent
        self.kinds = thread.kinds
        self.ends = thread.ends
        self.known: dict[int, int] = {-1: 0}
        self._ends_tree: list[float] | None = None  # ``open_before``'s, made at its first use
        self._leaves = 1

    def of_children(self, index: int) -> int:
        """The depth of a node whose parent is ``index`` (-1: the root)."""
        known = self.known
        depth = known.get(index)
        if depth is not None:
            return depth
        chain: list[int] = []
        while index not in known:
            chain.append(index)
            index = self.parent[index]
        depth = known[index]
        kinds = self.kinds
        for index in reversed(chain):
            if kinds[index] != PYTHON:
                depth += 1
            known[index] = depth
        return depth

    def open_before(self, first: int, at: float) -> list[int]:
        """The nodes before index ``first`` (begun earlier, nodes being sorted by start)
        still open at ``at``, in order. A tree of the largest end under each range of nodes
        is searched only where it holds such a node: a few steps per node found, where a
        walk down the sweep's stack passed every earlier step of a run recorded with stacks
        (its spans outlive the frames they begin in)."""
        tree = self._ends_tree
        leaves = self._leaves
        if tree is None:
            ends = self.ends
            while leaves < len(ends):
                leaves *= 2
            tree = [float("-inf")] * (2 * leaves)
            tree[leaves : leaves + len(ends)] = ends
            for i in range(leaves - 1, 0, -1):
                left, right = tree[2 * i], tree[2 * i + 1]
                tree[i] = left if left > right else right
            self._ends_tree, self._leaves = tree, leaves
        found: list[int] = []
        pending = [(1, 0, leaves)]
        while pending:
            node, lo, hi = pending.pop()
            if lo >= first or tree[node] < at:
                continue
            if node >= leaves:
                found.append(node - leaves)
                continue
            mid = (lo + hi) // 2
            pending.append((2 * node + 1, mid, hi))
            pending.append((2 * node, lo, mid))
        return found


def sync_contexts(
    tl: Timeline, syncs: Iterable[Sync], window_us: float = 300, max_per_lane: int = 60
) -> dict[str, dict[str, Any]]:
    """``sync_context`` of each sync, by id; the nodes' depths found once per thread (a
    long run's syncs share most of their enclosing chains)."""
    depths: dict[int, _Depths] = {}
    threads = _Threads(tl)
    return {
        sync.id: sync_context(tl, sync, window_us, max_per_lane, depths, threads) for sync in syncs
    }


def sync_context(
    tl: Timeline,
    sync: Sync,
    window_us: float = 300,
    max_per_lane: int = 60,
    depths_of: dict[int, _Depths] | None = None,
    threads: _Threads | None = None,
) -> dict[str, Any]:
    """``{"window", "sync": {"ts_us", "end_us", "idle_end_us"}, "host": [...], "device": [...]}``
    (shape in docs/DESIGN.md). ``depths_of``: per thread (by ``id``), its nodes' depths
    known so far, and ``threads`` the threads by tid, shared by the calls for one timeline."""
    idle_end = sync.end_us + sync.gpu_idle_after_us
    lo = sync.ts_us - window_us
    hi = max(sync.end_us, idle_end) + window_us
    host: list[dict[str, Any]] = []
    thread = _thread_for(tl, sync, threads)
    if thread is not None:
        starts, nodes, kinds = thread.starts, thread.nodes, thread.kinds
        depths = depths_of.get(id(thread)) if depths_of is not None else None
        if depths is None:
            depths = _Depths(thread)
            if depths_of is not None:
                depths_of[id(thread)] = depths
        first = bisect_left(starts, lo)
        last = bisect_right(starts, hi)
        indices: list[int] = []
        # Drawn nodes begun before the window but still open in it, the spans that the last
        # node before it outlives included (no chain of enclosing nodes holds those).
        indices.extend(i for i in depths.open_before(first, lo) if kinds[i] != PYTHON)
        indices.extend(i for i in range(first, last) if kinds[i] != PYTHON)
        parent = thread.parent
        drawn: list[tuple[Event, int]] = [
            (nodes[i], depths.of_children(parent[i])) for i in indices
        ]
        r0 = bisect_left(thread.runtime_starts, lo)
        r1 = bisect_right(thread.runtime_starts, hi)
        for e in thread.runtime[r0:r1]:
            drawn.append((e, depths.of_children(thread.innermost(e.ts, e.ts + e.dur))))
        drawn.sort(key=lambda item: (item[0].ts, item[1]))
        drawn = _without_overlaps(drawn)
        host = [
            {"name": e.name, "cat": e.cat, "ts_us": e.ts, "dur_us": e.dur, "depth": depth}
            for e, depth in _closest(drawn, sync.ts_us, sync.end_us, max_per_lane)
        ]

    device: list[dict[str, Any]] = []
    for lane, events in tl.lanes.items():
        if sync.device_id is not None and tl.lane_device.get(lane) != sync.device_id:
            continue
        i = bisect_left(events, lo, key=_TS)
        j = bisect_right(events, hi, key=_TS)
        chosen = [(e,) for e in events[max(0, i - 1) : j] if e.ts + e.dur >= lo]
        if not chosen:
            continue
        label = tl.lane_label(lane)
        device.extend(
            {"lane": label, "name": e.name, "cat": e.cat, "ts_us": e.ts, "dur_us": e.dur}
            for (e,) in _closest(chosen, sync.ts_us, idle_end, max_per_lane)
        )
    device.sort(key=lambda item: (item["lane"], item["ts_us"]))
    return {
        "window": [lo, hi],
        "sync": {"ts_us": sync.ts_us, "end_us": sync.end_us, "idle_end_us": idle_end},
        "host": host,
        "device": device,
    }
