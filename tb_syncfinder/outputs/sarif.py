"""SARIF 2.1.0 (format ``sarif``): one result per site, for code scanning and editor
annotations; with several profiler runs, each result names its run.

A site with a source line is a result at that line. A site without one (a trace recorded
without Python stacks) is a result too, located at the trace file it was found in (code
scanning shows a result only with a physical location), its operator chain as a logical
location, its message saying that no Python stack was recorded; an invocation notification
counts them. Nothing the report lists is left out of the log."""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote

from tb_syncfinder import __version__, catalogue
from tb_syncfinder.compare import site_match_key
from tb_syncfinder.models import KERNEL_CELL
from tb_syncfinder.outputs.csv import _advice_title, _texts
from tb_syncfinder.query import sites_with_latent

if TYPE_CHECKING:
    from tb_syncfinder.outputs import RenderOptions, ReportSet

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
INFORMATION_URI = "https://github.com/tb-syncfinder/tb-syncfinder"

# SARIF levels: a site whose fix saves at least this share of the step is an error, others
# warnings (a site not replayed: its cost, host wait + idle, the bound of that saving).
_ERROR_SHARE = 0.10


def _level(site: dict[str, Any], latent: bool, step_us: float) -> str:
    """A site's SARIF level. A replayed site's by what fixing it saves: alone, with the one
    site it waits with, or a job's step (its ranks step together). A wait the device's work
    hides saves nothing, and such a site with 68 % of the step in host wait was an error
    beside a table saying it saves 0 us. (Not by what it saves once every other site is
    fixed: three sites waiting for the same work each got it, and a 2 us site was an error.)"""
    if latent:
        return "note"
    if site.get("saving_method") == "replay" and step_us > 0:
        saving = max(
            float(site.get(field) or 0.0)
            for field in (
                "predicted_saving_per_step_us",
                "fix_with_saving_per_step_us",
                "job_saving_per_step_us",
            )
        )
        return "error" if saving / step_us >= _ERROR_SHARE else "warning"
    share = float(site.get("share_of_step") or 0.0)
    return "error" if share >= _ERROR_SHARE else "warning"


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


class _Device(NamedTuple):
    """What a site's traces say of the device it waits for, for its message."""

    word: str = "GPU"  # "NPU" where every trace of the site is torch_npu's
    # Where its latent syncs were found, when not in a CPU-only trace.
    latent_where: str = "in a CPU-only trace"
    # Whether no Python stack can be recorded for it (torch_npu: only on operators).
    never_stacked: bool = False


_GPU = _Device()
_NPU_UNRECORDED = "in an NPU trace without AscendCL calls (torch_npu's default profiler level)"


