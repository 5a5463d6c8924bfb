"""The terminal report (format ``table``): sites by cost, then a summary, then per-file
errors; and the terminal form of ``compare``.

Pure functions of the report JSON (``Report.to_json()``); the CLI decides on colour (tty,
``NO_COLOR``) and prints. Every line fits in ``WIDTH`` columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tb_syncfinder.catalogue import kind_rank
from tb_syncfinder.models import Report
from tb_syncfinder.query import rank_sites

if TYPE_CHECKING:
    from tb_syncfinder.outputs import RenderOptions, ReportSet

WIDTH = 100

# Column widths of the site table (the kind, operators and advice go on the lines below).
_RANK_W = 3
_LOC_W = 34
_FUNC_W = 16
_COUNT_W = 6
_PER_STEP_W = 6
_TIME_W = 9
_SHARE_W = 6

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"
_RED = "\x1b[31m"
_YELLOW = "\x1b[33m"
_GREEN = "\x1b[32m"
_CYAN = "\x1b[36m"

# A site whose syncs cost this share of the step is shown red, above the second one yellow.
_SHARE_RED = 0.10
_SHARE_YELLOW = 0.02


class _Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, *codes: str) -> str:
        codes = tuple(code for code in codes if code)
        if not self.color or not codes or not text:
            return text
        return "".join(codes) + text + _RESET


def format_us(us: float | None) -> str:
    """A duration in microseconds, in the unit that reads best: 850 us, 1.23 ms, 2.10 s."""
    if us is None:
        return "-"
    magnitude = abs(us)
    if magnitude >= 1_000_000:
        return f"{us / 1_000_000:.2f} s"
    if magnitude >= 1_000:
        return f"{us / 1_000:.2f} ms"
    if magnitude >= 10:
        return f"{us:.0f} us"
    return f"{us:.1f} us"


def format_share(share: float | None) -> str:
    if share is None:
        return "-"
    return f"{share * 100:.1f}%"


def truncate_left(text: str, width: int) -> str:
    """Keep the end of ``text`` (file name and line) when it is too long: ``…/pkg/train.py:12``."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return "…" + text[-(width - 1):]


def truncate_right(text: str, width: int) -> str:
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return text[: width - 1] + "…"


def site_location(site: dict[str, Any]) -> str:
    """``file:line`` of a site, ``*`` marking a line that is only the function's definition."""
    file = site.get("file")
    if not file:
        # No with_stack: the operator (or API call) is the best handle the user has.
        ops = site.get("ops") or []
        apis = site.get("apis") or []
        handle = ops[0] if ops else (apis[0] if apis else "")
        return f"[{handle}] (no stack)" if handle else "(no Python stack)"
    line = site.get("line")
    if line is None:
        return file
    mark = "" if site.get("line_exact") else "*"
    return f"{file}:{line}{mark}"


def _ops_text(site: dict[str, Any]) -> str:
    ops = [op for op in site.get("ops") or [] if op]
    apis = [api for api in site.get("apis") or [] if api]
    if len(ops) > 3:  # outermost (what Python called) and innermost (what synced) matter
        ops = [ops[0], "…", ops[-1]]
    text = " > ".join(ops) if ops else "(no operator)"
    if apis:
        text += f"  [{', '.join(dict.fromkeys(apis))}]"
    return text


def _advice_title(site: dict[str, Any]) -> str:
    advice = site.get("advice") or {}
    return str(advice.get("title") or "").strip()


def _header(style: _Style) -> str:
    cells = [
        "#".rjust(_RANK_W),
        "site (file:line)".ljust(_LOC_W),
        "function".ljust(_FUNC_W),
        "count".rjust(_COUNT_W),
        "/step".rjust(_PER_STEP_W),
        "wait".rjust(_TIME_W),
        "GPU idle".rjust(_TIME_W),
        "share".rjust(_SHARE_W),
    ]
    return style(" ".join(cells), _BOLD)


