"""Ranking, sorting, filtering and paging of sites and syncs: the one definition the
report's order, the outputs, the plugin's ``sites``/``syncs`` routes and (through the
plugin's ``catalogue`` route) the dashboard's sortable table all follow.

Sites are ``models.Site`` objects or their JSON dicts alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from tb_syncfinder.models import (
    NOT_FITTED_LONGER_THAN_PROFILED,
    NOT_FITTED_NO_STEPS,
    NOT_FITTED_SHORTER_THAN_BUSY,
    STEP_TIME_RULED_OUT,
    UNPROFILED_FIT_TOL,
    UNPROFILED_STEP_ABOVE,
)

T = TypeVar("T")

# Columns a site list can be sorted by, with the order a first click starts with: costs and
# counts descending, names and positions ascending.
SITE_SORTS: dict[str, str] = {
    "predicted_saving_us": "desc",
    "host_wait_us": "desc",
    "gpu_idle_us": "desc",
    "count": "desc",
    "per_step": "desc",
    "share_of_step": "desc",
    "file": "asc",
    "line": "asc",
    "func": "asc",
    "ops": "asc",
    "kind": "asc",
}


# Fields a sync list (a site's occurrences) can be sorted by, with a first click's order:
# when it ran (the default, the report's order), and its costs, largest first.
SYNC_SORTS: dict[str, str] = {
    "ts_us": "asc",
    "predicted_saving_us": "desc",
    "host_wait_us": "desc",
    "gpu_idle_after_us": "desc",
}


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of ``(lo, hi)`` intervals: a bubble shared by
    back-to-back syncs counts once."""
    total = 0.0
    cur_lo = cur_hi = None
    for lo, hi in sorted(intervals):
        if cur_hi is None or lo > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        elif hi > cur_hi:
            cur_hi = hi
    if cur_hi is not None:
        total += cur_hi - cur_lo
    return total


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def site_cost_us(site: Any) -> float:
    """Host wait plus GPU idle: what a site costs, the report's ranking."""
    return float(_get(site, "host_wait_us") or 0.0) + float(_get(site, "gpu_idle_us") or 0.0)


def rank_sites(sites: Iterable[T]) -> list[T]:
    """The report's order: the largest predicted saving (the what-if replay's, issue 11)
    first, then costliest (host wait plus GPU idle), then most frequent, then by key
    (stable across runs). Latent sites cost nothing, so they come by count."""
    return sorted(
        sites,
        key=lambda s: (
            -float(_get(s, "predicted_saving_us") or 0.0),
            -site_cost_us(s),
            -int(_get(s, "count") or 0),
            str(_get(s, "key") or ""),
        ),
    )