def _message(
    site: dict[str, Any], latent: bool, stackless: bool = False, device: _Device = _GPU
) -> str:
    from tb_syncfinder.outputs.text import format_share, format_us

    # Outside any operator, the call itself (cudaDeviceSynchronize, hipDeviceSynchronize).
    ops = (
        " > ".join(_texts(site.get("ops")))
        or " ".join(_texts(site.get("apis"))[:1])
        or ("a runtime call")
    )
    kind = site.get("kind") or "sync"
    count = int(site.get("count") or 0)
    if latent:
        text = (
            f"{ops} ({kind}) would synchronize the host with the {device.word} "
            f"({count} call{'s' if count != 1 else ''} {device.latent_where})."
        )
    else:
        idle = (
            format_us(site.get("gpu_idle_us"))
            if site.get("gpu_idle_measured") is not False
            else "not measured (the trace holds no task of the NPU's own)"
        )
        text = (
            f"{ops} ({kind}) synchronizes the host with the {device.word}: {count} "
            f"time{'s' if count != 1 else ''} ({float(site.get('per_step') or 0):.1f} per "
            f"step), host wait {format_us(site.get('host_wait_us'))}, {device.word} idle "
            f"after {idle}, {format_share(site.get('share_of_step'))} of step time."
        )
    if stackless:
        if site.get("file"):
            text += " The trace recorded no line for it."
        elif device.never_stacked and not site.get("ops"):
            text += (
                " torch_npu records Python stacks on operators only, so a call outside any "
                "operator has no source line (look for torch.npu.synchronize() and the like)."
            )
        else:
            text += (
                " No Python stack was recorded, so the source line is unknown: profile with "
                "with_stack=True to locate it."
            )
    candidates = site.get("candidates") or []
    if site.get("file") and not site.get("line_exact"):
        # Say what the result's line is, and which lines to look at.
        if site.get("recorded_line") is not None:
            where = "the file changed since profiling: this is the line the trace recorded"
        elif site.get("def_line") is not None and site.get("def_line") == site.get("line"):
            where = "this is the function's definition"
        else:
            where = "this is the line the trace recorded for the function"
        text += f" The exact call line is not known; {where}"
        text += (
            f" (candidate lines {', '.join(str(int(c)) for c in candidates)})."
            if candidates
            else "."
        )
    library = site.get("library") or {}
    if library.get("file"):
        from tb_syncfinder.outputs.text import library_text

        # The user's line called a library: its code that read is what the fix is about.
        if library.get("line_exact"):
            lines = site.get("library_lines") or ()
            text += f" It {library_text(library, mark='', lines=lines)}."
        else:
            # The line the trace tells is the function's, not the read's.
            text += f" It {library_text(library, mark='')}: the read is inside that function."
    together = str(site.get("fix_with_note") or "").strip()
    if together and not latent:
        # Before the fix: a code-scanning annotation at one of two sites that wait for the
        # same work must say that fixing it alone gains little.
        text += f" {together}"
    title = _advice_title(site)
    if title:
        text += f" Fix: {title}."
        advice_text = str((site.get("advice") or {}).get("text") or "").strip()
        if advice_text:
            text += f" {advice_text}"
        from tb_syncfinder.outputs.text import library_code_text

        edits = library_code_text(site).strip("()")
        if edits:
            text += f" ({edits[0].upper()}{edits[1:]}.)"
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


def _has_line(site: dict[str, Any]) -> bool:
    line = site.get("line")
    return bool(site.get("file")) and isinstance(line, int) and line >= 1


def _site_traces(report_json: dict[str, Any]) -> dict[tuple[bool, str], list[str]]:
    """(latent, site key) -> the trace files the site's syncs were found in, in order."""
    # Each site's traces as the keys of a dict (in order, each once): a list's membership
    # test per sync made 2,000 traces' syncs take 4.2 s.
    found: dict[tuple[bool, str], dict[str, None]] = {}
    for field, latent in (("syncs", False), ("latent", True)):
        for sync in report_json.get(field) or []:
            if not isinstance(sync, dict) or not sync.get("site_key") or not sync.get("trace"):
                continue
            found.setdefault((latent, str(sync["site_key"])), {})[str(sync["trace"])] = None
    return {key: list(traces) for key, traces in found.items()}


def _line_text(path: str | None, line: Any, cache: dict[str, list[str] | None]) -> str | None:
    """The stripped text of ``line`` of the file read at ``path`` (None: unreadable)."""
    if not path or not isinstance(line, int) or line < 1:
        return None
    if path not in cache:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                cache[path] = handle.read().splitlines()
        except OSError:
            cache[path] = None
    lines = cache[path]
    return lines[line - 1].strip() if lines is not None and line <= len(lines) else None