def _site_lines(rank: int, site: dict[str, Any], style: _Style, latent: bool) -> list[str]:
    share = float(site.get("share_of_step") or 0.0)
    if latent:
        wait = idle = share_text = "-"
    else:
        wait = format_us(site.get("host_wait_us"))
        idle = format_us(site.get("gpu_idle_us"))
        share_text = format_share(share)
    cells = [
        str(rank).rjust(_RANK_W),
        truncate_left(site_location(site), _LOC_W).ljust(_LOC_W),
        truncate_right(site.get("func") or "-", _FUNC_W).ljust(_FUNC_W),
        str(site.get("count") or 0).rjust(_COUNT_W),
        f"{float(site.get('per_step') or 0.0):.1f}".rjust(_PER_STEP_W),
        wait.rjust(_TIME_W),
        idle.rjust(_TIME_W),
        share_text.rjust(_SHARE_W),
    ]
    line = " ".join(cells)
    if not latent and share >= _SHARE_RED:
        line = style(line, _RED)
    elif not latent and share >= _SHARE_YELLOW:
        line = style(line, _YELLOW)
    indent = " " * (_RANK_W + 1)
    detail = truncate_right(f"{site.get('kind', '?')}: {_ops_text(site)}", WIDTH - len(indent))
    lines = [line, indent + style(detail, _DIM)]
    title = _advice_title(site)
    if title:
        lines.append(indent + style(truncate_right("fix: " + title, WIDTH - len(indent)), _GREEN))
    return lines


def _site_table(
    sites: list[dict[str, Any]], style: _Style, top: int | None, latent: bool
) -> list[str]:
    ordered = rank_sites(sites)
    shown = ordered if not top or top <= 0 else ordered[:top]
    lines = [_header(style)]
    for rank, site in enumerate(shown, 1):
        lines.extend(_site_lines(rank, site, style, latent))
    hidden = len(ordered) - len(shown)
    if hidden > 0:
        lines.append(f"... {hidden} more site{'s' if hidden != 1 else ''} (--top 0 shows all)")
    if any(s.get("file") and s.get("line") is not None and not s.get("line_exact")
           for s in shown):
        lines.append(
            truncate_right(
                "* line where the function is defined: the source file was not found "
                "(try --source-root / --path-map)",
                WIDTH,
            )
        )
    return lines


def _label(text: str) -> str:
    return f"  {text:<17}"


def _summary_lines(summary: dict[str, Any], style: _Style) -> list[str]:
    steps = int(summary.get("step_count") or 0)
    count = int(summary.get("sync_count") or 0)
    host_wait = float(summary.get("host_wait_us") or 0.0)
    gpu_idle = float(summary.get("gpu_idle_us") or 0.0)
    lines = [style("Summary", _BOLD)]
    latent = int(summary.get("latent_count") or 0)
    if count == 0 and latent:
        # A CPU-only trace: its cost figures are all zero by nature; what it tells is how
        # many syncs a GPU run of the same code would make.
        per_step = f"{latent / steps:.1f} per step, " if steps else ""
        lines.append(_label("latent syncs") + f"{per_step}{latent} in all: would make the host "
                     "wait on a GPU")
        mean_step = float(summary.get("mean_step_time_us") or 0.0)
        if mean_step > 0:
            lines.append(_label("step time") + f"{format_us(mean_step)} mean on the CPU "
                         "(not a measure of these syncs)")
        return lines
    if steps:
        lines.append(_label("syncs per step") + f"{float(summary.get('syncs_per_step') or 0):.1f}"
                     f"  ({count} over {steps} step{'s' if steps != 1 else ''})")
        lines.append(_label("host wait") + f"{format_us(host_wait / steps)} per step"
                     f"  ({format_us(host_wait)} total)")
        lines.append(_label("GPU idle after") + f"{format_us(gpu_idle / steps)} per step"
                     f"  ({format_us(gpu_idle)} total)")
    else:
        lines.append(_label("syncs") + f"{count}  (no ProfilerStep markers: whole trace)")
        lines.append(_label("host wait") + format_us(host_wait))
        lines.append(_label("GPU idle after") + format_us(gpu_idle))
    share = float(summary.get("share_of_step") or 0.0)
    share_color = _RED if share >= _SHARE_RED else (_YELLOW if share >= _SHARE_YELLOW else "")
    lines.append(_label("share of step") + style(format_share(share), share_color))
    mean_step = float(summary.get("mean_step_time_us") or 0.0)
    estimated = float(summary.get("estimated_step_time_us") or 0.0)
    if mean_step > 0:
        saving = mean_step - estimated if estimated else 0.0
        lines.append(_label("step time") + f"{format_us(mean_step)} mean; "
                     f"~{format_us(estimated or mean_step)} without syncs"
                     f" (-{format_us(max(saving, 0.0))})")
    by_kind = summary.get("by_kind") or {}
    if by_kind:
        kinds = sorted(by_kind.items(), key=lambda kv: kind_rank(kv[0]))
        lines.append(truncate_right(
            _label("by kind") + ", ".join(f"{k} {v}" for k, v in kinds), WIDTH))
    return lines


