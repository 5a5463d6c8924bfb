"""The job section of the terminal table (issue 17): for a run that is a multi-rank job,
its ranks and issues, per rank the host wait beside the collective wait and lateness, the
rank x step lateness grid, the top sites by cost to the job with rank and line, and the
lateness that no sync explains. Laid out with ``text``'s ``Column`` tables."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tb_syncfinder.outputs.text import _DIM, Column, _layout, format_us, wrap

_INDENT = "  "


# Past this many ranks the per-rank tables show the ranks that matter (late, or that made
# others wait) and say how many they leave out: a 300-rank job printed 600 rows.
RANK_ROWS = 16


def _rank_word(ranks: list[int]) -> str:
    # "ranks 1 in the traces, missing 0" read as "none missing" (a CLI review).
    return "rank" if len(ranks) == 1 else "ranks"


def _ranks_text(ranks: list[int]) -> str:
    """``0-10, 12-298, 300-319``: runs of four or more consecutive ranks as ranges (a few
    ranks read better listed: ``0, 1, 2``)."""
    if not ranks:
        return "none"
    parts: list[str] = []
    ordered = sorted(ranks)
    start = prev = ordered[0]
    for rank in [*ordered[1:], None]:
        if rank is not None and rank == prev + 1:
            prev = rank
            continue
        if prev - start >= 3:
            parts.append(f"{start}-{prev}")
        else:
            parts.extend(str(r) for r in range(start, prev + 1))
        if rank is not None:
            start = prev = rank
    return ", ".join(parts)


def _ranks_shown(totals: list[dict[str, Any]], top: int | None) -> list[int]:
    """The ranks the per-rank tables show: all up to ``RANK_ROWS`` (or ``top``), else the
    latest first, then those whose lateness made the others wait most."""
    limit = max(top or RANK_ROWS, 1)
    if len(totals) <= limit:
        return [int(row["rank"]) for row in totals]
    ordered = sorted(
        totals,
        key=lambda row: (
            -float(row.get("late_us") or 0.0),
            -float(row.get("caused_wait_us") or 0.0),
            int(row["rank"]),
        ),
    )
    return sorted(int(row["rank"]) for row in ordered[:limit])


def _site_location(site: dict[str, Any]) -> str:
    """As the sites table says it: a line that is not the syncing call's marked "*"."""
    file = site.get("file") or "?"
    line = site.get("line")
    if line is None:
        return file
    return f"{file}:{line}{'*' if site.get('line_exact') is False else ''}"


def _table(
    columns: list[Column], rows: list[Any], width: int, style: Callable[..., str], bold: str
) -> list[str]:
    layout = _layout(columns, rows, width - len(_INDENT))
    lines = [_INDENT + style(layout.header(), bold)]
    for index in range(len(rows)):
        lines.extend(_INDENT + line for line in layout.row(index))
        moved = layout.below(index)
        if moved:
            lines.extend(wrap(", ".join(moved), width, _INDENT * 2, _INDENT))
    return lines


def _rank_columns(matched: bool = True) -> list[Column]:
    """``matched``: whether any collective was matched across ranks; without one the
    collectives' columns measured nothing ("-", not a "0 us" beside a rank's collective
    wait sites)."""

    def us(key: str, of_matched: bool = False) -> Callable[[dict[str, Any]], str]:
        if of_matched and not matched:
            return lambda row: "-"
        return lambda row: format_us(float(row.get(key) or 0.0))

    return [
        Column("rank", lambda row: str(row["rank"])),
        Column("worker", lambda row: row.get("worker") or "-", align="<", wrap=True),
        Column("host wait", us("sync_wait_us")),
        Column("blocking", us("blocking_wait_us"), drop=2),
        Column("collective wait", us("wait_in_collectives_us", of_matched=True)),
        Column("late", us("late_us", of_matched=True)),
        Column("others waited", us("caused_wait_us", of_matched=True), drop=1),
    ]


