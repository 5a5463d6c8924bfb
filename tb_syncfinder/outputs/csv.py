"""CSV (format ``csv``): one row per site, real sites by predicted saving then latent ones,
each run's rows after the other under one header with a ``run`` column.

Columns are only ever added, at the end: a reader that takes them by position keeps working.
The ``run`` column came after the first ones (``SITE_COLUMNS``), so a CSV of runs has it
there and the columns added since after it; ``CSV_COLUMNS`` (a single report's) has no
``run``."""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Any

from tb_syncfinder.outputs.text import ranks_text
from tb_syncfinder.query import sites_with_latent

if TYPE_CHECKING:
    from tb_syncfinder.outputs import RenderOptions, ReportSet

SITE_COLUMNS = [
    "rank",
    "latent",
    "file",
    "line",
    "line_exact",
    "def_line",
    "func",
    "kind",
    "ops",
    "apis",
    "count",
    "per_step",
    "host_wait_us",
    "mean_host_wait_us",
    "gpu_idle_us",
    "share_of_step",
    "steps",
    "advice",
    "key",
]
# Added after ``run``: the predicted saving the rows are ranked by (the what-if replay's, or
# the upper bound where a trace could not be replayed: ``saving_method``), over the profiled
# steps and per step; empty for latent sites (nothing was measured in a CPU-only trace).
SAVING_COLUMNS = [
    "predicted_saving_us",
    "predicted_saving_per_step_us",
    "saving_method",
    # In a job: "waiting for rank L" (how many of the site's syncs waited for a late peer).
    "waiting_for",
    # Fixed together with the other sites: what fixing this one then saves per step, and the
    # keys of the sites whose syncs take over its wait when it is fixed alone ("fix together";
    # empty where not replayed or no site does), space-separated.
    "predicted_saving_with_others_per_step_us",
    "fix_with",
    # What fixing it saves per step without the profiler (``report --unprofiled-step-ms``;
    # empty where not asked or not fitted).
    "unprofiled_predicted_saving_per_step_us",
    # A Jupyter cell's site (``file`` is ipykernel's name for its code): the notebook and the
    # cell, as IPython names it ("In[4]", else "cell 3"); ``line`` is the cell's.
    "notebook",
    "notebook_cell",
    # Inside a library the line called (``trainer.train()``): the library's line that synced
    # (``*`` after it where not exact) and its function: the row's fix is about that code.
    "library_line",
    "library_func",
    # Where its syncs ran two or more lines of that library code (``library_lines``): each
    # line and its count, space-separated (``230:4 231:4 292:1``); ``library_line`` is the
    # first of them. Empty otherwise.
    "library_lines",
    # In a job whose ranks do not all sync here alike (``ranks``): each rank that did, its
    # syncs and its own steps, space-separated (``0:5/5``: 5 syncs in rank 0's 5 steps).
    # Empty where every rank synced alike, or the run is no job.
    "ranks",
]
CSV_COLUMNS = [*SITE_COLUMNS, *SAVING_COLUMNS]
RUNS_CSV_COLUMNS = [*SITE_COLUMNS, "run", *SAVING_COLUMNS]


def _ranks_cell(site: dict[str, Any]) -> str:
    """The ``ranks`` column: where the text report splits the site by rank (``ranks_text``)."""
    if not ranks_text(site):
        return ""
    return " ".join(
        f"{entry.get('rank')}:{entry.get('count')}/{entry.get('steps')}"
        for entry in site.get("ranks") or []
        if isinstance(entry, dict)
    )


def _advice_title(site: dict[str, Any]) -> str:
    return str((site.get("advice") or {}).get("title") or "")


def to_csv(report_json: dict[str, Any]) -> str:
    """One row per site (real sites by predicted saving, then latent ones), with a header
    row: ``CSV_COLUMNS``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows([*row, *saving] for row, saving in _csv_rows(report_json))
    return buffer.getvalue()


def runs_to_csv(runs: dict[str, dict[str, Any]]) -> str:
    """The CSV of each run's own report, one after the other under one header
    (``RUNS_CSV_COLUMNS``: the site columns, ``run``, then the columns added since; none
    moves). The CLI and the plugin's export both write this, for one run or several."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(RUNS_CSV_COLUMNS)
    for name, report_json in runs.items():
        writer.writerows([*row, name, *saving] for row, saving in _csv_rows(report_json))
    return buffer.getvalue()


