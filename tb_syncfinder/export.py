"""Exports of a report: CSV (one row per site), SARIF 2.1.0, and the original trace with an
added "Sync Advisor" track that chrome://tracing and Perfetto show above the others.

All functions take the report JSON (``Report.to_json()``) or parts of it, so the plugin can
export from its cache without the dataclasses.
"""

from __future__ import annotations

import csv
import io
import json
import os
import posixpath
import re
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any
from urllib.parse import quote

import msgspec

from tb_syncfinder import __version__, catalogue

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
INFORMATION_URI = "https://github.com/tb-syncfinder/tb-syncfinder"

CSV_COLUMNS = [
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

# SARIF levels: a site costing at least this share of the step is an error, others warnings.
_ERROR_SHARE = 0.10


def _sites_with_latent(report_json: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    from tb_syncfinder.render import sorted_sites

    rows = [(site, False) for site in sorted_sites(report_json.get("sites") or [])]
    rows += [(site, True) for site in sorted_sites(report_json.get("latent_sites") or [])]
    return rows


def _advice_title(site: dict[str, Any]) -> str:
    return str((site.get("advice") or {}).get("title") or "")


def to_csv(report_json: dict[str, Any]) -> str:
    """One row per site (real sites by cost, then latent ones), with a header row."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows(_csv_rows(report_json))
    return buffer.getvalue()


def runs_to_csv(runs: dict[str, dict[str, Any]]) -> str:
    """The CSV of each run's own report, one after the other under one header, with a last
    ``run`` column added (the other columns keep their names and places). The CLI and the
    plugin's export both write this, for one run or several."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, "run"])
    for name, report_json in runs.items():
        writer.writerows([*row, name] for row in _csv_rows(report_json))
    return buffer.getvalue()


def _csv_rows(report_json: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for rank, (site, latent) in enumerate(_sites_with_latent(report_json), start=1):
        rows.append([
            rank,
            int(latent or bool(site.get("latent"))),
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
            _number(site.get("host_wait_us")),
            _number(site.get("mean_host_wait_us")),
            _number(site.get("gpu_idle_us")),
            _number(site.get("share_of_step"), 6),
            " ".join(_texts(site.get("steps"))),
            _advice_title(site),
            site.get("key") or "",
        ])
    return rows


def _texts(values: Any) -> list[str]:
    """The non-None entries of a list field as strings (a hand-edited or older report may
    hold nulls in lists that the model types as ``list[str]``)."""
    return [str(v) for v in values or [] if v is not None]


def _number(value: Any, digits: int = 3) -> str:
    if value is None:
        return ""
    return f"{float(value):.{digits}f}".rstrip("0").rstrip(".") or "0"


def sarif_uri(file: str, root: str | None = None) -> str:
    """A relative, forward-slash, percent-encoded URI for a source path from a trace.

    Absolute paths under ``root`` (default: the current directory) become relative to it;
    other absolute paths lose their anchor (``/``, ``C:\\``): code scanning tools resolve
    results against the repository root, never against the recording machine's disk.
    """
    posix = file.replace("\\", "/")
    is_windows = bool(re.match(r"^[A-Za-z]:/", posix))
    base = os.path.abspath(root if root is not None else os.getcwd()).replace("\\", "/")
    if posix.startswith("/") and (posix == base or posix.startswith(base.rstrip("/") + "/")):
        posix = posix[len(base.rstrip("/")) + 1:]
    elif is_windows:
        posix = "/".join(PureWindowsPath(file).parts[1:])
    elif posix.startswith("/"):
        posix = "/".join(PurePosixPath(posix).parts[1:])
    # "." and ".." components: a URI that climbs out of the repository root (or names the
    # root itself) would not be resolvable by code scanning tools.
    parts = [p for p in posixpath.normpath(posix).split("/") if p not in ("", ".", "..")]
    return quote("/".join(parts), safe="/-_.~")


def _message(site: dict[str, Any], latent: bool) -> str:
    from tb_syncfinder.render import format_share, format_us

    ops = " > ".join(_texts(site.get("ops"))) or "a CUDA API call"
    kind = site.get("kind") or "sync"
    count = int(site.get("count") or 0)
    if latent:
        text = (f"{ops} ({kind}) would synchronize the host with the GPU "
                f"({count} call{'s' if count != 1 else ''} in a CPU-only trace).")
    else:
        text = (f"{ops} ({kind}) synchronizes the host with the GPU: {count} "
                f"time{'s' if count != 1 else ''} ({float(site.get('per_step') or 0):.1f} per "
                f"step), host wait {format_us(site.get('host_wait_us'))}, GPU idle after "
                f"{format_us(site.get('gpu_idle_us'))}, "
                f"{format_share(site.get('share_of_step'))} of step time.")
    title = _advice_title(site)
    if title:
        text += f" Fix: {title}."
        advice_text = str((site.get("advice") or {}).get("text") or "").strip()
        if advice_text:
            text += f" {advice_text}"
    return text


def _rules(kinds_used: list[str]) -> list[dict[str, Any]]:
    rules = []
    for kind in kinds_used:
        record = catalogue.kind(kind)
        short, full = record.summary, record.description
        rules.append({
            "id": kind,
            "name": "".join(part.capitalize() for part in kind.split("_")),
            "shortDescription": {"text": short},
            "fullDescription": {"text": full},
            "defaultConfiguration": {"level": "warning"},
            "properties": {"tags": ["performance", "cuda", "synchronization"]},
        })
    return rules


def to_sarif(report_json: dict[str, Any], root: str | None = None) -> dict[str, Any]:
    """The report's sites as a SARIF 2.1.0 log, for code scanning and editor annotations.

    One result per site that has a source file and line (latent sites are notes); one rule
    per kind used. ``root`` is the directory absolute source paths are made relative to.
    """
    results: list[dict[str, Any]] = []
    located: list[tuple[dict[str, Any], bool]] = [
        (site, latent) for site, latent in _sites_with_latent(report_json)
        if site.get("file") and isinstance(site.get("line"), int) and site["line"] >= 1
    ]
    kinds_used = sorted({site.get("kind") or "unknown" for site, _ in located},
                        key=lambda k: (catalogue.kind_rank(k), k))
    rule_index = {kind: i for i, kind in enumerate(kinds_used)}
    for site, latent in located:
        kind = site.get("kind") or "unknown"
        share = float(site.get("share_of_step") or 0.0)
        level = "note" if latent else ("error" if share >= _ERROR_SHARE else "warning")
        result: dict[str, Any] = {
            "ruleId": kind,
            "ruleIndex": rule_index[kind],
            "level": level,
            "message": {"text": _message(site, latent)},
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": {
                        "uri": sarif_uri(str(site["file"]), root),
                        "uriBaseId": "%SRCROOT%",
                    },
                    "region": {"startLine": int(site["line"])},
                },
            }],
            "partialFingerprints": {"syncSite/v1": str(site.get("key") or "")},
            "properties": {
                "count": int(site.get("count") or 0),
                "perStep": float(site.get("per_step") or 0.0),
                "hostWaitUs": float(site.get("host_wait_us") or 0.0),
                "gpuIdleUs": float(site.get("gpu_idle_us") or 0.0),
                "shareOfStep": share,
                "ops": _texts(site.get("ops")),
                "lineExact": bool(site.get("line_exact")),
                "latent": latent,
            },
        }
        results.append(result)
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {
                "driver": {
                    "name": "tb-syncfinder",
                    "version": __version__,
                    "informationUri": INFORMATION_URI,
                    "rules": _rules(kinds_used),
                },
            },
            "originalUriBaseIds": {
                "%SRCROOT%": {"description": {"text": "The directory the profiled code ran in."}},
            },
            "results": results,
        }],
    }


