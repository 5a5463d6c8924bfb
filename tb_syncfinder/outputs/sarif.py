"""SARIF 2.1.0 (format ``sarif``): one result per site with a source line, for code
scanning and editor annotations; with several profiler runs, each result names its run."""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from tb_syncfinder import __version__, catalogue
from tb_syncfinder.outputs.csv import _advice_title, _texts
from tb_syncfinder.query import sites_with_latent

if TYPE_CHECKING:
    from tb_syncfinder.outputs import RenderOptions, ReportSet

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
INFORMATION_URI = "https://github.com/tb-syncfinder/tb-syncfinder"

# SARIF levels: a site costing at least this share of the step is an error, others warnings.
_ERROR_SHARE = 0.10


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
        posix = posix[len(base.rstrip("/")) + 1 :]
    elif is_windows:
        posix = "/".join(PureWindowsPath(file).parts[1:])
    elif posix.startswith("/"):
        posix = "/".join(PurePosixPath(posix).parts[1:])
    # "." and ".." components: a URI that climbs out of the repository root (or names the
    # root itself) would not be resolvable by code scanning tools.
    parts = [p for p in posixpath.normpath(posix).split("/") if p not in ("", ".", "..")]
    return quote("/".join(parts), safe="/-_.~")


def _message(site: dict[str, Any], latent: bool) -> str:
    from tb_syncfinder.outputs.text import format_share, format_us

    ops = " > ".join(_texts(site.get("ops"))) or "a CUDA API call"
    kind = site.get("kind") or "sync"
    count = int(site.get("count") or 0)
    if latent:
        text = (
            f"{ops} ({kind}) would synchronize the host with the GPU "
            f"({count} call{'s' if count != 1 else ''} in a CPU-only trace)."
        )
    else:
        text = (
            f"{ops} ({kind}) synchronizes the host with the GPU: {count} "
            f"time{'s' if count != 1 else ''} ({float(site.get('per_step') or 0):.1f} per "
            f"step), host wait {format_us(site.get('host_wait_us'))}, GPU idle after "
            f"{format_us(site.get('gpu_idle_us'))}, "
            f"{format_share(site.get('share_of_step'))} of step time."
        )
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
        rules.append(
            {
                "id": kind,
                "name": "".join(part.capitalize() for part in kind.split("_")),
                "shortDescription": {"text": short},
                "fullDescription": {"text": full},
                "defaultConfiguration": {"level": "warning"},
                "properties": {"tags": ["performance", "cuda", "synchronization"]},
            }
        )
    return rules


def to_sarif(report_json: dict[str, Any], root: str | None = None) -> dict[str, Any]:
    """The report's sites as a SARIF 2.1.0 log, for code scanning and editor annotations.

    One result per site that has a source file and line (latent sites are notes); one rule
    per kind used. ``root`` is the directory absolute source paths are made relative to.
    """
    results: list[dict[str, Any]] = []
    located: list[tuple[dict[str, Any], bool]] = [
        (site, latent)
        for site, latent in sites_with_latent(report_json)
        if site.get("file") and isinstance(site.get("line"), int) and site["line"] >= 1
    ]
    kinds_used = sorted(
        {site.get("kind") or "unknown" for site, _ in located},
        key=lambda k: (catalogue.kind_rank(k), k),
    )
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
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {
                            "uri": sarif_uri(str(site["file"]), root),
                            "uriBaseId": "%SRCROOT%",
                        },
                        "region": {"startLine": int(site["line"])},
                    },
                }
            ],
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
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "tb-syncfinder",
                        "version": __version__,
                        "informationUri": INFORMATION_URI,
                        "rules": _rules(kinds_used),
                    },
                },
                "originalUriBaseIds": {
                    "%SRCROOT%": {
                        "description": {"text": "The directory the profiled code ran in."}
                    },
                },
                "results": results,
            }
        ],
    }


def sarif_by_run(
    merged: dict[str, Any], runs: dict[str, dict[str, Any]], root: str | None = None
) -> dict[str, Any]:
    """SARIF for code scanning: one SARIF run (one tool upload); with several profiler runs,
    each result is a site of one run, its message and figures that run's own, and the run is
    named in the message, in ``properties.run`` and in a ``run/v1`` fingerprint."""
    if len(runs) <= 1:
        return to_sarif(merged, root)
    log = to_sarif(merged, root)  # the rules of every kind used, in the usual order
    results = []
    rule_index = {rule["id"]: i for i, rule in enumerate(log["runs"][0]["tool"]["driver"]["rules"])}
    for name, data in runs.items():
        for result in to_sarif(data, root)["runs"][0]["results"]:
            result["ruleIndex"] = rule_index.get(result["ruleId"], result.get("ruleIndex"))
            result["message"]["text"] = f"Run {name}: {result['message']['text']}"
            result.setdefault("properties", {})["run"] = name
            result.setdefault("partialFingerprints", {})["run/v1"] = name
            results.append(result)
    log["runs"][0]["results"] = results
    return log


def render(report_set: ReportSet, options: RenderOptions) -> bytes:
    from tb_syncfinder.outputs.json import dumps

    return dumps(sarif_by_run(report_set.report, report_set.runs, options.source_root))