def _fingerprints(
    rows: list[tuple[dict[str, Any], bool]], resolved: dict[str, str]
) -> dict[int, str]:
    """Each site's identity from one run to the next (``id(site)`` -> it): the file's name,
    function, first operator and kind, as compare matches sites, then the text of its exact
    line where the source was read (a ``.cpu()`` and a ``.tolist()`` of one function stay
    apart, and each keeps its identity when the other is fixed or lines move), else its
    place in line order among the sites sharing the rest. The site key (``file:line:op``)
    changed with any line added above a sync, a checkout at another path, or a runner
    where the source was not found, and code scanning closed each alert and opened
    another. (Latent and real sites are kept apart: a CPU-only run's are notes.)"""
    cache: dict[str, list[str] | None] = {}
    groups: dict[tuple[bool, str, str], list[dict[str, Any]]] = {}
    for site, latent in rows:
        text = None
        if site.get("line_exact"):
            text = _line_text(resolved.get(str(site.get("key") or "")), site.get("line"), cache)
        line_id = "line:" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12] if text else ""
        # Without the library's part (``site_keys`` 4): the fingerprints of earlier versions
        # stay; sites of one call told apart by it take their places in line and key order.
        groups.setdefault((latent, site_match_key(site, False), line_id), []).append(site)
    found: dict[int, str] = {}
    for (latent, key, line_id), sites in groups.items():
        ordered = sorted(sites, key=lambda s: (s.get("line") or 0, str(s.get("key") or "")))
        # A sync inside a library is told apart by the library's file name and function:
        # its place among the sites of one call moved when another was fixed (ultralytics'
        # reads under one ``model.train()``), and code scanning kept the fixed one's alert.
        by_library: dict[str, list[dict[str, Any]]] = {}
        places: list[dict[str, Any]] = []
        for site in ordered:
            library = site.get("library") or {}
            if library.get("file") and library.get("func"):
                name = os.path.basename(str(library["file"]).replace("\\", "/"))
                by_library.setdefault(f"lib:{name}:{library['func']}", []).append(site)
            else:
                places.append(site)
        prefix = f"{'latent:' if latent else ''}{key}:{line_id}#"
        for place, site in enumerate(places, 1):
            found[id(site)] = f"{prefix}{place}"
        for part, same in by_library.items():
            for place, site in enumerate(same, 1):
                found[id(site)] = prefix + part + (f"#{place}" if place > 1 else "")
    return found


def _result(
    site: dict[str, Any],
    latent: bool,
    rule_index: int,
    location: dict[str, Any],
    fingerprint: str,
    device: _Device = _GPU,
    step_us: float = 0.0,
) -> dict[str, Any]:
    kind = site.get("kind") or "unknown"
    share = float(site.get("share_of_step") or 0.0)
    return {
        "ruleId": kind,
        "ruleIndex": rule_index,
        "level": _level(site, latent, step_us),
        "message": {"text": _message(site, latent, stackless=not _has_line(site), device=device)},
        "locations": [location],
        "partialFingerprints": {"syncSite/v2": fingerprint},
        "properties": {
            "count": int(site.get("count") or 0),
            "perStep": float(site.get("per_step") or 0.0),
            "hostWaitUs": float(site.get("host_wait_us") or 0.0),
            "gpuIdleUs": float(site.get("gpu_idle_us") or 0.0),
            "gpuIdleMeasured": site.get("gpu_idle_measured") is not False,
            "shareOfStep": share,
            "ops": _texts(site.get("ops")),
            "lineExact": bool(site.get("line_exact")),
            "latent": latent,
            "fixWith": _texts(site.get("fix_with")),
            # Per step without the profiler, where the step time was given and fitted.
            **(
                {"unprofiledSavingPerStepUs": float(unprofiled)}
                if (unprofiled := site.get("unprofiled_predicted_saving_per_step_us")) is not None
                else {}
            ),
        },
    }


def _resolved_files(report_json: dict[str, Any]) -> dict[str, str]:
    """Each site's file as read here (``--source-root``, ``--path-map``: the syncs'
    ``source.resolved_path``), by site key."""
    files: dict[str, str] = {}
    for field in ("syncs", "latent"):
        for sync in report_json.get(field) or []:
            resolved = (sync.get("source") or {}).get("resolved_path")
            if resolved and sync.get("site_key"):
                files.setdefault(str(sync["site_key"]), str(resolved))
    return files


