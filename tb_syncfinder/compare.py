"""Baseline run vs new run, per site: fixed / new / better / worse / same.

Sites are matched by file basename + function + first operator + kind, not by line: an edit
above a sync moves its line but must not make every site "new", and a trace recorded in
another checkout has other absolute paths. Sites of one report sharing a key (two
``.item()`` calls in one function) are merged.
"""

from __future__ import annotations

import os
from typing import Any

from tb_syncfinder.aggregate import key_library
from tb_syncfinder.catalogue import (
    ALLOCATOR_SYNC,
    BLOCKING_HOST_TO_DEVICE,
    DEVICE_TO_HOST_COPY,
    EXPLICIT_SYNC,
    FFT_OPS,
    TENSOR_TEXT_OP,
    npu_without_calls,
)
from tb_syncfinder.models import COMPREHENSION_FRAMES, KERNEL_CELL

STATUSES = ("new", "worse", "better", "same", "fixed")
COMPARE_SCHEMA = "tb_syncfinder.compare/1"
# Relative change of a site's syncs per step, or of its cost per step (host wait + GPU
# idle), beyond which it counts as better or worse; below it, run-to-run noise.
THRESHOLD = 0.10


def _basename(file: str | None) -> str:
    if not file:
        return ""
    return file.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def _file_part(site: dict[str, Any]) -> str:
    """A site's file as compare matches it: its base name; for a Jupyter cell found in its
    notebook, the notebook's and the cell's (its nbformat id, else its place): ipykernel
    names a cell's code by a hash of its text, which an edit of the cell (the fix of one of
    its syncs) changes. A cell not found keeps that name: no other tells cells apart."""
    cell = site.get("cell")
    file = str(site.get("file") or "")
    if (
        isinstance(cell, dict)
        and cell.get("notebook")
        and KERNEL_CELL.search(file.replace("\\", "/"))
    ):
        which = cell.get("id") or f"cell {cell.get('index')}"
        return f"{_basename(str(cell['notebook']))}[{which}]"
    return _basename(site.get("file"))


def site_match_key(site: dict[str, Any], library_part: bool = True) -> str:
    """``basename:func:first op:kind``, the identity of a site across runs (a Jupyter cell's
    code: its notebook and cell for its basename); for a sync inside a library the user's
    line called, ``@`` the library file's basename and function (as ``aggregate.site_key``:
    a fix of one of the library's reads under ``trainer.train()`` is that row's, not a
    change of one row holding them all). ``library_part`` False: without it (SARIF's
    fingerprints, which code scanning keeps from one version to the next)."""
    key = ":".join(_identity(site))
    library = site.get("library") or {}
    if library_part and library.get("file") and TENSOR_TEXT_OP not in (site.get("ops") or []):
        # The report's key names the library code the fix is about (``aggregate.site_key``),
        # which may be an outer frame than ``library``'s (Lightning's ``to_item`` helper).
        file, func = key_library(str(site.get("key") or "")) or (
            str(library["file"]),
            str(library.get("func") or ""),
        )
        key += f"@{_basename(file)}:{func}"
    return key


def _identity(site: dict[str, Any]) -> tuple[str, str, str, str]:
    """A site's file part, function, first operator and kind (``site_match_key``)."""
    ops = site.get("ops") or []
    # Outside any operator the API call tells sites apart (cudaDeviceSynchronize and
    # cudaEventSynchronize are both explicit syncs, of no function in a stackless trace).
    first_op = ops[0] if ops else (site.get("apis") or [""])[0]
    return (
        _file_part(site),
        site.get("func") or "",
        first_op or "",
        site.get("kind") or "",
    )


def _steps(report: dict[str, Any]) -> int:
    return max(int((report.get("summary") or {}).get("step_count") or 0), 1)


def _cell_code(site: dict[str, Any]) -> bool:
    """Whether a site is in a Jupyter cell's code (ipykernel's name for it)."""
    return KERNEL_CELL.search(str(site.get("file") or "").replace("\\", "/")) is not None


