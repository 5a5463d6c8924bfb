"""The original trace with an added "Sync Advisor" track (format ``trace``), which
chrome://tracing and Perfetto show above the others. Needs exactly one analysed trace."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from tb_syncfinder.outputs import RenderOptions, ReportSet


def load_trace_json(trace_path: str) -> Any:
    """The trace as JSON, read with the reader's gzip detection and repairs (so whatever the
    analysis read can be annotated). Raises ``ValueError`` naming the file and the reason
    when it cannot be read."""
    from tb_syncfinder.discovery import open_trace_bytes
    from tb_syncfinder.reader import TraceReadError, decode_document

    try:
        return decode_document(trace_path, open_trace_bytes(trace_path))[0]
    except TraceReadError as exc:
        raise ValueError(f"{trace_path}: not valid JSON ({exc.reason})") from exc
    except OSError as exc:  # gone or unreadable since it was analysed
        raise ValueError(f"{trace_path}: cannot be read ({exc.strerror or exc})") from exc


def _events_list(trace: Any, trace_path: str) -> list[Any]:
    if isinstance(trace, list):  # the JSON Array Format of the Trace Event spec
        return trace
    if isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list):
        return trace["traceEvents"]
    raise ValueError(f"{trace_path}: no traceEvents list in the trace")


def _free_pid(events: list[Any]) -> int:
    used = [e.get("pid") for e in events if isinstance(e, dict)]
    numbers = [p for p in used if isinstance(p, int) and not isinstance(p, bool)]
    return max(numbers, default=0) + 1


def _source_text(sync: dict[str, Any]) -> str:
    source = sync.get("source") or {}
    if source.get("file"):
        return _place(source)
    for frame in sync.get("stack") or []:
        if isinstance(frame, dict) and frame.get("user") and frame.get("file"):
            return _place(frame)
    return ""


def _place(where: dict[str, Any]) -> str:
    """``file:line``; a Jupyter cell's as ``train.ipynb In[4]:6`` (ipykernel's file for the
    cell never exists)."""
    from tb_syncfinder.outputs.text import cell_name

    cell = where.get("cell")
    file = f"{cell['notebook']} {cell_name(cell)}" if cell else str(where["file"])
    line = where.get("line")
    return f"{file}:{line}" if line is not None else file


def annotate_trace(
    trace_path: str, syncs: list[dict[str, Any]], sites: list[dict[str, Any]] | None = None
) -> bytes:
    """The original trace plus a "Sync Advisor" process with one slice per finding.

    Thread "host wait" spans each sync's blocking calls; thread "GPU idle after" spans the
    device bubble that followed. ``args`` carry kind, op, api, source and the advice (taken
    from ``sites`` by ``site_key`` when given). Returns uncompressed JSON bytes.
    """
    trace = load_trace_json(trace_path)
    events = _events_list(trace, trace_path)
    pid = _free_pid(events)
    advice_by_site = {s.get("key"): s.get("advice") or {} for s in sites or []}
    wait_tid, idle_tid = 1, 2
    added: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "Sync Advisor"}},
        # Negative sort index: Perfetto and chrome://tracing put the track first.
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": pid,
            "tid": wait_tid,
            "args": {"name": "host wait"},
        },
        {
            "ph": "M",
            "name": "thread_name",
            "pid": pid,
            "tid": idle_tid,
            "args": {"name": "GPU idle after"},
        },
    ]
    for sync in syncs:
        if sync.get("latent"):
            continue  # a CPU-only trace has no wait to show
        advice = advice_by_site.get(sync.get("site_key")) or {}
        label = sync.get("op") or sync.get("api") or "sync"
        args = {
            "kind": sync.get("kind"),
            "op": sync.get("op"),
            "api": sync.get("api"),
            "source": _source_text(sync),
            "advice": advice.get("title") or "",
            "host_wait_us": sync.get("host_wait_us"),
            "gpu_idle_after_us": sync.get("gpu_idle_after_us"),
            "step": sync.get("step"),
            "id": sync.get("id"),
        }
        start = float(sync.get("ts_us") or 0.0)
        wait = max(float(sync.get("host_wait_us") or 0.0), 0.0)
        end = float(sync.get("end_us") or 0.0) or start + wait
        added.append(
            {
                "ph": "X",
                "cat": "sync_advisor",
                "name": f"{sync.get('kind')}: {label}",
                "pid": pid,
                "tid": wait_tid,
                "ts": start,
                "dur": max(end - start, wait),
                "args": args,
            }
        )
        idle = max(float(sync.get("gpu_idle_after_us") or 0.0), 0.0)
        if idle > 0:
            added.append(
                {
                    "ph": "X",
                    "cat": "sync_advisor",
                    "name": f"GPU idle after {label}",
                    "pid": pid,
                    "tid": idle_tid,
                    "ts": end,
                    "dur": idle,
                    "args": args,
                }
            )
    events.extend(added)
    return msgspec.json.encode(trace)


def render(report_set: ReportSet, options: RenderOptions) -> bytes:
    """The one readable trace of the set, annotated. ValueError when the set holds another
    number of readable traces."""
    report = report_set.report
    readable = [t for t in report.get("traces") or [] if not t.get("error")]
    if len(readable) != 1:
        raise ValueError(
            f"the annotated trace needs exactly one trace; {len(readable)} were analysed: "
            "pick one (in the dashboard: one worker and span; on the command line: one "
            "trace file)"
        )
    trace_path = readable[0]["path"]
    syncs = [s for s in report.get("syncs") or [] if s.get("trace") in ("", trace_path)]
    return annotate_trace(trace_path, syncs, report.get("sites"))
