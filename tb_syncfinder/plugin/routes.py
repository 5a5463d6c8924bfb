"""The Sync Advisor TensorBoard plugin: JSON endpoints over the engine's report schema.

Every route answers JSON (``{"error": ...}`` with 400/403/404 for anything wrong in a
request, never a 500) through ``tensorboard.backend.http_util.Respond``, which adds
``X-Content-Type-Options: nosniff``. Run, worker and span parameters are looked up among
what the loader found and never used to build a path. Reports are built per selection
(run, worker, span) with ``aggregate.build_report`` and memoised until the run changes.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import mimetypes
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorboard.backend import http_util, json_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_syncfinder.models import KINDS, TraceRef
from tb_syncfinder.plugin.cache import DiskCache
from tb_syncfinder.plugin.loader import ERROR, RETRY, RunState, TraceLoader
from tb_syncfinder.plugin.safety import SourceError, SourceGuard
from tb_syncfinder.plugin.settings import PluginSettings, settings_from_flags
from tb_syncfinder.source import with_builtin_sources

logger = logging.getLogger(__name__)

PLUGIN_NAME = "sync_advisor"
TAB_NAME = "Sync Advisor"
STATIC_DIR = Path(__file__).resolve().parents[1] / "static"
MAX_LIMIT = 500
DEFAULT_LIMIT = 100
MAX_PARAM_CHARS = 2048
MEMO_SIZE = 32  # reports kept per plugin; each is one selection of one run

SITE_SORT_KEYS = (
    "host_wait_us",
    "gpu_idle_us",
    "count",
    "per_step",
    "share_of_step",
    "file",
    "line",
    "kind",
)
EXPORT_FORMATS = ("json", "csv", "sarif", "trace")
STATIC_TYPES = {
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".woff2": "font/woff2",
}


class HttpError(Exception):
    """An answer other than 200, with its JSON message."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


@dataclass
class Selection:
    """One memoised report: a run's traces filtered by worker and span."""

    report_json: dict[str, Any]
    syncs_by_id: dict[str, dict[str, Any]]
    sites_by_key: dict[str, dict[str, Any]]
    contexts: dict[str, dict[str, Any]]
    results: list[Any]  # engine.TraceResult
    loading: bool
    top_kinds: list[dict[str, Any]]  # for the summary route, by host wait


def _top_kinds(syncs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Count and host wait per kind, costliest first."""
    by_kind: dict[str, dict[str, Any]] = {}
    for sync in syncs:
        entry = by_kind.setdefault(
            sync["kind"], {"kind": sync["kind"], "count": 0, "host_wait_us": 0.0}
        )
        entry["count"] += 1
        entry["host_wait_us"] += sync["host_wait_us"] or 0.0
    return sorted(by_kind.values(), key=lambda k: (-k["host_wait_us"], -k["count"]))


def make_engine_options(settings: PluginSettings) -> Any:
    """The engine's Options for these settings (source roots and path map; the engine adds
    the built-in demo folder itself)."""
    from tb_syncfinder import engine

    return engine.Options(source_roots=tuple(settings.source_roots),
                          path_map=tuple(settings.path_map))


def _json_dumps(obj: Any) -> str:
    try:
        return json.dumps(obj, allow_nan=False, separators=(",", ":"))
    except (ValueError, TypeError):
        # NaN/inf or an odd type: TensorBoard's own cleaning turns them into valid JSON.
        return json.dumps(json_util.Cleanse(obj), separators=(",", ":"), default=str)


def _safe_filename(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "report"


def _sort_value(value: Any) -> tuple[float, str]:
    """Sort key of a non-None site field: numbers by value (NaN/inf as 0), text as text.
    The caller puts items without the field after all others, whichever the order."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (float(value) if math.isfinite(value) else 0.0, "")
    return (0.0, str(value))