def _join_cells(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> None:
    """Key a cell's site of ``after`` as its match in ``before`` where one side's cell was
    not found in a notebook (it keeps ipykernel's name, a hash of the text, which the edit
    between the runs changed) and nothing else tells them apart: one unmatched cell site
    on each side of one function, first operator and kind. Two runs of one notebook
    session, the first analysed once its cell was edited, read as "new" and "fixed"."""

    def unmatched(sites: dict[str, dict[str, Any]], others: dict[str, Any]) -> dict[Any, list]:
        found: dict[Any, list[str]] = {}
        for key, entry in sites.items():
            site = entry["site"]
            # A cell's top-level code is ``<module>`` in every cell: nothing tells two
            # cells' reads apart there (a read gone from one, another added elsewhere).
            if site.get("func") in (None, "", "<module>"):
                continue
            if key not in others and _cell_code(site):
                found.setdefault(_identity(site)[1:], []).append(key)
        return found

    lost, gained = unmatched(before, after), unmatched(after, before)
    for rest, keys in gained.items():
        was = lost.get(rest, [])
        if len(keys) != 1 or len(was) != 1:
            continue
        old, new = was[0], keys[0]
        if before[old]["site"].get("cell") and after[new]["site"].get("cell"):
            continue  # both found: their notebook cells differ, so they are two cells
        after[old] = after.pop(new)


def _merge(report: dict[str, Any], sites: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    steps = _steps(report)
    merged: dict[str, dict[str, Any]] = {}
    for site in sites:
        key = site_match_key(site)
        entry = merged.get(key)
        if entry is None:
            entry = merged[key] = {
                "site": site,
                "lines": [],
                "count": 0,
                "host_wait_us": 0.0,
                "gpu_idle_us": 0.0,
                "share_of_step": 0.0,
                "predicted_saving_per_step_us": 0.0,
                "methods": set(),
                "line_exact": True,
                "saving_by_line": {},
                "gpu_idle_measured": True,
            }
        if site.get("line") is not None and site["line"] not in entry["lines"]:
            entry["lines"].append(site["line"])
        # Any line of the merged sites not the call's own: the row's lines are not exact.
        if site.get("file") and site.get("line") is not None and site.get("line_exact") is False:
            entry["line_exact"] = False
        entry["count"] += int(site.get("count") or 0)
        entry["host_wait_us"] += float(site.get("host_wait_us") or 0.0)
        entry["gpu_idle_us"] += float(site.get("gpu_idle_us") or 0.0)
        entry["share_of_step"] += float(site.get("share_of_step") or 0.0)
        # What fixing it saves, as the report predicted (not the cost: a sync's wait and
        # idle overstate that where other work or syncs fill the gap). A report without
        # the figure (older versions, latent sites) has None.
        # A latent site (a CPU-only trace) saves nothing where it was seen: no figure.
        saving = None if site.get("latent") else site.get("predicted_saving_per_step_us")
        if saving is None or entry["predicted_saving_per_step_us"] is None:
            entry["predicted_saving_per_step_us"] = None
        else:
            entry["predicted_saving_per_step_us"] += float(saving)
        by_line = entry["saving_by_line"]
        line = site.get("line")
        if saving is None or (line in by_line and by_line[line] is None):
            by_line[line] = None
        else:
            by_line[line] = by_line.get(line, 0.0) + float(saving)
        entry["methods"].add(site.get("saving_method"))
        # A report without the field (older versions) measured what it says.
        entry["gpu_idle_measured"] = entry["gpu_idle_measured"] and (
            site.get("gpu_idle_measured") is not False
        )
    for entry in merged.values():
        entry["per_step"] = entry["count"] / steps
        entry["cost_per_step_us"] = (entry["host_wait_us"] + entry["gpu_idle_us"]) / steps
    return merged


def _side(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    site = entry["site"]
    return {
        "file": site.get("file"),
        "line": site.get("line"),
        "lines": sorted(entry["lines"]),
        # False where a line of it is the function's (or the recorded) line, not the call's,
        # as the report marks it with "*".
        "line_exact": entry["line_exact"],
        "count": entry["count"],
        "per_step": entry["per_step"],
        "host_wait_us": entry["host_wait_us"],
        "gpu_idle_us": entry["gpu_idle_us"],
        # False where the device's idle time was not read (torch_npu): no bound either.
        "gpu_idle_measured": entry["gpu_idle_measured"],
        "cost_per_step_us": entry["cost_per_step_us"],
        "share_of_step": entry["share_of_step"],
        "predicted_saving_per_step_us": entry["predicted_saving_per_step_us"],
        # "replay" where every merged site's figure is the replay's, else "bound" (an upper
        # bound), as the report's own saving_method; null with no figure.
        "saving_method": (
            None
            if entry["predicted_saving_per_step_us"] is None
            else "replay"
            if entry["methods"] == {"replay"}
            else "bound"
        ),
    }


def _status(before: dict[str, Any] | None, after: dict[str, Any] | None, measure: str) -> str:
    """``worse`` where the site syncs more often per step or ``measure`` (its cost per step)
    grew beyond ``THRESHOLD``, else ``better`` where either fell beyond it. The count
    first: a site that syncs twice as often can measure cheaper in one run (its waits
    landing on work already done), and a gate on cost alone passed it (a review's job
    where rank 0 also called .item() every step)."""
    if before is None:
        return "new"
    if after is None:
        return "fixed"
    changes = {_change(before, after, measure)}
    if measure != "per_step":
        changes.add(_change(before, after, "per_step"))
    if "worse" in changes:
        return "worse"
    return "better" if "better" in changes else "same"


def _change(before: dict[str, Any], after: dict[str, Any], measure: str) -> str:
    old, now = float(before[measure]), float(after[measure])
    if old <= 0:
        return "same" if now <= 0 else "worse"
    change = (now - old) / old
    if change > THRESHOLD:
        return "worse"
    if change < -THRESHOLD:
        return "better"
    return "same"


def _compare_sites(
    base: dict[str, Any], new: dict[str, Any], field: str, measure: str
) -> list[dict[str, Any]]:
    before_sites = _merge(base, base.get(field) or [])
    after_sites = _merge(new, new.get(field) or [])
    _join_cells(before_sites, after_sites)
    rows = []
    groups: list[tuple[str, ...] | None] = []
    for key in list(before_sites) + [k for k in after_sites if k not in before_sites]:
        before = _side(before_sites.get(key))
        after = _side(after_sites.get(key))
        current = (after_sites.get(key) or before_sites[key])["site"]
        groups.append(_function_of(current))
        # A row on both sides that lost lines: those syncs were fixed though the row stays
        # (one function's .cpu() and .tolist() are one row). Which ones, where the lines
        # that stay tell it (``_lines_fixed``); lines that only moved are no fix.
        lines_fixed: list[int] = []
        lines_fixed_count = 0
        lines_fixed_saving: float | None = 0.0
        if before is not None and after is not None:
            lines_fixed_count = max(0, len(set(before["lines"])) - len(set(after["lines"])))
            lines_fixed = _lines_fixed(before["lines"], after["lines"]) if lines_fixed_count else []
            by_line = before_sites[key]["saving_by_line"]
            savings = [by_line.get(line) for line in lines_fixed]
            lines_fixed_saving = None if None in savings else float(sum(savings))
        rows.append(
            {
                "key": key,
                "file": current.get("file"),
                "line": current.get("line"),
                # A Jupyter cell's: the notebook cell it is in (as on the report's site).
                "cell": current.get("cell"),
                # The library line that synced, where the user's line called a library (as
                # on the report's site): what tells the rows of one call apart.
                "library": current.get("library"),
                "line_exact": (after or before or {}).get("line_exact", True),
                "func": current.get("func"),
                "kind": current.get("kind"),
                "ops": list(current.get("ops") or []),
                # The API calls, the only handle on a site without a stack or operator
                # (``[cudaDeviceSynchronize] (no stack)`` in the report).
                "apis": list(current.get("apis") or []),
                "status": _status(before, after, measure),
                "before": before,
                "after": after,
                "change_us": (after or {}).get("cost_per_step_us", 0.0)
                - (before or {}).get("cost_per_step_us", 0.0),
                "lines_fixed": lines_fixed,
                # How many lines the row lost (lines_fixed names them where it can tell).
                "lines_fixed_count": lines_fixed_count,
                # Their baseline's own predictions, summed (None: one has none).
                "lines_fixed_saving_per_step_us": lines_fixed_saving if lines_fixed else None,
                # The keys of the rows of the same function whose syncs this new row took
                # the place of (``_mark_replacements``): not a regression, and not gated.
                "replaces": [],
            }
        )
    _mark_replacements(rows, groups, measure)
    rows.sort(key=lambda r: (STATUSES.index(r["status"]), -abs(r["change_us"]), r["key"]))
    return rows


def _function_of(site: dict[str, Any]) -> tuple[str, ...] | None:
    """The code a site is in, as compare matches it: its file part and function, and the
    library code under the user's call where it has one; None without a file (nothing tells
    such a site's function)."""
    file_part, func, _op, _kind = _identity(site)
    if not file_part:
        return None
    if func in COMPREHENSION_FRAMES:
        # Its function's code: the one function of the file part its callers name (the fix
        # of ``[itos[int(i)] for i in y]`` is a ``y.tolist()`` in the function around it).
        around = {
            (_file_part(caller), caller.get("func") or "")
            for caller in site.get("callers") or []
            if isinstance(caller, dict)
        }
        if len(around) == 1 and next(iter(around))[0] == file_part:
            func = next(iter(around))[1]
    library = site_match_key(site).partition("@")[2] if site.get("library") else ""
    return (file_part, func, library)


def _mark_replacements(
    rows: list[dict[str, Any]], groups: list[tuple[str, ...] | None], measure: str
) -> None:
    """Give the new rows of a function ``replaces``: the keys of its rows that were fixed or
    got better, where together the new rows sync no more often per step, and cost no more
    per step, than those rows freed (within ``THRESHOLD``). The advised fix of a function's
    reads of one element at a time is one ``.tolist()``: a site of another operator, so a
    row "new" beside the "fixed" ones, and ``--fail-on-regression`` failed the fix it had
    advised (chargpt: 103 reads a step became one)."""
    by_function: dict[tuple[str, ...], list[int]] = {}
    for index, group in enumerate(groups):
        if group is not None:
            by_function.setdefault(group, []).append(index)
    measures = ("per_step",) if measure == "per_step" else ("per_step", measure)
    for indices in by_function.values():
        added = [rows[i] for i in indices if rows[i]["status"] == "new"]
        freed_rows = [rows[i] for i in indices if rows[i]["status"] in ("fixed", "better")]
        if not added or not freed_rows:
            continue
        fits = True
        for name in measures:
            freed = sum(
                float(row["before"][name]) - float((row["after"] or {}).get(name) or 0.0)
                for row in freed_rows
            )
            came = sum(float(row["after"][name]) for row in added)
            fits = fits and freed > 0 and came <= freed * (1 + THRESHOLD)
        if fits:
            for row in added:
                row["replaces"] = [row_freed["key"] for row_freed in freed_rows]


def _replacement_note(rows: list[dict[str, Any]]) -> str | None:
    """What the rows marked by ``_mark_replacements`` mean, for the user; None without."""
    marked = [row for row in rows if row.get("replaces")]
    if not marked:
        return None
    count = len(marked)
    return (
        f"{count} new site{'s' if count != 1 else ''} in place of syncs fixed in the same "
        "function (fewer syncs per step there than before): not "
        f"{'regressions' if count != 1 else 'a regression'} (and not gated)"
    )


def compare(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Compare two report JSON dicts (``Report.to_json()``): ``base`` before, ``new`` after.

    Returns ``{"base": Summary, "new": Summary, "step_time_change_us" (host spans),
    "wall_step_time_change_us" (the longer of host and device span), "predicted_saving_us"
    (the baseline's replay of fixing every sync, per step), "measured_saving_us",
    "predicted_saving_of_fixed_us" (the fixed sites' own predictions and those of the
    lines fixed in rows still there, summed), "every_site_fixed" (the baseline had sites,
    and none is left), "unmeasured" ("cpu" or "npu" where neither run measured a wait:
    no saving to predict or measure), "sites": [...],
    "latent_sites": [...], "counts": {status: n}, "note"}``; each site has ``key``, ``file``,
    ``line``, ``line_exact`` (of the side ``line`` is from; False: a line of the row is not
    the syncing call's, "*" in the report), ``func``, ``kind``, ``ops``, ``apis``, ``status``,
    ``lines_fixed_count`` (how many lines a row on both sides lost) and ``lines_fixed``
    (which, where that can be told) with ``lines_fixed_saving_per_step_us``, ``replaces``
    (the keys of the rows of its function a new row took the place of: not gated; see
    ``replacement_note``), ``before`` /
    ``after``
    (null when absent on that side; each with its cost per step and the report's
    ``predicted_saving_per_step_us``, null where the report has none) and ``change_us``
    (per-step cost change). Latent sites
    (CPU-only traces, no cost) are compared by count per step. When only one run is
    CPU-only, all sites of both are compared by count per step (in ``sites``) and ``note``
    says so. ``unreadable``: each trace file of either run that could not be read
    (``{"side": "base"|"new", "path", "error"}``): the comparison is of the others only.
    ``keys_differ``: why the sites are not comparable one to one (a report JSON written by
    an older version), else None. ``steps_differ``: why their figures per step are not
    (one run's traces without ProfilerStep markers), else None; ``runs_note`` says it too.
    """
    base_summary = base.get("summary") or {}
    new_summary = new.get("summary") or {}
    note = None
    note_kind = None
    if _cpu_only(base) != _cpu_only(new):
        # A CPU-only run has only latent sites (no wait was measured): compared against a
        # GPU run's real sites, every site would read "fixed" (or "new") though nothing
        # changed in the code. Compare both runs' sites together, by count per step.
        side = "baseline" if _cpu_only(base) else "new run"
        unrecorded = _unrecorded_npu(base if side == "baseline" else new)
        note_kind = "npu_unrecorded" if unrecorded else "cpu"
        note = (
            f"the {side} is an NPU trace without AscendCL calls (torch_npu's default profiler "
            "level): its waits were not recorded, so sites are compared by count per step, "
            "not by cost"
            if unrecorded
            else "one run is CPU-only: sites are compared by count per step, "
            "not by cost (a CPU-only trace measures no wait)"
        )
        base = _with_latent_as_sites(base)
        new = _with_latent_as_sites(new)
        sites = _compare_sites(base, new, "sites", "per_step")
        latent_sites: list[dict[str, Any]] = []
    elif _npu_against_gpu(base, new):
        # An NPU run against a GPU run: the same code's waits on two devices, whose step
        # times and costs say nothing of a fix (a green "faster by 15.7 ms (-94 %)").
        note_kind = "npu_gpu"
        note = (
            "one run is on an NPU and the other on a GPU: their step times and costs do not "
            "compare, so sites are compared by count per step"
        )
        sites = _compare_sites(base, new, "sites", "per_step")
        latent_sites = _compare_sites(base, new, "latent_sites", "per_step")
    else:
        sites = _compare_sites(base, new, "sites", "cost_per_step_us")
        latent_sites = _compare_sites(base, new, "latent_sites", "per_step")
    counts = {status: sum(1 for s in sites if s["status"] == status) for status in STATUSES}
    base_step = float(base_summary.get("mean_step_time_us") or 0.0)
    new_step = float(new_summary.get("mean_step_time_us") or 0.0)
    # Step time from the device timeline too: with no syncs the host runs ahead of the
    # device and its ProfilerStep spans shrink although the device is as busy (issue 11).
    base_wall = float(base_summary.get("mean_wall_step_time_us") or 0.0) or base_step
    new_wall = float(new_summary.get("mean_wall_step_time_us") or 0.0) or new_step
    wall_change = new_wall - base_wall if base_wall and new_wall else None
    steps_differ = _steps_differ(base, new)
    if steps_differ:
        # A whole unmarked trace's "step" against a real step measures no change.
        base_step = new_step = 0.0
        wall_change = None
    predicted = base_summary.get("predicted_saving_per_step_us")
    base_median, new_median = _median_wall_step(base), _median_wall_step(new)
    if steps_differ:
        base_median = new_median = None
    fixed = [row for row in sites if row["status"] == "fixed"]
    fixed_savings = [(row["before"] or {}).get("predicted_saving_per_step_us") for row in fixed]
    fixed_savings += [
        row["lines_fixed_saving_per_step_us"]
        if len(row["lines_fixed"]) == row["lines_fixed_count"]
        else None  # lines lost, but which the moved lines do not tell: no prediction
        for row in sites
        if row["lines_fixed_count"]
    ]
    baseline_rows = sum(1 for row in sites if row["before"])
    return {
        # What reads this can tell it from a report (tb_syncfinder.report/1) and its version.
        "schema": COMPARE_SCHEMA,
        "base": base_summary,
        "new": new_summary,
        "step_time_change_us": new_step - base_step if base_step and new_step else None,
        "wall_step_time_change_us": wall_change,
        # What the baseline's replay predicted fixing every sync saves per step, and what
        # the new run saves (its wall step time against the baseline's), both profiled.
        "predicted_saving_us": float(predicted) if predicted is not None else None,
        # (+ 0.0: no "-0 us" where nothing changed)
        "measured_saving_us": -wall_change + 0.0 if wall_change is not None else None,
        # Where only some sites were fixed, what the baseline predicted for those: each
        # fixed site's own prediction, summed (syncs that wait for the same work save more
        # together than apart). None with no fixed site or one without a figure.
        "predicted_saving_of_fixed_us": (
            float(sum(fixed_savings))
            if fixed_savings and all(v is not None for v in fixed_savings)
            else None
        ),
        "every_site_fixed": baseline_rows > 0 and len(fixed) == baseline_rows,
        "unmeasured": _unmeasured(base, new) if note is None and not sites else None,
        # The same from the median profiled step of each run: a few profiled steps with one
        # slow one (a data-loader stall) move the mean by more than the fix did.
        "measured_saving_median_us": (
            base_median - new_median + 0.0
            if base_median is not None and new_median is not None
            else None
        ),
        "sites": sites,
        "latent_sites": latent_sites,
        "counts": counts,
        "note": note,
        # Which note: "cpu" (one run CPU-only), "npu_unrecorded" (one run torch_npu's
        # without AscendCL calls), "npu_gpu" (an NPU run against a GPU run); null without.
        "note_kind": note_kind,
        "unreadable": _unreadable(base, "base") + _unreadable(new, "new"),
        "keys_differ": _keys_differ(base, new),
        # Why per-step figures do not compare (one run's traces without step markers, the
        # other's with), else None: ``--fail-on-regression`` cannot gate on them.
        "steps_differ": steps_differ,
        # Both mark rows: each runs whatever the other found.
        "detection_note": _joined(
            _mark_newly_listed(base, new, latent_sites if note is None else sites),
            _mark_unseen_on_cpu(base, sites if note is not None else []),
        ),
        # Why new rows that take the place of a function's fixed syncs are not gated
        # (their ``replaces``), else None.
        "replacement_note": _replacement_note(sites + latent_sites),
        "runs_note": _joined(
            steps_differ,
            _runs_note(base, new),
            _setup_note(
                base,
                new,
                -wall_change if wall_change is not None else None,
                float(predicted) if predicted is not None else None,
            ),
        ),
    }


def _lines_fixed(before: list[int], after: list[int]) -> list[int]:
    """The baseline lines of a row still there that the new run lost: those missing from
    it, or, where an edit moved the rest, those no single offset of the rest explains
    away; [] when several offsets explain it (which line went cannot be told)."""
    before_set, after_set = set(before), set(after)
    if after_set <= before_set:
        return sorted(before_set - after_set)
    found: set[tuple[int, ...]] = set()
    for offset in {a - b for a in after_set for b in before_set}:
        moved = {a - offset for a in after_set}
        if moved <= before_set:
            found.add(tuple(sorted(before_set - moved)))
    return list(next(iter(found))) if len(found) == 1 else []


def _unmeasured(base: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why neither run measured a wait: "npu" (a torch_npu trace without AscendCL calls),
    "cpu" (CPU-only traces, latent sites at most), else None."""
    if _unrecorded_npu(base) or _unrecorded_npu(new):
        return "npu"
    if _cpu_only(base) and _cpu_only(new):
        return "cpu"
    return None


def _median_wall_step(report: dict[str, Any]) -> float | None:
    """The median of a run's profiled steps' wall times (None without them)."""
    walls = sorted(
        float(s.get("wall_time_us") or s.get("step_time_us") or 0.0)
        for s in report.get("steps") or []
    )
    walls = [w for w in walls if w > 0]
    if not walls:
        return None
    middle = len(walls) // 2
    return walls[middle] if len(walls) % 2 else (walls[middle - 1] + walls[middle]) / 2


def _joined(*notes: str | None) -> str | None:
    return "; ".join(n for n in notes if n) or None


def _runs_note(base: dict[str, Any], new: dict[str, Any]) -> str | None:
    """What makes the two runs' step times not the fix's measure: the same trace files on
    both sides, or different GPUs (a review compared an H100 run with an unrelated H200
    one and was told its steps got 43 % faster)."""

    def paths(report: dict[str, Any]) -> set[tuple[str, Any]]:
        # With each trace's event count: a saved report's trace recorded again in place
        # (a CI workspace) is another trace under the same path.
        return {
            (os.path.realpath(t["path"]), t.get("event_count"))
            for t in report.get("traces") or []
            if t.get("path")
        }

    if paths(base) and paths(base) == paths(new):
        return "both sides are the same trace files: nothing changed between them"

    def devices(report: dict[str, Any]) -> set[str]:
        return {
            str(t["device_name"])
            for t in report.get("traces") or []
            if t.get("device_name") and not t.get("error")
        }

    before, after = devices(base), devices(new)
    if before and after and before.isdisjoint(after):
        return (
            f"recorded on different GPUs ({', '.join(sorted(before))} vs "
            f"{', '.join(sorted(after))}): the step-time change is not the fix's alone"
        )
    return None


def _setup_note(
    base: dict[str, Any],
    new: dict[str, Any],
    measured_us: float | None,
    predicted_us: float | None,
) -> str | None:
    """One run profiled from a library's first call (cuBLAS, cuDNN setting themselves up:
    ``first_call_of``) against one profiled after a warm-up: the first's steps hold the
    set-up's own host work (84-239 ms a step on an H100, docs/validation.md section 10),
    which the replay never counts as a sync's saving. Said when the measured change is
    that far from the prediction in that direction: a baseline with more set-up measured
    a saving well above the prediction, a new run with more measured a slowdown. Set-ups
    are compared per trace (runs of different rank counts). Not cuFFT's plans: a plan made
    every step (a new shape each step) is what fixing the shapes saves, not a warm-up.
    Nothing is said where a report predates the field (it cannot tell)."""

    def setups(report: dict[str, Any]) -> float | None:
        syncs = report.get("syncs") or []
        if any("first_call_of" not in sync for sync in syncs):
            return None  # a report written before the field: unknown, not none
        count = sum(
            1
            for sync in syncs
            if sync.get("first_call_of") and sync["first_call_of"] not in FFT_OPS
        )
        traces = len([t for t in report.get("traces") or [] if not t.get("error")]) or 1
        return count / traces

    before, after = setups(base), setups(new)
    if before is None or after is None or before == after or measured_us is None:
        return None
    predicted = predicted_us or 0.0
    if before > after:
        # Far beyond the prediction: more than a millisecond a step, and more than twice it.
        if not (measured_us - predicted > 1000.0 and measured_us > 2 * predicted):
            return None
        more, fewer = "baseline", "new run"
        effect = "the measured saving includes that set-up's own host work"
    else:
        if not (measured_us < -1000.0 and measured_us < predicted - 1000.0):
            return None
        more, fewer = "new run", "baseline"
        effect = "the measured slowdown is that set-up's own host work"
    per_trace = f"{max(before, after):.3g} a trace against {min(before, after):.3g}"
    return (
        f"the {more}'s profiled steps hold more syncs in a library's first-call set-up "
        f"(cuBLAS or cuDNN; {per_trace}) than the {fewer}'s: {effect}, which the "
        "prediction (the syncs' waits) does not count; profile both after a warm-up step "
        "to compare the fix alone"
    )


# What a CPU-only trace cannot list: copies to the device (nothing on a CPU run says which
# tensors would live on a GPU), explicit synchronize calls and allocator calls (no device).
_NOT_LISTED_ON_CPU = frozenset({BLOCKING_HOST_TO_DEVICE, EXPLICIT_SYNC, ALLOCATOR_SYNC})


def _mark_unseen_on_cpu(base: dict[str, Any], rows: list[dict[str, Any]]) -> str | None:
    """A CPU-only baseline against a GPU run: mark ``newly_listed`` the GPU run's new sites
    of kinds no CPU-only trace lists (a ``.to()`` copy read "new" and failed
    --fail-on-regression between two runs of the same program). Returns the note, or None."""
    if not _cpu_only(base):
        return None
    # An NPU trace without AscendCL calls lists no copy at all (its stacks are torch_npu's
    # "Call stack" strings: no recorded .cpu() / .tolist() call either).
    unseen = _NOT_LISTED_ON_CPU | ({DEVICE_TO_HOST_COPY} if _unrecorded_npu(base) else set())
    marked = 0
    for row in rows:
        if row["status"] == "new" and row.get("kind") in unseen:
            row["newly_listed"] = True
            marked += 1
    if not marked:
        return None
    what = "an NPU trace without AscendCL calls" if _unrecorded_npu(base) else "a CPU-only trace"
    return (
        f"{marked} new site{'s' if marked != 1 else ''} of a kind {what} cannot show "
        "(copies, explicit synchronize, allocator calls): the baseline could not list "
        "them, so they are not regressions (and not gated)"
    )


def _mark_newly_listed(
    base: dict[str, Any], new: dict[str, Any], latent_rows: list[dict[str, Any]]
) -> str | None:
    """Mark ``newly_listed`` the new latent sites of Tensor methods that the baseline's
    version did not list (a baseline written before ``.cpu()`` / ``.tolist()`` were):
    not regressions of the program. Returns what to tell the user, or None."""
    missing = set(new.get("latent_methods") or ()) - set(base.get("latent_methods") or ())
    missing_ops = set(new.get("latent_ops") or ()) - set(base.get("latent_ops") or ())
    if not missing and not missing_ops:
        return None
    apis = {f"Tensor.{method}" for method in missing}
    marked = 0
    for row in latent_rows:
        # A copy by a newly listed method, with what read its result (``x.to('cpu')
        # .item()`` was an item() site, and is now the copy's: ``Tensor.to, Tensor.item``);
        # or a newly listed operator's.
        by_method = set(row["apis"] or ()) & apis and all(
            str(api).startswith("Tensor.") for api in row["apis"]
        )
        if row["status"] == "new" and (by_method or set(row["ops"] or ()) & missing_ops):
            row["newly_listed"] = True
            marked += 1
    if not marked:
        return None
    calls = ", ".join([f".{method}()" for method in sorted(missing)] + sorted(missing_ops))
    return (
        f"{marked} new latent site{'s' if marked != 1 else ''} of {calls}: the baseline's "
        "tb-syncfinder did not list these calls in CPU-only traces, so they are not "
        "regressions (and not gated); write the baseline again to compare them"
    )


def _stepped(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace files of a run that count steps: read, and not one that recorded nothing
    (no step at all)."""
    return [
        t
        for t in report.get("traces") or []
        if isinstance(t, dict) and not t.get("error") and int(t.get("steps") or 0) > 0
    ]


def _steps_differ(base: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why the two runs' figures per step do not compare: one run's traces have step
    markers and the other's (some of them) have none, so that a whole trace counts as one
    step there (five iterations' syncs read as one step's: "+400 %"). None where both
    count steps alike (the same share of their traces without markers: none, all, or a
    marked train trace beside an unmarked eval trace on each side)."""
    analysed = {side: _stepped(report) for side, report in (("baseline", base), ("new run", new))}
    unmarked = {
        side: [str(t.get("path")) for t in traces if t.get("step_markers") is False]
        for side, traces in analysed.items()
    }
    # Alike: the same share of each run's traces counted whole (none, all, or a train
    # trace with markers beside an eval trace without on both sides).
    shares = {
        side: len(unmarked[side]) / len(analysed[side]) if analysed[side] else 0.0
        for side in unmarked
    }
    if shares["baseline"] == shares["new run"]:
        return None
    sides = [side for side in unmarked if unmarked[side]]
    named = "; ".join(
        f"{side}: {', '.join(os.path.basename(p) for p in unmarked[side][:3])}"
        + (f" and {len(unmarked[side]) - 3} more" if len(unmarked[side]) > 3 else "")
        for side in sides
    )
    return (
        f"per-step figures do not compare: traces without ProfilerStep markers ({named}) "
        "count as one step each, whatever they hold; profile both runs with a schedule and "
        "call prof.step() each step"
    )


def _keys_differ(base: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why the two reports' sites are not comparable one to one (an older report, whose
    sites without a source line mixed kinds), else None."""
    from tb_syncfinder.models import SITE_KEYS

    older = [
        side
        for side, report in (("baseline", base), ("new run", new))
        if report.get("site_keys") != SITE_KEYS
    ]
    if not older:
        return None
    return (
        f"the {' and the '.join(older)} report{'s were' if len(older) > 1 else ' was'} written "
        "by another version of tb-syncfinder, which keys sites otherwise (sites without a "
        "source line, prints and f-strings of tensors, boolean-mask assignments, "
        "x.cpu().item(), Jupyter cells, a library's reads under one call of yours): some "
        "sites read as fixed or new though nothing changed; analyse the traces again (or "
        "compare the trace folders) for a like-for-like comparison"
    )


def _unreadable(report: dict[str, Any], side: str) -> list[dict[str, Any]]:
    """The trace files of one run that could not be read, and why."""
    return [
        {"side": side, "path": t.get("path"), "error": t.get("error")}
        for t in report.get("traces") or []
        if isinstance(t, dict) and t.get("error")
    ]


def _cpu_only(report: dict[str, Any]) -> bool:
    """No analysed trace of the run saw device activity or a runtime call (a CPU-only
    profile; an NPU trace has runtime calls but its device rows are not read)."""
    analysed = [t for t in report.get("traces") or [] if isinstance(t, dict) and not t.get("error")]
    if analysed:
        return not any(t.get("has_gpu_activity") or t.get("has_runtime") for t in analysed)
    return not report.get("sites") and bool(report.get("latent_sites"))


def _device_kinds(report: dict[str, Any]) -> set[str]:
    """The kinds of device a run's analysed traces are of: "npu", "cpu" (CPU-only) or
    "gpu" (CUDA, ROCm)."""
    analysed = [t for t in report.get("traces") or [] if isinstance(t, dict) and not t.get("error")]
    return {
        "npu" if t.get("device") == "npu" else "cpu" if t.get("device") in (None, "cpu") else "gpu"
        for t in analysed
    }


def _npu_against_gpu(base: dict[str, Any], new: dict[str, Any]) -> bool:
    """One run on an NPU and none on a GPU, the other on a GPU and none on an NPU (a run
    may also hold CPU-only traces)."""
    a, b = _device_kinds(base), _device_kinds(new)
    return ("npu" in a and "gpu" not in a and "gpu" in b and "npu" not in b) or (
        "npu" in b and "gpu" not in b and "gpu" in a and "npu" not in a
    )


def _unrecorded_npu(report: dict[str, Any]) -> bool:
    """Its analysed traces are NPU traces without any runtime call (torch_npu's default
    profiler level records no AscendCL call): not CPU-only, but no wait is in them."""
    analysed = [t for t in report.get("traces") or [] if isinstance(t, dict) and not t.get("error")]
    return bool(analysed) and all(npu_without_calls(t) for t in analysed)


def _with_latent_as_sites(report: dict[str, Any]) -> dict[str, Any]:
    return dict(
        report,
        sites=list(report.get("sites") or []) + list(report.get("latent_sites") or []),
        latent_sites=[],
    )