def _grid_columns(steps: list[int]) -> list[Column]:
    def cell(step: int) -> Callable[[tuple[int, dict[int, dict[str, Any]]]], str]:
        def text(row: tuple[int, dict[int, dict[str, Any]]]) -> str:
            found = row[1].get(step)
            if found is None or found.get("collectives") == 0:
                return "."
            late = float(found.get("late_us") or 0.0)
            wait = float(found.get("wait_us") or 0.0)
            if late > 0:
                return "+" + format_us(late)
            return "-" + format_us(wait) if wait > 0 else "0"

        return text

    return [Column("rank", lambda row: str(row[0]))] + [Column(f"step {s}", cell(s)) for s in steps]


def _site_columns() -> list[Column]:
    return [
        Column("#", lambda row: str(row[0])),
        Column("rank", lambda row: str(row[1]["rank"])),
        Column("site (file:line)", lambda row: _site_location(row[1]), align="<", wrap=True),
        Column("op", lambda row: row[1].get("op") or "-", align="<", drop=2),
        Column("late colls", lambda row: str(row[1].get("late_collectives") or 0), drop=1),
        # The part of the others' wait this sync explains (the ranks table's "others
        # waited" is all of the rank's lateness times its peers).
        Column("wait it caused", lambda row: format_us(float(row[1]["caused_wait_us"]))),
        Column(
            "job saves/step",
            lambda row: (
                format_us(float(row[1]["job_saving_per_step_us"]))
                + ("*" if row[1].get("bound") else "")
            ),
        ),
    ]