def _traces_line(traces: list[dict[str, Any]]) -> str:
    ok = [t for t in traces if not t.get("error")]
    devices: dict[str, int] = {}
    for t in ok:
        device = t.get("device") or "unknown"
        devices[device] = devices.get(device, 0) + 1
    text = f"{len(traces)} trace{'s' if len(traces) != 1 else ''}"
    if devices:
        text += " (" + ", ".join(f"{d} {n}" for d, n in sorted(devices.items())) + ")"
    failed = len(traces) - len(ok)
    if failed:
        text += f", {failed} unreadable"
    return text


def _error_lines(traces: list[dict[str, Any]], style: _Style) -> list[str]:
    failed = [t for t in traces if t.get("error")]
    if not failed:
        return []
    lines = [style(f"Errors ({len(failed)} file{'s' if len(failed) != 1 else ''} skipped)",
                   _BOLD, _RED)]
    for t in failed:
        lines.append(f"  {t.get('path')}: {t.get('error')}")
    return lines


def _repair_lines(traces: list[dict[str, Any]], style: _Style) -> list[str]:
    """Traces that were read only after fixing or skipping parts of them: say what, so a
    finding missing from a damaged trace is not taken for an absent sync."""
    repaired = [t for t in traces if t.get("repairs") and not t.get("error")]
    if not repaired:
        return []
    lines = [style(f"Read with repairs ({len(repaired)} file{'s' if len(repaired) != 1 else ''})",
                   _BOLD, _YELLOW)]
    for t in repaired:
        lines.append(f"  {t.get('path')}: {'; '.join(t['repairs'])}")
    return lines


def _report_body(data: dict[str, Any], style: _Style, top: int | None) -> list[str]:
    """Sites, latent sites, summary and errors of one report, without its title line."""
    traces = data.get("traces") or []
    summary = data.get("summary") or {}
    sites = data.get("sites") or []
    latent_sites = data.get("latent_sites") or []

    lines: list[str] = []
    readable = [t for t in traces if not t.get("error")]
    if sites:
        lines.append(style(f"Host-device synchronizations by cost ({len(sites)} sites)", _BOLD))
        lines.extend(_site_table(sites, style, top, latent=False))
        lines.append("")
    elif readable and latent_sites and not any(t.get("has_gpu_activity") for t in readable):
        lines.append(style("CPU-only trace: nothing ran on a GPU, so nothing waited for one.",
                           _BOLD))
        lines.append("")
    elif readable:
        checked = summary.get("checked") or []
        lines.append(style("No host-device synchronizations found.", _BOLD, _GREEN))
        if checked:
            lines.append(truncate_right("  checked: " + ", ".join(checked), WIDTH))
        lines.append("")
    if latent_sites:
        lines.append(style(
            f"Latent syncs ({len(latent_sites)} sites): CPU-only trace, these operators "
            "would synchronize on a GPU", _BOLD))
        lines.extend(_site_table(latent_sites, style, top, latent=True))
        lines.append("")
    if readable:
        lines.extend(_summary_lines(summary, style))
        lines.append("")
    repairs = _repair_lines(traces, style)
    if repairs:
        lines.extend(repairs)
        lines.append("")
    lines.extend(_error_lines(traces, style))
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def _finish(lines: list[str]) -> str:
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(truncate_visible(line) for line in lines) + "\n"


