"""The timeline around one sync, small enough for the dashboard to draw the wait and the
bubble: host operators / runtime calls of its thread and the device lanes, a few hundred
microseconds either side. Computed while the timeline is in memory (the plugin never
re-reads a trace for a detail view)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any

from tb_syncfinder.models import Sync
from tb_syncfinder.timeline import PYTHON, HostThread, Timeline


def _closest(items: list[dict[str, Any]], lo: float, hi: float, cap: int) -> list[dict]:
    """At most ``cap`` items, those nearest the sync interval, back in time order."""
    if len(items) <= cap:
        return items

    def distance(item: dict[str, Any]) -> float:
        start, end = item["ts_us"], item["ts_us"] + item["dur_us"]
        if end >= lo and start <= hi:
            return 0.0
        return lo - end if end < lo else start - hi

    kept = sorted(items, key=distance)[:cap]
    kept.sort(key=lambda item: item["ts_us"])
    return kept


def _thread_for(tl: Timeline, sync: Sync) -> HostThread | None:
    candidates = [t for t in tl.threads.values() if t.tid == sync.thread]
    for thread in candidates:
        i = bisect_left(thread.runtime_starts, sync.ts_us)
        if i < len(thread.runtime_starts) and thread.runtime_starts[i] == sync.ts_us:
            return thread
    for thread in candidates:
        if thread.starts and thread.starts[0] <= sync.ts_us <= max(thread.ends):
            return thread
    return candidates[0] if candidates else None


def _depth(thread: HostThread, index: int) -> int:
    depth = 0
    parent = thread.parent
    kinds = thread.kinds
    index = parent[index]
    while index >= 0:
        if kinds[index] != PYTHON:
            depth += 1
        index = parent[index]
    return depth


def sync_context(
    tl: Timeline, sync: Sync, window_us: float = 300, max_per_lane: int = 60
) -> dict[str, Any]:
    """``{"window", "sync": {"ts_us", "end_us", "idle_end_us"}, "host": [...], "device": [...]}``
    (shape in docs/DESIGN.md)."""
    idle_end = sync.end_us + sync.gpu_idle_after_us
    lo = sync.ts_us - window_us
    hi = max(sync.end_us, idle_end) + window_us
    host: list[dict[str, Any]] = []
    thread = _thread_for(tl, sync)
    if thread is not None:
        starts, ends, nodes, kinds = thread.starts, thread.ends, thread.nodes, thread.kinds
        first = bisect_left(starts, lo)
        last = bisect_right(starts, hi)
        indices: list[int] = []
        # Nodes begun before the window but still open in it: the enclosing chain.
        index = first - 1
        while index >= 0:
            if ends[index] >= lo:
                indices.append(index)
            index = thread.parent[index]
        indices.reverse()
        indices.extend(range(first, last))
        for i in indices:
            if kinds[i] == PYTHON:
                continue
            e = nodes[i]
            host.append(
                {
                    "name": e.name,
                    "cat": e.cat,
                    "ts_us": e.ts,
                    "dur_us": e.dur,
                    "depth": _depth(thread, i),
                }
            )
        r0 = bisect_left(thread.runtime_starts, lo)
        r1 = bisect_right(thread.runtime_starts, hi)
        for e in thread.runtime[r0:r1]:
            enclosing = thread.innermost(e.ts, e.ts + e.dur)
            depth = 0
            if enclosing >= 0:
                depth = _depth(thread, enclosing) + (0 if kinds[enclosing] == PYTHON else 1)
            host.append(
                {"name": e.name, "cat": e.cat, "ts_us": e.ts, "dur_us": e.dur, "depth": depth}
            )
        host.sort(key=lambda item: (item["ts_us"], item["depth"]))
        host = _closest(host, sync.ts_us, sync.end_us, max_per_lane)

    device: list[dict[str, Any]] = []
    for lane, events in tl.lanes.items():
        if sync.device_id is not None and tl.lane_device.get(lane) != sync.device_id:
            continue
        i = bisect_left(events, lo, key=lambda e: e.ts)
        j = bisect_right(events, hi, key=lambda e: e.ts)
        chosen = events[max(0, i - 1) : j]
        items = [
            {
                "lane": tl.lane_label(lane),
                "name": e.name,
                "cat": e.cat,
                "ts_us": e.ts,
                "dur_us": e.dur,
            }
            for e in chosen
            if e.ts + e.dur >= lo
        ]
        device.extend(_closest(items, sync.ts_us, idle_end, max_per_lane))
    device.sort(key=lambda item: (item["lane"], item["ts_us"]))
    return {
        "window": [lo, hi],
        "sync": {"ts_us": sync.ts_us, "end_us": sync.end_us, "idle_end_us": idle_end},
        "host": host,
        "device": device,
    }
