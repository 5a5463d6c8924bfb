"""Every output format, in one registry the CLI and the plugin both use.

A format is a module with ``render(report_set, options) -> bytes``, registered here with its
media type and file extension. Its input is a ``ReportSet``: the report JSON of every
selected trace merged, and each run's own (the CLI's selected runs, or the plugin's one
selected run). Renderers are pure functions of that JSON: the plugin renders from its cache
without re-analysing, and analysis never renders.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import msgspec

from tb_syncfinder.models import RunsReport


class ReportSet(msgspec.Struct):
    """What an output renders: the merged report JSON and each run's own, in order."""

    report: dict[str, Any]
    runs: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)

    @classmethod
    def from_runs(cls, runs_report: RunsReport) -> ReportSet:
        runs = {name: report.to_json() for name, report in runs_report.runs.items()}
        merged = next(iter(runs.values())) if len(runs) == 1 else runs_report.report.to_json()
        return cls(merged, runs)

    def without_latent(self) -> ReportSet:
        """The same reports without latent findings (``report --no-latent``)."""

        def strip(data: dict[str, Any]) -> dict[str, Any]:
            return {**data, "latent": [], "latent_sites": []}

        return ReportSet(strip(self.report), {k: strip(v) for k, v in self.runs.items()})


class RenderOptions(msgspec.Struct, frozen=True):
    color: bool = False  # ANSI colours (table)
    top: int | None = None  # sites shown per section (table); None: all
    source_root: str | None = None  # SARIF URIs are made relative to it (default: cwd)


class OutputFormat(msgspec.Struct, frozen=True):
    name: str
    media_type: str
    extension: str
    module: str  # tb_syncfinder.outputs.<module> holds its render()
    description: str

    @property
    def render(self) -> Callable[[ReportSet, RenderOptions], bytes]:
        # Imported on use: a CLI run that prints a table never loads the SARIF code.
        return importlib.import_module(f"tb_syncfinder.outputs.{self.module}").render


FORMATS: dict[str, OutputFormat] = {
    f.name: f
    for f in (
        OutputFormat(
            "table",
            "text/plain; charset=utf-8",
            ".txt",
            "text",
            "sites by cost and a summary, for a terminal",
        ),
        OutputFormat(
            "json", "application/json", ".json", "json", "the report, schema tb_syncfinder.report/1"
        ),
        OutputFormat("csv", "text/csv", ".csv", "csv", "one row per site"),
        OutputFormat(
            "sarif", "application/sarif+json", ".sarif", "sarif", "SARIF 2.1.0 for code scanning"
        ),
        OutputFormat(
            "trace",
            "application/json",
            ".sync_advisor.pt.trace.json",
            "annotated_trace",
            "the trace with a Sync Advisor track, for Perfetto (one trace only)",
        ),
    )
}


def render(name: str, report_set: ReportSet, options: RenderOptions | None = None) -> bytes:
    """Render ``report_set`` in format ``name``; KeyError for an unknown format, ValueError
    when the set does not fit the format (the annotated trace needs one trace)."""
    return FORMATS[name].render(report_set, options or RenderOptions())