def _line_location(
    site: dict[str, Any], root: str | None, resolved: str | None = None
) -> dict[str, Any]:
    # The file as found here, where it is under the root: a trace records the path on the
    # machine that ran it (savings_workloads.py), which code scanning could not place when
    # --source-root found it at tests/gpu_shapes/savings_workloads.py.
    file = str(site["file"])
    line = int(site["line"])
    cell = site.get("cell")
    if isinstance(cell, dict) and cell.get("notebook"):
        # A Jupyter cell's line: the notebook, at the line of its JSON that holds it.
        resolved = str(cell["notebook"])
        number = KERNEL_CELL.search(file.replace("\\", "/"))
        ran = int(number.group(1)) if number else None
        line = notebook_file_line(resolved, int(cell.get("index") or 0), line, ran) or 1
    if resolved:
        found = _repository_file(resolved, root)
        if found is not None:
            file = found
    return {
        "physicalLocation": {
            "artifactLocation": {
                "uri": sarif_uri(file, root),
                "uriBaseId": "%SRCROOT%",
            },
            "region": {"startLine": line},
        },
    }


def notebook_file_line(
    notebook: str, index: int, line: int, number: int | None = None
) -> int | None:
    """The line of the ``.ipynb`` file (its JSON) that holds ``line`` of its ``index``-th
    cell (both from 1), as Jupyter writes a notebook (a cell's source one JSON string per
    line); None where the file is not written so, or does not hold it, or (``number``:
    ipykernel's name for the cell that ran) where that cell's text is another now (the
    notebook edited since the analysis: a line of another cell would be pointed at)."""
    import json

    from tb_syncfinder.source import kernel_cell_hash

    try:
        with open(notebook, encoding="utf-8") as handle:
            text = handle.read()
        cells = json.loads(text).get("cells")
        source = cells[index - 1]["source"] if index >= 1 else None
    except (OSError, ValueError, AttributeError, LookupError, TypeError):
        return None
    if isinstance(source, str):
        source = source.splitlines(keepends=True)
    if not isinstance(source, list) or not all(isinstance(part, str) for part in source):
        return None
    if number is not None and kernel_cell_hash("".join(source)) != number:
        return None
    # The trace counts a cell's lines as IPython compiles it, without its leading empty lines.
    leading = next((n for n, part in enumerate(source) if part.strip()), len(source))
    line += leading
    if not 1 <= line <= len(source):
        return None
    wanted = [json.dumps(part, ensure_ascii=False) for part in source]
    rows = [row.strip().removesuffix(",") for row in text.splitlines()]
    starts = [
        start
        for start in range(len(rows) - len(wanted) + 1)
        if rows[start : start + len(wanted)] == wanted
    ]
    # The cell's lines in a row; where another cell has the same text, the index-th of them
    # cannot be told from the rows alone: the first is as good a guess as none, so none.
    return starts[0] + line if len(starts) == 1 else None


def _trace_location(site: dict[str, Any], trace: str, root: str | None) -> dict[str, Any]:
    """The trace file a site without a source line was found in (code scanning needs a
    file to show a result at), and its operator chain as the logical location."""
    ops = _texts(site.get("ops"))
    apis = _texts(site.get("apis"))
    handle = ops[0] if ops else (apis[0] if apis else str(site.get("kind") or "sync"))
    logical: dict[str, Any] = {
        "name": handle,
        "fullyQualifiedName": " > ".join(ops + [a for a in dict.fromkeys(apis) if a not in ops])
        or handle,
        "kind": "function",
    }
    return {
        "physicalLocation": {
            "artifactLocation": _trace_artifact(trace, root),
            "region": {"startLine": 1},
        },
        "logicalLocations": [logical],
    }