def job_lines(
    data: dict[str, Any],
    style: Callable[..., str],
    width: int,
    bold: str = "",
    warn: str = "",
    top: int | None = None,
) -> list[str]:
    """The job section of one run's report JSON; no lines when the run is not a job."""
    job = data.get("job")
    if not job:
        return []
    lines: list[str] = []
    if job.get("world_size"):
        head = (
            f"Job: world size {job['world_size']} ({job.get('backend') or 'backend unknown'}), "
            f"{_rank_word(job.get('ranks') or [])} {_ranks_text(job.get('ranks') or [])} in "
            "the traces"
            + (
                f"; no trace of {_rank_word(job['missing_ranks'])} "
                f"{_ranks_text(job['missing_ranks'])}"
                if job.get("missing_ranks")
                else ""
            )
        )
        lines.extend(style(line, bold) for line in wrap(head, width, "", _INDENT))
        lines.extend(
            wrap(
                f"{job.get('collective_count', 0)} collectives matched, "
                f"{job.get('late_collective_count', 0)} with a late rank; noise floor "
                f"{format_us(float(job.get('noise_us') or 0.0))} (a rank later than this to "
                "a collective is late)",
                width,
                _INDENT,
                _INDENT,
            )
        )
    else:
        lines.append(style("Job: no job could be formed from these traces", bold))
    for issue in job.get("issues") or []:
        marker = "!" if issue.get("severity") == "warning" else "i"
        lines.extend(
            style(line, warn if marker == "!" else "")
            for line in wrap(
                f"{marker} [{issue.get('code')}] {issue.get('message')}", width, _INDENT, _INDENT
            )
        )
    totals = job.get("rank_totals") or []
    shown_ranks = set(_ranks_shown(totals, top))
    left_out = len(totals) - len(shown_ranks)
    if totals:
        lines.append("")
        lines.append(style("Ranks: host wait in syncs beside wait in collectives", bold))
        rows = [row for row in totals if int(row["rank"]) in shown_ranks]
        matched = bool(job.get("collective_count", 1))  # absent: a report from before it
        lines.extend(_table(_rank_columns(matched), rows, width, style, bold))
        lines.extend(
            style(line, _DIM)
            for line in wrap(
                "host wait: in the rank's syncs; blocking: in blocking Python calls that are "
                "no sync (time.sleep, a lock, a queue); collective wait: in collectives "
                "matched across ranks, waiting for a peer; late: how late the rank came to "
                "them; others waited: what its lateness cost the other ranks"
                + ("" if matched else "; -: no collective matched across ranks, none measured"),
                width,
                _INDENT,
                _INDENT,
            )
        )
        if left_out:
            lines.append(
                f"{_INDENT}... {left_out} more ranks, none later than these "
                "(--top N shows more; --json has every rank)"
            )
    rank_steps = job.get("rank_steps") or []
    # No collective matched across ranks: every cell would be "." (none matched).
    if rank_steps and job.get("collective_count", 1):
        steps = sorted({int(r["step"]) for r in rank_steps})
        grid: dict[int, dict[int, dict[str, Any]]] = {}
        for row in rank_steps:
            if not totals or int(row["rank"]) in shown_ranks:
                grid.setdefault(int(row["rank"]), {})[int(row["step"])] = row
        lines.append("")
        title = (
            "Lateness per rank and step (+ held the others, - waited for a peer, . none of "
            "the rank's collectives matched in that step)"
        )
        lines.extend(style(line, bold) for line in wrap(title, width, "", _INDENT))
        lines.extend(_table(_grid_columns(steps), sorted(grid.items()), width, style, bold))
        if totals and left_out:
            lines.append(f"{_INDENT}... the same {left_out} ranks left out")
    # A site that cost the job nothing (it made no rank late) is no cause to list.
    sites = [
        s
        for s in job.get("sites") or []
        if float(s.get("caused_wait_us") or 0.0) > 0 or float(s.get("job_saving_us") or 0.0) > 0
    ]
    if sites:
        shown = sites[:top] if top else sites
        lines.append("")
        # Of the sites that cost the job something: one that cost nothing is never listed,
        # so "1 of 2" read as one hidden (--top 0 did not show it). The JSON holds the top
        # sites only (``jobs.TOP_SITES``), costliest first: where every one it holds cost
        # something, how many of the rest did is not known, and the count is of all.
        listed = job.get("sites") or []
        count = int(job.get("site_count", len(listed)) or 0)
        if len(listed) < count and len(sites) == len(listed):
            of = f"{count}"
        else:
            free = count - len(sites)
            of = f"{len(sites)}" + (f"; {free} more cost the job nothing" if free > 0 else "")
        lines.append(style(f"Top sites by cost to the job ({len(shown)} of {of})", bold))
        lines.extend(_table(_site_columns(), list(enumerate(shown, 1)), width, style, bold))
        if any(s.get("bound") for s in shown):
            lines.extend(
                wrap(
                    "* upper bound: the host wait between the rank's previous "
                    "collective and the late one, capped by the lateness",
                    width,
                    _INDENT,
                    _INDENT,
                )
            )
    late = job.get("lateness") or {}
    if late.get("late_us"):
        lines.append("")
        lines.extend(
            wrap(
                f"Lateness {format_us(late['late_us'])} in all: explained by host waits "
                f"{format_us(late.get('explained_us') or 0.0)}, carried in from before the "
                f"window {format_us(late.get('carried_in_us') or 0.0)}, not explained by host "
                f"waits (data loading, Python, GPU compute) "
                f"{format_us(late.get('not_explained_us') or 0.0)}",
                width,
                "",
                _INDENT,
            )
        )
    # Another job of the run whose ranks compare (two jobs' traces in one folder): in full
    # after the main one, where a line named it and its late rank was in the JSON alone.
    for other in job.get("other_jobs") or []:
        if len(other.get("ranks") or []) < 2:
            continue
        start = job_start(other.get("key"))
        lines.append("")
        lines.append(
            style(f"Another job in this run{f', recorded from {start}' if start else ''}:", bold)
        )
        lines.extend(job_lines({"job": other}, style, width, bold, warn, top))
    return lines


def job_start(key: Any) -> str | None:
    """When a job's window began, from its key (``world 4 from 1795762674.612556s
    (gloo)``), as UTC; None where the key says no time."""
    import re
    from datetime import datetime, timezone

    found = re.search(r"from (\d+(?:\.\d+)?)s", str(key or ""))
    if not found:
        return None
    try:
        when = datetime.fromtimestamp(float(found.group(1)), tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")