def render_report(report: Report | dict[str, Any], color: bool = False,
                  top: int | None = None) -> str:
    """The report as terminal text: sites by cost, latent findings, summary, errors.

    ``report`` is a ``Report`` or its ``to_json()`` dict; ``top`` limits the sites shown
    (None or 0: all). Returns text ending in a newline; ANSI colours only when ``color``.
    """
    data = report.to_json() if isinstance(report, Report) else report
    style = _Style(color)
    lines = [style("Sync Advisor", _BOLD, _CYAN) + "  " + _traces_line(data.get("traces") or []),
             ""]
    lines.extend(_report_body(data, style, top))
    return _finish(lines)


# Column widths of the per-run overview.
_RUN_W = 30
_OVERVIEW_NUM_W = 11


def _overview_row(name: str, data: dict[str, Any]) -> tuple[list[str], float]:
    """The overview cells of one run, and its share of step (for the colour)."""
    traces = data.get("traces") or []
    summary = data.get("summary") or {}
    readable = [t for t in traces if not t.get("error")]
    steps = int(summary.get("step_count") or 0)
    count = int(summary.get("sync_count") or 0)
    latent = int(summary.get("latent_count") or 0)
    gpu = any(t.get("has_gpu_activity") for t in readable)
    share = float(summary.get("share_of_step") or 0.0)
    # No ProfilerStep markers: the whole trace counts as one step, as the summary says.
    per = max(steps, 1)
    if not readable:
        cells = ["unreadable", "-", "-", "-", "-"]
    elif count == 0 and not gpu and latent:
        # CPU-only: no wait to measure; what matters is how many syncs a GPU run would make.
        cells = [str(steps), "-", "-", "-", f"{latent / per:.1f}"]
    else:
        cells = [
            str(steps),
            f"{count / per:.1f}",
            format_us(float(summary.get("host_wait_us") or 0.0) / per),
            format_share(share),
            f"{latent / per:.1f}" if latent else "-",
        ]
    return cells, share if readable else 0.0


def _overview_lines(runs: list[tuple[str, dict[str, Any]]], style: _Style) -> list[str]:
    header = " ".join([
        "run".ljust(_RUN_W), "steps".rjust(6), "syncs/step".rjust(_OVERVIEW_NUM_W),
        "wait/step".rjust(_OVERVIEW_NUM_W), "share".rjust(7),
        "latent/step".rjust(_OVERVIEW_NUM_W),
    ])
    lines = [style(f"Runs ({len(runs)})", _BOLD), style(header, _BOLD)]
    for name, data in runs:
        cells, share = _overview_row(name, data)
        if cells[0] == "unreadable":
            line = truncate_left(name, _RUN_W).ljust(_RUN_W) + " no trace could be read"
            lines.append(style(line, _RED))
            continue
        line = " ".join([
            truncate_left(name, _RUN_W).ljust(_RUN_W), cells[0].rjust(6),
            cells[1].rjust(_OVERVIEW_NUM_W), cells[2].rjust(_OVERVIEW_NUM_W),
            cells[3].rjust(7), cells[4].rjust(_OVERVIEW_NUM_W),
        ])
        color = _RED if share >= _SHARE_RED else (_YELLOW if share >= _SHARE_YELLOW else "")
        lines.append(style(line, color))
    return lines


def render_runs(runs: list[tuple[str, dict[str, Any]]], color: bool = False,
                top: int | None = None) -> str:
    """Several runs of one logdir: one section per run, then a line per run to compare.

    ``runs`` is ``(run name, report JSON of that run's traces)`` in display order. Each run
    is reported on its own, so per-step figures are over that run's steps only; a single run
    reads exactly as ``render_report``.
    """
    if len(runs) == 1:
        return render_report(runs[0][1], color=color, top=top)
    style = _Style(color)
    all_traces = [t for _, data in runs for t in data.get("traces") or []]
    lines = [style("Sync Advisor", _BOLD, _CYAN) + "  "
             + f"{len(runs)} runs, " + _traces_line(all_traces), ""]
    for name, data in runs:
        heading = f"== {name}: {_traces_line(data.get('traces') or [])} "
        lines.append(style(truncate_right(heading.ljust(WIDTH, "="), WIDTH), _BOLD, _CYAN))
        lines.append("")
        lines.extend(_report_body(data, style, top))
        lines.append("")
    lines.extend(_overview_lines(runs, style))
    return _finish(lines)