def _trace_artifact(trace: str, root: str | None) -> dict[str, str]:
    """Where a trace file is: under the root, relative to it as source files are; a URL
    (``gs://``, ``s3://``) as it is; any other path by its absolute file URI, which
    stripping its anchor would have turned into a path inside the repository that does
    not exist."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+://", trace):
        return {"uri": trace}
    path = os.path.abspath(trace)
    if _under_root(path, root):
        return {"uri": sarif_uri(path, root), "uriBaseId": "%SRCROOT%"}
    return {"uri": Path(path).as_uri()}


# An installed package's folder: a file in it is no file of the repository, even where the
# virtual environment sits inside the clone (``.venv/lib/python3.11/site-packages/...``).
_INSTALLED_PACKAGES = re.compile(r"[/\\](?:site|dist)-packages[/\\]")


def _repository_file(resolved: str, root: str | None) -> str | None:
    """The repository's own copy of a source file found at ``resolved`` (absolute), where
    the root holds one: the file itself, or for a file of an installed package (the demo's
    ``tb_syncfinder/demo/cnn.py`` run from a virtual environment in the clone, a project
    installed in editable mode elsewhere) the same path inside the package under the root.
    None: keep the path the trace recorded."""
    installed = _INSTALLED_PACKAGES.search(resolved)
    if installed is None:
        return os.path.abspath(resolved) if _under_root(resolved, root) else None
    base = os.path.abspath(root if root is not None else os.getcwd())
    in_repository = os.path.join(base, resolved[installed.end() :])
    return in_repository if os.path.isfile(in_repository) else None


def _under_root(path: str, root: str | None) -> bool:
    """Whether a local path lies under the root (default: the current directory)."""
    base = os.path.abspath(root if root is not None else os.getcwd())
    return os.path.abspath(path).startswith(base.rstrip(os.sep) + os.sep)


def _notifications(
    stackless: list[tuple[dict[str, Any], bool]], unlocated: int
) -> list[dict[str, Any]]:
    notes = []
    if stackless:
        sites = len(stackless)
        syncs = sum(int(site.get("count") or 0) for site, _ in stackless)
        notes.append(
            {
                "level": "warning",
                "message": {
                    "text": f"{sites} site{'s' if sites != 1 else ''} ({syncs} "
                    f"sync{'s' if syncs != 1 else ''}) {'have' if sites != 1 else 'has'} "
                    "no source line: the trace recorded no Python stack for them (profile "
                    "with with_stack=True). They are reported at the trace file they were "
                    "found in."
                },
                "properties": {"siteCount": sites, "syncCount": syncs},
            }
        )
    if unlocated:
        notes.append(
            {
                "level": "warning",
                "message": {
                    "text": f"{unlocated} site{'s' if unlocated != 1 else ''} without a "
                    "source line could not be reported: the report names no trace file "
                    "for them."
                },
                "properties": {"siteCount": unlocated},
            }
        )
    return notes


def to_sarif(report_json: dict[str, Any], root: str | None = None) -> dict[str, Any]:
    """The report's sites as a SARIF 2.1.0 log, for code scanning and editor annotations.

    One result per site (latent sites are notes), one rule per kind used. A site with a
    source file and line is a result at that line; one without (no Python stack recorded)
    is a result at the trace file its syncs were found in, with its operator chain as a
    logical location, listed after the others and counted in a tool execution
    notification. ``root`` is the directory absolute paths are made relative to.
    """
    ranked = sites_with_latent(report_json)
    summary = report_json.get("summary") or {}
    step_us = float(summary.get("mean_wall_step_time_us") or summary.get("mean_step_time_us") or 0)
    located = [(site, latent) for site, latent in ranked if _has_line(site)]
    stackless = [(site, latent) for site, latent in ranked if not _has_line(site)]
    site_traces = _site_traces(report_json)
    readable = [
        str(t["path"])
        for t in report_json.get("traces") or []
        if isinstance(t, dict) and t.get("path") and not t.get("error")
    ]
    infos = {
        str(t["path"]): t
        for t in report_json.get("traces") or []
        if isinstance(t, dict) and t.get("path") and not t.get("error")
    }

    def device(site: dict[str, Any], latent: bool) -> _Device:
        keys = site_traces.get((latent, str(site.get("key") or ""))) or ()
        found = [infos[p] for p in keys if p in infos] or list(infos.values())
        if not found or any(t.get("device") != "npu" for t in found):
            return _GPU
        unrecorded = all(catalogue.npu_without_calls(t) for t in found)
        return _Device("NPU", _NPU_UNRECORDED if unrecorded else "in NPU traces", True)

    placed: list[tuple[dict[str, Any], bool, str]] = []
    for site, latent in stackless:
        traces = site_traces.get((latent, str(site.get("key") or ""))) or readable
        if traces:
            placed.append((site, latent, traces[0]))

    def kinds(rows: list[Any]) -> list[str]:
        return sorted(
            {row[0].get("kind") or "unknown" for row in rows},
            key=lambda k: (catalogue.kind_rank(k), k),
        )

    # The kinds of the sites with a line first, as they always were; the kinds only sites
    # without one have after them.
    kinds_used = kinds(located)
    kinds_used += [k for k in kinds(placed) if k not in kinds_used]
    rule_index = {kind: i for i, kind in enumerate(kinds_used)}
    resolved = _resolved_files(report_json)
    fingerprints = _fingerprints(ranked, resolved)
    results: list[dict[str, Any]] = [
        _result(
            site,
            latent,
            rule_index[site.get("kind") or "unknown"],
            _line_location(site, root, resolved.get(str(site.get("key") or ""))),
            fingerprints[id(site)],
            device(site, latent),
            step_us,
        )
        for site, latent in located
    ]
    for site, latent, trace in placed:
        result = _result(
            site,
            latent,
            rule_index[site.get("kind") or "unknown"],
            _trace_location(site, trace, root),
            fingerprints[id(site)],
            device(site, latent),
            step_us,
        )
        result["properties"]["pythonStack"] = False
        result["properties"]["trace"] = _trace_artifact(trace, root)["uri"]
        results.append(result)
    run: dict[str, Any] = {
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
    }
    notes = _notifications(stackless, len(stackless) - len(placed))
    # A trace that could not be read: its syncs are missing from the results, which an
    # upload would otherwise present as the whole answer.
    unreadable = [
        t for t in report_json.get("traces") or [] if isinstance(t, dict) and t.get("error")
    ]
    notes += [
        {
            "level": "error",
            "message": {"text": f"{t.get('path')}: {t.get('error')}"},
            "properties": {"unreadableTrace": True},
        }
        for t in unreadable
    ]
    if notes:
        run["invocations"] = [
            {"executionSuccessful": not unreadable, "toolExecutionNotifications": notes}
        ]
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def sarif_by_run(
    merged: dict[str, Any], runs: dict[str, dict[str, Any]], root: str | None = None
) -> dict[str, Any]:
    """SARIF for code scanning: one SARIF run (one tool upload); with several profiler runs,
    each result is a site of one run, its message and figures that run's own, and the run is
    named in the message, in ``properties.run`` and in a ``run/v1`` fingerprint (likewise
    each notification of sites without a source line)."""
    if len(runs) <= 1:
        return to_sarif(merged, root)
    log = to_sarif(merged, root)  # the rules of every kind used, in the usual order
    results = []
    notes = []
    rule_index = {rule["id"]: i for i, rule in enumerate(log["runs"][0]["tool"]["driver"]["rules"])}
    for name, data in runs.items():
        run_log = to_sarif(data, root)["runs"][0]
        for result in run_log["results"]:
            result["ruleIndex"] = rule_index.get(result["ruleId"], result.get("ruleIndex"))
            result["message"]["text"] = f"Run {name}: {result['message']['text']}"
            result.setdefault("properties", {})["run"] = name
            result.setdefault("partialFingerprints", {})["run/v1"] = name
            results.append(result)
        for invocation in run_log.get("invocations") or []:
            for note in invocation.get("toolExecutionNotifications") or []:
                note["message"]["text"] = f"Run {name}: {note['message']['text']}"
                note.setdefault("properties", {})["run"] = name
                notes.append(note)
    log["runs"][0]["results"] = results
    log["runs"][0].pop("invocations", None)
    if notes:
        failed = any((note.get("properties") or {}).get("unreadableTrace") for note in notes)
        log["runs"][0]["invocations"] = [
            {"executionSuccessful": not failed, "toolExecutionNotifications": notes}
        ]
    return log


def render(report_set: ReportSet, options: RenderOptions) -> bytes:
    from tb_syncfinder.outputs.json import dumps

    return dumps(sarif_by_run(report_set.report, report_set.runs, options.source_root))