# --- the annotated trace -------------------------------------------------------------

_NA_PATTERN = re.compile(rb'(?<!")N/A(?!")')
# A backslash that does not start a valid JSON escape (Windows paths written raw); an
# escaped backslash pair is matched first so its second half is not taken for a bad one.
_ESCAPES = re.compile(rb'\\\\|\\(?!["\\/bfnrtu])')


def _fix_escape(match: re.Match[bytes]) -> bytes:
    return match.group(0) if len(match.group(0)) == 2 else b"\\\\"


def load_trace_json(trace_path: str) -> Any:
    """The trace as JSON, with torch-tb-profiler's fixes and the Windows-path fix.

    gzip by magic bytes (not by name), unquoted ``N/A`` values quoted, raw backslashes
    escaped. Raises ``ValueError`` naming the file and the reason when nothing works.
    """
    from tb_syncfinder.discovery import open_trace_bytes
    from tb_syncfinder.reader import TraceReadError, gunzip

    raw = open_trace_bytes(trace_path)
    try:
        # The reader's gzip handling, so that whatever the analysis read can be annotated.
        raw = gunzip(trace_path, raw)
    except TraceReadError as exc:
        raise ValueError(str(exc)) from exc
    try:
        return msgspec.json.decode(raw)
    except UnicodeDecodeError:
        # Invalid UTF-8 inside a string (a Latin-1 path): the reader replaces such bytes
        # with U+FFFD too.
        raw = raw.decode("utf-8", "replace").encode("utf-8")
    except msgspec.DecodeError:
        pass
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as first_error:
        fixed = _ESCAPES.sub(_fix_escape, _NA_PATTERN.sub(b'"N/A"', raw))
        try:
            return json.loads(fixed, strict=False)
        except ValueError as exc:
            raise ValueError(f"{trace_path}: not valid JSON ({first_error})") from exc


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
        line = source.get("line")
        return f"{source['file']}:{line}" if line is not None else str(source["file"])
    for frame in sync.get("stack") or []:
        if isinstance(frame, dict) and frame.get("user") and frame.get("file"):
            line = frame.get("line")
            return f"{frame['file']}:{line}" if line is not None else str(frame["file"])
    return ""


def annotate_trace(trace_path: str, syncs: list[dict[str, Any]],
                   sites: list[dict[str, Any]] | None = None) -> bytes:
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
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
         "args": {"name": "Sync Advisor"}},
        # Negative sort index: Perfetto and chrome://tracing put the track first.
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
         "args": {"sort_index": -1}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": wait_tid,
         "args": {"name": "host wait"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": idle_tid,
         "args": {"name": "GPU idle after"}},
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
        added.append({"ph": "X", "cat": "sync_advisor", "name": f"{sync.get('kind')}: {label}",
                      "pid": pid, "tid": wait_tid, "ts": start, "dur": max(end - start, wait),
                      "args": args})
        idle = max(float(sync.get("gpu_idle_after_us") or 0.0), 0.0)
        if idle > 0:
            added.append({"ph": "X", "cat": "sync_advisor", "name": f"GPU idle after {label}",
                          "pid": pid, "tid": idle_tid, "ts": end, "dur": idle, "args": args})
    events.extend(added)
    return msgspec.json.encode(trace)