def truncate_visible(line: str, width: int = WIDTH) -> str:
    """Cut a plain line to ``width`` columns; coloured lines were sized before colouring."""
    if "\x1b[" in line:
        return line
    return truncate_right(line, width)


_STATUS_STYLE = {"new": _RED, "worse": _RED, "better": _GREEN, "fixed": _GREEN, "same": _DIM}


def _change_text(us: float) -> str:
    sign = "+" if us > 0 else "-" if us < 0 else "±"
    return sign + format_us(abs(us))


def render_compare(result: dict[str, Any], color: bool = False) -> str:
    """``compare.compare(...)`` as terminal text: one line per site, then the step time."""
    style = _Style(color)
    sites = result.get("sites") or []
    counts = result.get("counts") or {}
    lines = [style("Sync Advisor: compare", _BOLD, _CYAN) + "  " + ", ".join(
        f"{n} {status}" for status, n in counts.items() if n)]
    if result.get("note"):
        lines.append(truncate_right(f"  {result['note']}", WIDTH))
    lines.append("")
    header = " ".join([
        "status".ljust(6), "site (file:line)".ljust(_LOC_W), "function".ljust(_FUNC_W),
        "before".rjust(_TIME_W), "after".rjust(_TIME_W), "change".rjust(_TIME_W + 1),
        "/step".rjust(11),
    ])
    lines.append(style(header + "  (cost = wait + idle per step)", _BOLD)
                 if len(header) + 31 <= WIDTH else style(header, _BOLD))
    for row in sites:
        before = row.get("before") or {}
        after = row.get("after") or {}
        location = site_location({"file": row.get("file"), "line": row.get("line"),
                                  "line_exact": True})
        per_step = (f"{float(before.get('per_step') or 0):.1f}>"
                    f"{float(after.get('per_step') or 0):.1f}")
        cells = [
            row.get("status", "?").ljust(6),
            truncate_left(location, _LOC_W).ljust(_LOC_W),
            truncate_right(row.get("func") or "-", _FUNC_W).ljust(_FUNC_W),
            (format_us(before.get("cost_per_step_us")) if before else "-").rjust(_TIME_W),
            (format_us(after.get("cost_per_step_us")) if after else "-").rjust(_TIME_W),
            _change_text(float(row.get("change_us") or 0.0)).rjust(_TIME_W + 1),
            per_step.rjust(11),
        ]
        lines.append(style(" ".join(cells), _STATUS_STYLE.get(row.get("status", ""), "")))
        ops = " > ".join(row.get("ops") or []) or "(no operator)"
        lines.append(" " * 7 + style(truncate_right(f"{row.get('kind')}: {ops}", WIDTH - 7),
                                     _DIM))
    if not sites:
        lines.append("  no synchronization sites in either run")
    latent = [r for r in result.get("latent_sites") or [] if r.get("status") != "same"]
    if latent:
        lines.append("")
        lines.append(style("Latent sites (CPU-only traces) that changed", _BOLD))
        for row in latent:
            lines.append(truncate_right(
                f"  {row.get('status', '?'):<6} {row.get('func') or '-'} "
                f"{' > '.join(row.get('ops') or [])} ({row.get('kind')})", WIDTH))
    lines.append("")
    base = result.get("base") or {}
    new = result.get("new") or {}
    lines.append(style("Summary", _BOLD))
    lines.append(_label("syncs per step") + f"{float(base.get('syncs_per_step') or 0):.1f}"
                 f" -> {float(new.get('syncs_per_step') or 0):.1f}")
    lines.append(_label("share of step") + f"{format_share(base.get('share_of_step'))}"
                 f" -> {format_share(new.get('share_of_step'))}")
    change = result.get("step_time_change_us")
    if change is not None:
        lines.append(_label("mean step time") + f"{format_us(base.get('mean_step_time_us'))}"
                     f" -> {format_us(new.get('mean_step_time_us'))} ({_change_text(change)})")
    return "\n".join(truncate_visible(line) for line in lines) + "\n"


def render(report_set: ReportSet, options: RenderOptions) -> bytes:
    """The registry's ``table`` format: one section per run when there are several."""
    return render_runs(list(report_set.runs.items()), color=options.color,
                       top=options.top).encode("utf-8")