def _csv_rows(report_json: dict[str, Any]) -> list[tuple[list[Any], list[Any]]]:
    """Per site, its ``SITE_COLUMNS`` cells and its ``SAVING_COLUMNS`` cells."""
    rows = []
    for rank, (site, latent) in enumerate(sites_with_latent(report_json), start=1):
        latent = bool(latent or site.get("latent"))
        # Not predicted where the device's idle time is unread (torch_npu): the host wait
        # alone bounds nothing, so no figure rather than one that reads as a bound.
        predicted = not latent and site.get("gpu_idle_measured") is not False
        saving = (
            ["", "", "" if latent else site.get("saving_method") or ""]
            if not predicted
            else [
                _number(site.get("predicted_saving_us")),
                _number(site.get("predicted_saving_per_step_us")),
                site.get("saving_method") or "",
            ]
        ) + [
            site.get("waiting_for") or "",
            "" if latent else _number(site.get("predicted_saving_with_others_per_step_us")),
            " ".join(_texts(site.get("fix_with"))),
            "" if latent else _number(site.get("unprofiled_predicted_saving_per_step_us")),
            *_cell_cells(site.get("cell")),
            *_library_cells(site.get("library")),
            " ".join(
                f"{entry.get('line')}:{entry.get('count')}"
                for entry in site.get("library_lines") or []
                if isinstance(entry, dict)
            ),
            _ranks_cell(site),
        ]
        cells = (
            [
                rank,
                int(latent),
                site.get("file") or "",
                "" if site.get("line") is None else site.get("line"),
                int(bool(site.get("line_exact"))),
                "" if site.get("def_line") is None else site.get("def_line"),
                site.get("func") or "",
                site.get("kind") or "",
                " > ".join(_texts(site.get("ops"))),
                " ".join(dict.fromkeys(_texts(site.get("apis")))),
                site.get("count") or 0,
                _number(site.get("per_step")),
                # A latent row measured no wait (CPU-only, or torch_npu without AscendCL
                # calls): blank, as its saving is, not a 0 that reads as measured.
                "" if latent else _number(site.get("host_wait_us")),
                "" if latent else _number(site.get("mean_host_wait_us")),
                # Blank where not measured (torch_npu's device rows unread), not a 0.
                ""
                if latent or site.get("gpu_idle_measured") is False
                else _number(site.get("gpu_idle_us")),
                "" if latent else _number(site.get("share_of_step"), 6),
                " ".join(_texts(site.get("steps"))),
                _advice_title(site),
                site.get("key") or "",
            ],
            saving,
        )
        rows.append(cells)
    return rows


def _cell_cells(cell: Any) -> list[str]:
    if not isinstance(cell, dict) or not cell.get("notebook"):
        return ["", ""]
    count = cell.get("execution_count")
    return [
        str(cell["notebook"]),
        f"In[{count}]" if count is not None else f"cell {cell.get('index')}",
    ]


def _library_cells(library: Any) -> list[str]:
    if not isinstance(library, dict) or not library.get("file"):
        return ["", ""]
    from tb_syncfinder.outputs.text import library_line_shown

    # The line the table, SARIF and the tab name (its function's where not exact).
    mark = "" if library.get("line_exact") else "*"
    return [
        f"{library['file']}:{library_line_shown(library)}{mark}",
        str(library.get("func") or ""),
    ]


def _texts(values: Any) -> list[str]:
    """The non-None entries of a list field as strings (a hand-edited or older report may
    hold nulls in lists that the model types as ``list[str]``)."""
    return [str(v) for v in values or [] if v is not None]


def _number(value: Any, digits: int = 3) -> str:
    if value is None:
        return ""
    return f"{float(value):.{digits}f}".rstrip("0").rstrip(".") or "0"


def render(report_set: ReportSet, options: RenderOptions) -> bytes:
    return runs_to_csv(report_set.runs).encode("utf-8")