def sites_with_latent(report_json: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    """Real sites in ranking order, then latent ones: ``(site, latent)`` pairs."""
    rows = [(site, False) for site in rank_sites(report_json.get("sites") or [])]
    rows += [(site, True) for site in rank_sites(report_json.get("latent_sites") or [])]
    return rows


def _sort_value(value: Any) -> tuple[float, str]:
    """Numbers by value (NaN/inf as 0), text as text, an operator chain as its names."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (float(value) if math.isfinite(value) else 0.0, "")
    if isinstance(value, list):
        return (0.0, " ".join(str(v) for v in value))
    return (0.0, str(value))


# The figures ``in_step`` gives a site over one step: sorted by those when a step is chosen.
STEP_FIGURES = ("count", "host_wait_us", "gpu_idle_us")


def sort_sites(sites: Sequence[T], key: str | None = None, order: str | None = None) -> list[T]:
    """Sites sorted by one column (None: the ranking order they come in); ties keep their
    ranking order, and sites without the field (no source line) come last whichever the
    order. ``order`` defaults to the column's natural one. Sites carrying ``in_step`` (a
    step chosen) sort by its figures for the columns it has. Raises ValueError for an
    unknown key or order."""
    if order not in (None, "asc", "desc"):
        raise ValueError(f"order must be asc or desc, got {order!r}")
    if key is None:
        return list(sites)
    if key not in SITE_SORTS:
        raise ValueError(f"unknown sort {key!r}; one of {', '.join(SITE_SORTS)}")
    order = order or SITE_SORTS[key]

    def value(site: Any) -> Any:
        stepped = _get(site, "in_step")
        if stepped and key in STEP_FIGURES:
            return stepped.get(key)
        return _get(site, key)

    present = [s for s in sites if value(s) is not None]
    missing = [s for s in sites if value(s) is None]
    if key == "file":  # a location: by file, then by line within it
        present.sort(
            key=lambda s: (_sort_value(_get(s, "file")), _sort_value(_get(s, "line") or 0)),
            reverse=order == "desc",
        )
    else:
        present.sort(key=lambda s: _sort_value(value(s)), reverse=order == "desc")
    return present + missing


def sort_syncs(syncs: Sequence[T], key: str | None = None, order: str | None = None) -> list[T]:
    """Syncs sorted by one field (None: the report's order, as they ran per trace); ties
    keep that order, and syncs without the field come last whichever the order. Raises
    ValueError for an unknown key or order."""
    if order not in (None, "asc", "desc"):
        raise ValueError(f"order must be asc or desc, got {order!r}")
    if key is None:
        return list(syncs)
    if key not in SYNC_SORTS:
        raise ValueError(f"unknown sort {key!r}; one of {', '.join(SYNC_SORTS)}")
    descending = (order or SYNC_SORTS[key]) == "desc"
    present = [s for s in syncs if _get(s, key) is not None]
    missing = [s for s in syncs if _get(s, key) is None]
    # Python's sort is stable either way: equal values keep the report's order.
    present.sort(key=lambda s: _sort_value(_get(s, key)), reverse=descending)
    return present + missing


def in_step(
    sites: Iterable[dict[str, Any]], syncs: Iterable[dict[str, Any]], step: int
) -> list[dict[str, Any]]:
    """Copies of ``sites`` each with ``in_step``: its count, host wait and GPU idle after
    (a shared bubble once) over the syncs of ``step`` alone. A site's own figures are the
    whole run's; beside a step filter they would be read as the step's."""
    of_site: dict[str, list[dict[str, Any]]] = {}
    for sync in syncs:
        if sync.get("step") == step:
            of_site.setdefault(sync.get("site_key") or "", []).append(sync)
    out = []
    for site in sites:
        members = of_site.get(site.get("key") or "", [])
        bubbles: dict[tuple[Any, Any], list[tuple[float, float]]] = {}
        for sync in members:
            idle = float(sync.get("gpu_idle_after_us") or 0.0)
            if idle > 0:
                end = float(sync.get("end_us") or sync.get("ts_us") or 0.0)
                bubbles.setdefault((sync.get("trace"), sync.get("device_id")), []).append(
                    (end, end + idle)
                )
        out.append(
            {
                **site,
                "in_step": {
                    "step": step,
                    "count": len(members),
                    "host_wait_us": sum(float(s.get("host_wait_us") or 0.0) for s in members),
                    "gpu_idle_us": sum(union_length(b) for b in bubbles.values()),
                },
            }
        )
    return out


def filter_sites(
    sites: Iterable[dict[str, Any]],
    *,
    kind: str | None = None,
    file: str | None = None,
    op: str | None = None,
    step: int | None = None,
) -> list[dict[str, Any]]:
    """Sites of a kind, whose file contains ``file``, with ``op`` in their chain, or that
    synced in ``step`` (each filter only when given)."""
    return [
        s
        for s in sites
        if (kind is None or s.get("kind") == kind)
        and (file is None or (s.get("file") and file in s["file"]))
        and (op is None or op in (s.get("ops") or []))
        and (step is None or step in (s.get("steps") or []))
    ]


def filter_syncs(
    syncs: Iterable[dict[str, Any]],
    *,
    site: str | None = None,
    kind: str | None = None,
    step: int | None = None,
) -> list[dict[str, Any]]:
    """Syncs of one site (its key), kind or step (each filter only when given)."""
    return [
        s
        for s in syncs
        if (site is None or s.get("site_key") == site)
        and (kind is None or s.get("kind") == kind)
        and (step is None or s.get("step") == step)
    ]


def with_unprofiled_step(report_json: dict[str, Any], step_time_us: float) -> dict[str, Any]:
    """The report with what its user measured without the profiler: the mean step time
    ``step_time_us`` (``summary.unprofiled_step_time_us``), and the most that fixing every
    sync can then save per step (``summary.unprofiled_saving_at_most_per_step_us``): that
    step minus the device's busy time per step, since no fix that keeps the GPU's work makes
    a step shorter than that work (docs/validation.md, section 5: it held in all 19 GPU
    recordings, and was within 5 % of the measured saving where the fix kept the work); of
    a job's ranks, the busiest one's. None where the device's busy time is unknown (a
    CPU-only trace, a replay-less one but an NPU's)."""
    summary = dict(report_json.get("summary") or {})
    busy = _device_busy_per_step(summary)
    # Replayed, or bounded with the device's work read (an NPU's tasks); not a run mixing
    # the two, whose busy time is only its replayed traces'.
    usable = busy is not None and busy > 0 and summary.get("saving_method") in ("replay", "bound")
    summary["unprofiled_step_time_us"] = step_time_us
    summary["unprofiled_saving_at_most_per_step_us"] = (
        max(0.0, step_time_us - busy) if usable else None
    )
    traces = list(report_json.get("traces") or [])
    if usable and summary.get("saving_method") == "bound":
        # Not replayed, so no fit rules a step out as the replay does (``whatif.
        # unprofiled_savings``): the profiled steps do, by the same measures.
        note = _bound_rule_out(report_json, step_time_us, busy)
        if note is not None:
            traces = [
                {**t, "unprofiled_note": note}
                if isinstance(t, dict) and not t.get("error") and not t.get("unprofiled_note")
                else t
                for t in traces
            ]
    notes = [t.get("unprofiled_note") for t in traces if isinstance(t, dict) and not t.get("error")]
    fitted = any(
        t.get("unprofiled_overhead_scale") is not None for t in traces if isinstance(t, dict)
    )
    if step_time_ruled_out(notes, fitted):
        summary["unprofiled_saving_at_most_per_step_us"] = None
    return {**report_json, "summary": summary, "traces": traces}


def _bound_rule_out(report_json: dict[str, Any], step_time_us: float, busy: float) -> str | None:
    """Why a run not replayed rules out a step time without the profiler (the replay's
    reasons, ``whatif.unprofiled_savings``, on the profiled steps): none where it does not."""
    readable = [t for t in report_json.get("traces") or [] if not t.get("error")]
    if readable and all(t.get("step_markers") is False for t in readable):
        return f"{NOT_FITTED_NO_STEPS}, so no step of it is the step measured"
    typical, which = _typical_profiled_step(report_json.get("steps") or [])
    if typical and step_time_us > typical * (1 + UNPROFILED_STEP_ABOVE):
        return (
            f"{NOT_FITTED_LONGER_THAN_PROFILED} step ({typical / 1000:.2f} ms, {which}), "
            "which the profiler's overhead cannot make: another program's step, or one timed "
            "with more in it"
        )
    if step_time_us < busy * (1 - UNPROFILED_FIT_TOL):
        device = "NPU" if all_on_npu(report_json) else "device"
        return (
            f"{NOT_FITTED_SHORTER_THAN_BUSY} {device}'s busy time per step "
            f"({busy / 1000:.2f} ms), which no program doing this {device} work runs faster "
            "than: another program's step?"
        )
    return None


def all_on_npu(report_json: dict[str, Any]) -> bool:
    """Whether every trace a report read is torch_npu's."""
    traces = [t for t in report_json.get("traces") or [] if not t.get("error")]
    return bool(traces) and all(t.get("device") == "npu" for t in traces)


def bounded_by_device_work(summary: dict[str, Any]) -> bool:
    """Whether a report not replayed still bounds the saving by its device's own work per
    step (torch_npu's tasks read): what ``with_unprofiled_step`` then says of a step time
    without the profiler, with no trace analysed again."""
    busy = _device_busy_per_step(summary)
    return summary.get("saving_method") == "bound" and busy is not None and busy > 0


def _device_busy_per_step(summary: dict[str, Any]) -> float | None:
    """The device's busy time per step a step time is bounded by: the busiest worker's (a
    report written before that field: one worker's, the same)."""
    busy = summary.get("busiest_worker_device_busy_per_step_us")
    return summary.get("device_busy_per_step_us") if busy is None else busy


def typical_step(intervals: Sequence[float]) -> float:
    """A run's typical step: the median of the steps after the first (the first runs set-up
    and starts from idle, as a step time measured over a loop leaves out; a host's hiccup in
    one of a few profiled steps would move a mean far from the loop's). The replay's fit
    (``whatif``) and the bound of a run not replayed hold a step time against it."""
    later = sorted(intervals[1:] or intervals)
    if not later:
        return 0.0
    middle = len(later) // 2
    return later[middle] if len(later) % 2 else (later[middle - 1] + later[middle]) / 2


def typical_step_words(steps: int, done: str) -> str | None:
    """Which of ``steps`` steps ``typical_step`` takes, in words (``done``: "replayed" or
    "profiled"); None for the only one."""
    if steps <= 1:
        return None
    if steps == 2:
        return f"the {done} step after the first"
    return f"the median of the {done} steps after the first"


def _typical_profiled_step(steps: Sequence[dict[str, Any]]) -> tuple[float, str]:
    """The profiled step a step time without the profiler is held against, and which it is
    in words: each trace's ``typical_step`` of its wall times, the longest of the traces'
    (a job's ranks step together)."""
    by_trace: dict[Any, list[float]] = {}
    for step in steps:
        wall = float(step.get("wall_time_us") or step.get("step_time_us") or 0.0)
        if wall > 0:
            by_trace.setdefault(step.get("trace"), []).append(wall)
    typical = max(map(typical_step, by_trace.values()), default=0.0)
    most = max(map(len, by_trace.values()), default=0)
    which = typical_step_words(most, "profiled") or "the only step profiled"
    if len(by_trace) > 1:
        which += ", the longest of the traces'"
    return typical, which


def step_time_ruled_out(notes: Sequence[str | None], fitted: bool) -> bool:
    """Whether every trace ruled a step time out (``models.STEP_TIME_RULED_OUT``: longer
    than the profiled step, shorter than the device's work, no step markers) and none was
    fitted: the "at most" bound of that step is none of this program's."""
    return (
        bool(notes)
        and not fitted
        and all(str(n or "").startswith(STEP_TIME_RULED_OUT) for n in notes)
    )


def page(items: Sequence[Any], offset: int, limit: int, **extra: Any) -> dict[str, Any]:
    """``{"total", "offset", "limit", "items"}`` for one page of ``items``."""
    return {
        "total": len(items),
        "offset": offset,
        "limit": limit,
        "items": list(items[offset : offset + limit]),
        **extra,
    }


def to_json() -> dict[str, Any]:
    """What the dashboard mirrors: the sortable columns of sites and syncs, each with its
    first-click order."""
    return {"site_sorts": dict(SITE_SORTS), "sync_sorts": dict(SYNC_SORTS)}