class SyncAdvisorPlugin(base_plugin.TBPlugin):
    """TensorBoard plugin serving the Sync Advisor dashboard and its JSON API."""

    plugin_name = PLUGIN_NAME

    def __init__(
        self,
        context: base_plugin.TBContext,
        settings: PluginSettings | None = None,
        *,
        analyze_fn: Callable[[TraceRef, Any], Any] | None = None,
        start: bool = True,
    ) -> None:
        super().__init__(context)
        if settings is None:
            settings = settings_from_flags(context.flags, context.logdir)
        self.settings = settings
        self.guard = SourceGuard(*with_builtin_sources(settings.source_roots, settings.path_map))
        self.loader = TraceLoader(
            settings.logdirs,
            make_engine_options(settings),
            DiskCache(settings.cache_dir),
            reload_interval_s=settings.reload_interval_s,
            max_workers=settings.max_workers or None,
            use_processes=settings.use_processes,
            analyze_fn=analyze_fn,
        )
        self._memo: OrderedDict[tuple, Selection] = OrderedDict()
        self._memo_lock = threading.Lock()
        self._build_locks: dict[tuple, threading.Lock] = {}
        if start:
            self.loader.start()

    # ----- TensorBoard plugin interface -------------------------------------------------
    def is_active(self) -> bool:
        # Cheap: the loader thread sets this as soon as discovery finds any trace, before
        # anything is analysed, so the tab shows while traces are still loading.
        return self.loader.found_any

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=TAB_NAME)

    def get_plugin_apps(self) -> dict[str, Callable]:
        handlers = {
            "/index.js": self._index_js,
            "/static/*": self._static,
            "/runs": self._runs,
            "/workers": self._workers,
            "/spans": self._spans,
            "/summary": self._summary,
            "/steps": self._steps,
            "/sites": self._sites,
            "/syncs": self._syncs,
            "/sync": self._sync,
            "/source": self._source,
            "/compare": self._compare,
            "/export": self._export,
        }
        return {route: self._wsgi(handler) for route, handler in handlers.items()}

    def _wsgi(self, handler: Callable[[wrappers.Request], Any]) -> Callable:
        """Wrap a handler: JSON errors for bad requests, and no 500 from request content."""

        @functools.wraps(handler)
        def app(environ: dict, start_response: Callable) -> Any:
            request = wrappers.Request(environ)
            try:
                if request.method not in ("GET", "HEAD"):
                    raise HttpError(405, f"method {request.method} not allowed; use GET")
                response = handler(request)
            except HttpError as exc:
                response = self._json(request, {"error": exc.message, **exc.extra}, exc.status)
            except SourceError as exc:
                body = {"error": exc.message}
                if exc.hint:
                    body["hint"] = exc.hint
                response = self._json(request, body, exc.status)
            except Exception:  # noqa: BLE001 - a bug, not a request error: log it, stay JSON
                logger.exception("sync_advisor: %s failed", request.path)
                response = self._json(request, {"error": "internal error (see the log)"}, 500)
            return response(environ, start_response)

        return app

    # ----- helpers ----------------------------------------------------------------------
    @staticmethod
    def _json(request: wrappers.Request, obj: Any, status: int = 200) -> Any:
        return http_util.Respond(
            request, _json_dumps(obj), "application/json", code=status
        )

    @staticmethod
    def _arg(request: wrappers.Request, name: str, required: bool = False) -> str | None:
        values = request.args.getlist(name)
        if len(values) > 1:
            raise HttpError(400, f"parameter {name!r} given {len(values)} times")
        value = values[0] if values else None
        if value == "":
            value = None
        if value is None:
            if required:
                raise HttpError(400, f"parameter {name!r} is required")
            return None
        if len(value) > MAX_PARAM_CHARS or "\x00" in value:
            raise HttpError(400, f"parameter {name!r} is malformed")
        return value

    def _int_arg(
        self, request: wrappers.Request, name: str, default: int | None, lo: int, hi: int
    ) -> int | None:
        text = self._arg(request, name)
        if text is None:
            return default
        if not re.fullmatch(r"-?\d{1,12}", text.strip()):
            raise HttpError(400, f"parameter {name!r} must be an integer, got {text!r}")
        value = int(text)
        if not lo <= value <= hi:
            raise HttpError(400, f"parameter {name!r} must be in {lo}..{hi}, got {value}")
        return value

    def _flag_arg(self, request: wrappers.Request, name: str) -> bool:
        text = self._arg(request, name)
        if text in (None, "0", "false"):
            return False
        if text in ("1", "true"):
            return True
        raise HttpError(400, f"parameter {name!r} must be 0 or 1, got {text!r}")

    def _kind_arg(self, request: wrappers.Request) -> str | None:
        kind = self._arg(request, "kind")
        if kind is not None and kind not in KINDS:
            raise HttpError(400, f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
        return kind

    def _lookup(
        self, run_name: str | None, worker: str | None, span: str | None, what: str = "run"
    ) -> RunState:
        """The run, after checking that worker and span name something it holds."""
        if run_name is None:
            raise HttpError(400, f"parameter {what!r} is required")
        run = self.loader.get_run(run_name)
        if run is None:
            raise HttpError(404, f"unknown run {run_name!r}")
        with self.loader.lock:  # the loader thread edits run.traces
            refs = [t.ref for t in run.traces.values()]
        if worker is not None and not any(r.worker == worker for r in refs):
            raise HttpError(404, f"unknown worker {worker!r} in run {run_name!r}")
        if span is not None and not any(
            r.span == span and (worker is None or r.worker == worker) for r in refs
        ):
            raise HttpError(404, f"unknown span {span!r} in run {run_name!r}")
        return run

    def _selection_args(self, request: wrappers.Request) -> tuple[RunState, str | None, str | None]:
        run = self._arg(request, "run", required=True)
        worker = self._arg(request, "worker")
        span = self._arg(request, "span")
        return self._lookup(run, worker, span), worker, span

    def _selection(self, run: RunState, worker: str | None, span: str | None) -> Selection:
        """The memoised report of (run, worker, span), rebuilt when the run changed."""
        key = (run.name, worker, span, run.generation, id(run))
        with self._memo_lock:
            found = self._memo.get(key)
            if found is not None:
                self._memo.move_to_end(key)
                return found
            build_lock = self._build_locks.setdefault(key, threading.Lock())
        # One build per key even under 32 concurrent requests; other keys build in parallel.
        with build_lock:
            with self._memo_lock:
                found = self._memo.get(key)
            if found is None:
                try:
                    found = self._build(run, worker, span)
                    with self._memo_lock:
                        self._memo[key] = found
                        while len(self._memo) > MEMO_SIZE:
                            self._memo.popitem(last=False)
                finally:
                    with self._memo_lock:
                        self._build_locks.pop(key, None)
        return found

    def _build(self, run: RunState, worker: str | None, span: str | None) -> Selection:
        from tb_syncfinder.aggregate import build_report

        with self.loader.lock:
            loading = run.loading
        results = self.loader.results(run, worker, span)
        report_json = build_report(results).to_json()
        syncs_by_id = {s["id"]: s for s in report_json["syncs"] + report_json["latent"]}
        sites_by_key = {
            s["key"]: s for s in report_json["sites"] + report_json.get("latent_sites", [])
        }
        contexts: dict[str, dict[str, Any]] = {}
        for result in results:
            contexts.update(getattr(result, "contexts", None) or {})
        return Selection(report_json, syncs_by_id, sites_by_key, contexts, results, loading,
                         _top_kinds(report_json["syncs"]))

    @staticmethod
    def _page(items: list[Any], offset: int, limit: int, **extra: Any) -> dict[str, Any]:
        return {
            "total": len(items),
            "offset": offset,
            "limit": limit,
            "items": items[offset : offset + limit],
            **extra,
        }

    def _workers_of(self, run: RunState) -> list[dict[str, Any]]:
        spans: dict[str, set] = {}
        with self.loader.lock:
            refs = [state.ref for state in run.traces.values()]
        for ref in refs:
            spans.setdefault(ref.worker, set()).add(ref.span)
        return [
            {
                "name": worker,
                "spans": sorted(values, key=lambda s: (s is not None, len(s or ""), s or "")),
            }
            for worker, values in sorted(spans.items())
        ]

    # ----- static -------------------------------------------------------------------------
    def _index_js(self, request: wrappers.Request) -> Any:
        return self._static_file(request, "index.js")

    def _static(self, request: wrappers.Request) -> Any:
        name = request.path.rsplit("/static/", 1)[-1]
        return self._static_file(request, name)

    def _static_file(self, request: wrappers.Request, name: str) -> Any:
        root = STATIC_DIR.resolve()
        path = (root / name).resolve()
        if not path.is_relative_to(root) or path.suffix not in STATIC_TYPES:
            raise HttpError(404, f"no static file {name!r}")
        if not path.is_file():
            hint = "build the dashboard: cd frontend && npm ci && npm run build"
            raise HttpError(
                404, f"dashboard file tb_syncfinder/static/{name} is missing", hint=hint
            )
        content_type = STATIC_TYPES.get(path.suffix) or mimetypes.guess_type(name)[0]
        return http_util.Respond(request, path.read_bytes(), content_type)

    # ----- JSON endpoints -------------------------------------------------------------------
    def _runs(self, request: wrappers.Request) -> Any:
        runs = []
        errors = []
        for name in self.loader.run_names():
            run = self.loader.get_run(name)
            if run is None:
                continue
            with self.loader.lock:
                states = list(run.traces.values())
                loading = run.loading
            # A retried file waiting for its next poll still shows its last failure.
            failed = [s for s in states if s.status in (ERROR, RETRY) or s.error is not None]
            runs.append(
                {
                    "name": name,
                    "loading": loading,
                    "workers": self._workers_of(run),
                    "trace_count": len(states),
                    "error_count": len(failed),
                }
            )
            for state in failed:
                errors.append(
                    {
                        "path": state.ref.path,
                        "run": name,
                        "reason": state.error,
                        "retrying": state.status == RETRY,
                        # Truncated, or changed while it was read: shown as "being
                        # written" until a complete read replaces it with the report.
                        "being_written": state.being_written,
                    }
                )
        with self.loader.lock:
            errors = list(self.loader.logdir_errors) + errors
        return self._json(request, {"loading": self.loader.loading, "runs": runs, "errors": errors})

    def _workers(self, request: wrappers.Request) -> Any:
        run = self._lookup(self._arg(request, "run", required=True), None, None)
        return self._json(request, {"workers": self._workers_of(run)})

    def _spans(self, request: wrappers.Request) -> Any:
        worker = self._arg(request, "worker", required=True)
        run = self._lookup(self._arg(request, "run", required=True), worker, None)
        workers = {w["name"]: w["spans"] for w in self._workers_of(run)}
        return self._json(request, {"spans": workers.get(worker, [])})

    def _summary(self, request: wrappers.Request) -> Any:
        run, worker, span = self._selection_args(request)
        sel = self._selection(run, worker, span)
        report = sel.report_json
        traces = report["traces"]
        devices = Counter(t["device"] for t in traces if t.get("device") and not t.get("error"))
        body = {
            "summary": report["summary"],
            "traces": traces,
            "top_kinds": sel.top_kinds,
            "device": devices.most_common(1)[0][0] if devices else "unknown",
            "has_stacks": any(t.get("has_stacks") for t in traces),
            "has_gpu_activity": any(t.get("has_gpu_activity") for t in traces),
            "loading": sel.loading,
        }
        return self._json(request, body)

    def _steps(self, request: wrappers.Request) -> Any:
        run, worker, span = self._selection_args(request)
        sel = self._selection(run, worker, span)
        return self._json(request, {"steps": sel.report_json["steps"], "loading": sel.loading})

    def _sites(self, request: wrappers.Request) -> Any:
        run, worker, span = self._selection_args(request)
        kind = self._kind_arg(request)
        file = self._arg(request, "file")
        op = self._arg(request, "op")
        step = self._int_arg(request, "step", None, -(10**12), 10**12)
        latent = self._flag_arg(request, "latent")
        sort = self._arg(request, "sort") or "host_wait_us"
        if sort not in SITE_SORT_KEYS:
            raise HttpError(400, f"unknown sort {sort!r}; one of {', '.join(SITE_SORT_KEYS)}")
        order = self._arg(request, "order") or "desc"
        if order not in ("asc", "desc"):
            raise HttpError(400, f"order must be asc or desc, got {order!r}")
        offset = self._int_arg(request, "offset", 0, 0, 10**9)
        limit = self._int_arg(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)

        sel = self._selection(run, worker, span)
        sites = sel.report_json["latent_sites" if latent else "sites"]
        if kind is not None:
            sites = [s for s in sites if s["kind"] == kind]
        if file is not None:
            sites = [s for s in sites if s.get("file") and file in s["file"]]
        if op is not None:
            sites = [s for s in sites if op in (s.get("ops") or [])]
        if step is not None:
            sites = [s for s in sites if step in (s.get("steps") or [])]
        present = [s for s in sites if s.get(sort) is not None]
        missing = [s for s in sites if s.get(sort) is None]
        present.sort(key=lambda s: _sort_value(s[sort]), reverse=order == "desc")
        return self._json(
            request, self._page(present + missing, offset, limit, loading=sel.loading)
        )

    def _syncs(self, request: wrappers.Request) -> Any:
        run, worker, span = self._selection_args(request)
        site = self._arg(request, "site")
        kind = self._kind_arg(request)
        step = self._int_arg(request, "step", None, -(10**12), 10**12)
        latent = self._flag_arg(request, "latent")
        offset = self._int_arg(request, "offset", 0, 0, 10**9)
        limit = self._int_arg(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)

        sel = self._selection(run, worker, span)
        syncs = sel.report_json["latent" if latent else "syncs"]
        if site is not None:
            syncs = [s for s in syncs if s.get("site_key") == site]
        if kind is not None:
            syncs = [s for s in syncs if s["kind"] == kind]
        if step is not None:
            syncs = [s for s in syncs if s.get("step") == step]
        return self._json(request, self._page(syncs, offset, limit, loading=sel.loading))

    def _sync(self, request: wrappers.Request) -> Any:
        run, worker, span = self._selection_args(request)
        sync_id = self._arg(request, "id", required=True)
        sel = self._selection(run, worker, span)
        sync = sel.syncs_by_id.get(sync_id)
        if sync is None:
            raise HttpError(404, f"unknown sync id {sync_id!r} in run {run.name!r}")
        body = {
            "sync": sync,
            "site": sel.sites_by_key.get(sync.get("site_key") or ""),
            "context": sel.contexts.get(sync_id),
        }
        return self._json(request, body)

    def _source(self, request: wrappers.Request) -> Any:
        file = self._arg(request, "file", required=True)
        line = self._int_arg(request, "line", 1, 1, 10**9)
        context = self._int_arg(request, "context", 5, 0, 50)
        return self._json(request, self.guard.read(file, line, context).to_json())

    def _compare(self, request: wrappers.Request) -> Any:
        from tb_syncfinder.compare import compare

        run, worker, span = self._selection_args(request)
        base_worker = self._arg(request, "base_worker")
        base_span = self._arg(request, "base_span")
        base = self._lookup(
            self._arg(request, "base", required=True), base_worker, base_span, what="base"
        )
        base_sel = self._selection(base, base_worker, base_span)
        new_sel = self._selection(run, worker, span)
        body = compare(base_sel.report_json, new_sel.report_json)
        return self._json(request, body)

    def _export(self, request: wrappers.Request) -> Any:
        from tb_syncfinder import export

        run, worker, span = self._selection_args(request)
        fmt = self._arg(request, "format") or "json"
        if fmt not in EXPORT_FORMATS:
            raise HttpError(400, f"unknown format {fmt!r}; one of {', '.join(EXPORT_FORMATS)}")
        sel = self._selection(run, worker, span)
        stem = _safe_filename("-".join(p for p in (run.name, worker, span) if p))
        if fmt == "json":
            body, content_type, name = _json_dumps(sel.report_json), "application/json", ".json"
        elif fmt == "csv":
            csv_text = export.runs_to_csv({run.name: sel.report_json})
            body, content_type, name = csv_text, "text/csv", ".csv"
        elif fmt == "sarif":
            body = _json_dumps(export.to_sarif(sel.report_json))
            content_type, name = "application/sarif+json", ".sarif"
        else:
            traces = [r for r in sel.results if not getattr(r.info, "error", None)]
            if len(traces) != 1:
                raise HttpError(
                    400,
                    f"format=trace needs exactly one trace; the selection holds {len(traces)}: "
                    "pass worker (and span)",
                )
            path = traces[0].info.path
            syncs = [s for s in sel.report_json["syncs"] if s.get("trace") == path]
            body = export.annotate_trace(path, syncs, sel.report_json["sites"])
            content_type, name = "application/json", ".sync_advisor.pt.trace.json"
        if isinstance(body, str):
            body = body.encode("utf-8")
        disposition = f'attachment; filename="{stem}{name}"'
        return http_util.Respond(
            request, body, content_type, headers=[("Content-Disposition", disposition)]
        )
