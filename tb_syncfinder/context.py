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
from tb_syncfinder.timeline import PYTHON, HostThread, Timeline, end_tolerance

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
        tolerance = end_tolerance(start)
        while depth < len(busy_until) and busy_until[depth] > start + tolerance:
            depth += 1
        while len(busy_until) <= depth:
            busy_until.append(float("-inf"))
        busy_until[depth] = max(busy_until[depth], start + event.dur)
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
    """Each drawn node's depth among the host lanes (python frames are not drawn): how many
    drawn nodes enclose it in time, memoised, as a window's nodes share most of their chains.

    A node's ``parent`` is what was open on the sweep's stack when it started, not always
    what encloses it: a ``record_function`` span (``ProfilerStep#N``) begins inside the
    python frames that enter it and outlives them, so the frames of the next step's
    ``profiler.step()`` call start inside step N, end after it, and become the parents of
    step N+1 (whose chain then holds every earlier step). Counting the chain's drawn nodes
    put step N at depth N-2 and its operators a lane lower per step; only the chain's nodes
    whose end reaches the node's end are counted here."""

    def __init__(self, thread: HostThread) -> None:
        self.parent = thread.parent
        self.kinds = thread.kinds
        self.ends = thread.ends
        self._ends_tree: list[float] | None = None  # ``open_before``'s, made at its first use
        self._leaves = 1
        self.drawn_above: dict[int, int] = {-1: -1}  # python frame -> first drawn node up
        self.up: dict[int, int] = {-1: -1}  # drawn node -> the drawn node enclosing it
        self.depth: dict[int, int] = {-1: -1}  # drawn node -> depth (-1: the root)

    def drawn_from(self, index: int) -> int:
        """``index`` if it is drawn, else its first drawn node up the chain (-1: none)."""
        kinds, drawn_above = self.kinds, self.drawn_above
        frames: list[int] = []
        while index >= 0 and kinds[index] == PYTHON:
            found = drawn_above.get(index)
            if found is not None:
                index = found
                break
            frames.append(index)
            index = self.parent[index]
        for frame in frames:
            drawn_above[frame] = index
        return index

    def _walk(self, index: int, end: float) -> tuple[int, bool]:
        """Up the chain from ``index`` to the first drawn node still open at ``end`` (-1:
        none), and True; or, where the walk needs a drawn node's enclosing node not known
        yet, that node and False. A drawn node ending before ``end`` is passed by a jump to
        the node enclosing it: what lies between them on the chain ends earlier still, or
        is not drawn."""
        ends, up = self.ends, self.up
        index = self.drawn_from(index)
        tolerance = end_tolerance(end)
        while index >= 0 and ends[index] + tolerance < end:
            found = up.get(index)
            if found is None:
                return index, False
            index = found
        return index, True

    def up_of(self, index: int) -> int:
        """The drawn node enclosing the drawn node ``index`` (-1: none); iterative, as the
        nodes a chain passes may each wait on the next one (a long run's earlier steps)."""
        up = self.up
        found = up.get(index)
        if found is not None:
            return found
        pending = [index]
        while pending:
            node = pending[-1]
            reached, done = self._walk(self.parent[node], self.ends[node])
            if done:
                up[node] = reached
                pending.pop()
            else:
                pending.append(reached)
        return up[index]

    def enclosing(self, index: int, end: float) -> int:
        """The innermost drawn node at or up the chain from ``index`` still open at ``end``
        (-1: none)."""
        while True:
            reached, done = self._walk(index, end)
            if done:
                return reached
            self.up_of(reached)

    def of_node(self, index: int) -> int:
        """The depth of the drawn node ``index`` (0: no drawn node encloses it)."""
        depth_of = self.depth
        depth = depth_of.get(index)
        if depth is not None:
            return depth
        chain: list[int] = []
        while index not in depth_of:
            chain.append(index)
            index = self.up_of(index)
        depth = depth_of[index]
        for index in reversed(chain):
            depth += 1
            depth_of[index] = depth
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

    def of_span(self, index: int, end: float) -> int:
        """The depth of a span ending at ``end`` whose innermost enclosing node (of any
        kind) is ``index`` (-1: none): one below the drawn node around it."""
        return self.of_node(self.enclosing(index, end)) + 1


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
        drawn: list[tuple[Event, int]] = [(nodes[i], depths.of_node(i)) for i in indices]
        r0 = bisect_left(thread.runtime_starts, lo)
        r1 = bisect_right(thread.runtime_starts, hi)
        for e in thread.runtime[r0:r1]:
            end = e.ts + e.dur
            drawn.append((e, depths.of_span(thread.innermost(e.ts, end), end)))
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
