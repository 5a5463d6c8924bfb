"""The Sync Advisor TensorBoard plugin: routes that parse a request, ask ``api`` for the
answer and send it as JSON.

Every error a request can cause is a ``tensorboard.errors`` client error (400/403/404/405)
answered as ``{"error": ..., "hint"?: ...}`` JSON, never a 500; a bug is logged and answered
as a JSON 500. Answers go through ``tensorboard.backend.http_util.Respond`` (nosniff and
TensorBoard's CSP), except a repeated GET of an answer route (summary, steps, sites, syncs,
sync, job), which sends the answer kept from the first with exactly the headers ``Respond``
gave it (``_send_kept``: under 32 clients the werkzeug objects were most of our CPU per
request). Run, worker and span parameters are looked up among what the loader found, never
used to build a path.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import logging
import mimetypes
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorboard import errors
from tensorboard.backend import http_util, json_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_syncfinder.demo.sources import SOURCE_PACKS
from tb_syncfinder.models import UNPROFILED_STEP_MAX_MS, UNPROFILED_STEP_MIN_MS, TraceRef
from tb_syncfinder.plugin import api, params
from tb_syncfinder.plugin.cache import DiskCache
from tb_syncfinder.plugin.loader import TraceLoader
from tb_syncfinder.plugin.metadata import PLUGIN_NAME, TAB_NAME
from tb_syncfinder.plugin.safety import SourceError, SourceGuard, missing_source_json
from tb_syncfinder.plugin.selection import Selection, Selections, workers_of
from tb_syncfinder.plugin.settings import PluginSettings, settings_from_flags
from tb_syncfinder.plugin.workers import RERUN_MESSAGE, main_module_rerun
from tb_syncfinder.source import with_source_packs
from tb_syncfinder.summaries import SummaryStore

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"
STATIC_TYPES = {
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".woff2": "font/woff2",
}


class MethodNotAllowedError(errors.PublicError):
    http_code = 405


def make_engine_options(settings: PluginSettings) -> Any:
    """The engine's Options for these settings: source roots, path map and the demo's
    sources (so its runs resolve for a plain ``tensorboard --logdir`` from any folder)."""
    from tb_syncfinder import engine

    window_mb = settings.window_mb
    return engine.Options(
        source_roots=tuple(settings.source_roots),
        path_map=tuple(settings.path_map),
        source_packs=SOURCE_PACKS,
        window_bytes=None
        if window_mb is None
        else (max(1, int(window_mb * 1e6)) if window_mb else 0),
        step_annotation=settings.step_annotation,
    )


def _json_dumps(obj: Any) -> str:
    try:
        return json.dumps(obj, allow_nan=False, separators=(",", ":"))
    except (ValueError, TypeError):
        # NaN/inf or an odd type: TensorBoard's own cleaning turns them into valid JSON.
        return json.dumps(json_util.Cleanse(obj), separators=(",", ":"), default=str)


# ----- the answer routes' arguments ----------------------------------------------------
# Each answer route's arguments, checked, as the key of its answer and how to make it from a
# selection: a pure function of the query string (what the plugin memoises per query).
Make = Callable[[Selection], Any]


def _summary_query(request: wrappers.Request) -> tuple[tuple, Make]:
    return ("summary",), api.summary_impl


def _steps_query(request: wrappers.Request) -> tuple[tuple, Make]:
    return ("steps",), api.steps_impl


def _sites_query(request: wrappers.Request) -> tuple[tuple, Make]:
    args = dict(
        latent=params.flag(request, "latent"),
        kind=params.kind(request),
        file=params.text(request, "file"),
        op=params.text(request, "op"),
        step=params.step(request),
        sort=params.text(request, "sort"),
        order=params.text(request, "order"),
        offset=params.integer(request, "offset", 0, 0, 10**9),
        limit=params.integer(request, "limit", api.DEFAULT_LIMIT, 1, api.MAX_LIMIT),
    )
    return ("sites", *sorted(args.items())), lambda sel: api.sites_impl(sel, **args)


def _syncs_query(request: wrappers.Request) -> tuple[tuple, Make]:
    args = dict(
        latent=params.flag(request, "latent"),
        site=params.text(request, "site"),
        kind=params.kind(request),
        step=params.step(request),
        sort=params.text(request, "sort"),
        order=params.text(request, "order"),
        offset=params.integer(request, "offset", 0, 0, 10**9),
        limit=params.integer(request, "limit", api.DEFAULT_LIMIT, 1, api.MAX_LIMIT),
    )
    return ("syncs", *sorted(args.items())), lambda sel: api.syncs_impl(sel, **args)


def _sync_query(request: wrappers.Request) -> tuple[tuple, Make]:
    sync_id = params.text(request, "id", True)
    return ("sync", sync_id), lambda sel: api.sync_impl(sel, sync_id)


def _job_query(request: wrappers.Request) -> tuple[tuple, Make]:
    return ("job",), api.job_impl


ANSWER_ROUTES: dict[str, Callable[[wrappers.Request], tuple[tuple, Make]]] = {
    "/summary": _summary_query,
    "/steps": _steps_query,
    "/sites": _sites_query,
    "/syncs": _syncs_query,
    "/sync": _sync_query,
    "/job": _job_query,
}
# How long a request waits for another request's prediction of the same step time.
UNPROFILED_WAIT_S = 600.0
# Query strings whose checked arguments are kept (a repeated request skips parsing them),
# and the longest one kept.
QUERIES_MAX = 1024
QUERY_MAX_CHARS = 4096
# TensorBoard's test of a client's Accept-Encoding (http_util), for the answers sent here.
_ALLOWS_GZIP = re.compile(r"(?:^|,|\s)(?:(?:x-)?gzip|\*)(?!;q=0)(?:\s|,|$)")


@dataclass(frozen=True)
class _Query:
    """An answer route's checked arguments: the selection they name, the answer's key and
    how to make it."""

    run: str
    worker: str | None
    span: str | None
    key: tuple
    make: Make


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
        self.guard = SourceGuard(
            *with_source_packs(settings.source_roots, settings.path_map, SOURCE_PACKS)
        )
        self.loader = TraceLoader(
            settings.logdirs,
            make_engine_options(settings),
            DiskCache(settings.cache_dir),
            reload_interval_s=settings.reload_interval_s,
            max_workers=settings.max_workers or None,
            use_processes=settings.use_processes,
            analyze_fn=analyze_fn,
            summaries=SummaryStore(settings.summaries_dir),
        )
        self.selections = Selections(self.loader)
        self._queries: dict[tuple[str, str], _Query] = {}  # by (route, query string)
        self._queries_lock = threading.Lock()
        self._unprofiled_lock = threading.Lock()
        self._unprofiled_flights: dict[tuple, concurrent.futures.Future] = {}
        if start and main_module_rerun():
            # Built while multiprocessing runs the user's script again in a worker (not
            # ours): say why, and do not load all the traces again in there.
            logger.error(RERUN_MESSAGE, os.getpid(), os.getppid())
            start = False
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
        routes = {
            "/index.js": self._index_js,
            "/static/*": self._static,
            "/catalogue": self._catalogue,
            "/runs": self._runs,
            "/workers": self._workers,
            "/spans": self._spans,
            "/source": self._source,
            "/compare": self._compare,
            "/export": self._export,
            "/unprofiled": self._unprofiled,
        }
        apps = {route: self._wsgi(handler) for route, handler in routes.items()}
        for route, parse in ANSWER_ROUTES.items():
            apps[route] = self._answer_app(route, parse)
        return apps

    def _wsgi(self, handler: Callable[[wrappers.Request], Any]) -> Callable:
        """A WSGI app for a handler: client errors as JSON, and no 500 from request content."""

        @functools.wraps(handler)
        def app(environ: dict, start_response: Callable) -> Any:
            request = wrappers.Request(environ)
            try:
                if request.method not in ("GET", "HEAD"):
                    raise MethodNotAllowedError(f"method {request.method} not allowed; use GET")
                response = handler(request)
            except errors.PublicError as exc:
                body = {"error": getattr(exc, "message", None) or str(exc)}
                hint = getattr(exc, "hint", None)
                if hint:
                    body["hint"] = hint
                # RFC 9110: a 405 says which methods the route takes.
                allow = [("Allow", "GET, HEAD")] if exc.http_code == 405 else None
                response = self._respond(request, body, exc.http_code, allow)
            except Exception:  # noqa: BLE001 - a bug, not a request error: log it, stay JSON
                # repr: the path is the client's; a NUL or a newline in it must not reach
                # the log as one (a forged log line).
                logger.exception("%s: %r failed", PLUGIN_NAME, request.path)
                response = self._respond(request, {"error": "internal error (see the log)"}, 500)
            return response(environ, start_response)

        return app

    @staticmethod
    def _respond(
        request: wrappers.Request,
        obj: Any,
        status: int = 200,
        headers: list[tuple[str, str]] | None = None,
    ) -> Any:
        return http_util.Respond(
            request, _json_dumps(obj), "application/json", code=status, headers=headers
        )

    @staticmethod
    def _answer(
        request: wrappers.Request, sel: Selection, key: tuple, make: Callable[[], Any]
    ) -> Any:
        """A selection's answer, encoded once (TensorBoard unzips it for a client that does
        not take gzip)."""
        return http_util.Respond(
            request, sel.answer(key, make).gzip, "application/json", content_encoding="gzip"
        )

    def _answer_app(
        self, route: str, parse: Callable[[wrappers.Request], tuple[tuple, Make]]
    ) -> Callable:
        """The WSGI app of an answer route: a GET whose arguments were seen before and whose
        answer is kept is a few dictionary lookups and one write; anything else (first
        sight, an error, HEAD, another method) goes the full way, as every route does."""

        def handler(request: wrappers.Request) -> Any:
            sel = self._selection(request)
            key, make = parse(request)
            return self._answer(request, sel, key, lambda: make(sel))

        handler.__name__ = handler.__qualname__ = "_" + route.strip("/")
        full = self._wsgi(handler)

        def app(environ: dict, start_response: Callable) -> Any:
            if environ.get("REQUEST_METHOD") == "GET":
                sent = self._send_kept(route, parse, environ, start_response)
                if sent is not None:
                    return sent
            return full(environ, start_response)

        return app

    def _send_kept(
        self,
        route: str,
        parse: Callable[[wrappers.Request], tuple[tuple, Make]],
        environ: dict,
        start_response: Callable,
    ) -> list[bytes] | None:
        """The answer as ``_answer`` and ``http_util.Respond`` send it (same headers, same
        bytes), without building werkzeug's request and response; None when the full path
        must answer (arguments that do not check, an unknown run, any error: it answers
        them with their JSON error, in its order)."""
        query_string = environ.get("QUERY_STRING", "")
        query = self._queries.get((route, query_string))
        if query is None:
            if len(query_string) > QUERY_MAX_CHARS:
                return None
            request = wrappers.Request(environ)
            try:
                worker = params.text(request, "worker")
                span = params.text(request, "span")
                run = params.text(request, "run", required=True)
                key, make = parse(request)
            except errors.PublicError:
                return None
            query = _Query(run, worker, span, key, make)  # type: ignore[arg-type]
            with self._queries_lock:
                self._queries[(route, query_string)] = query
                while len(self._queries) > QUERIES_MAX:
                    self._queries.pop(next(iter(self._queries)))
        try:
            run_state = self.selections.lookup(query.run, query.worker, query.span)
            sel = self.selections.get(run_state, query.worker, query.span)
            answer = sel.answer(query.key, lambda: query.make(sel))
        except Exception:  # noqa: BLE001 - the full path answers it (as JSON, logged)
            return None
        if _ALLOWS_GZIP.search(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body, encoding = answer.gzip, [("Content-Encoding", "gzip")]
        else:
            body, encoding = sel.plain(query.key, answer), []
        start_response(
            "200 OK",
            [
                ("Content-Length", str(len(body))),
                ("X-Content-Type-Options", "nosniff"),
                *encoding,
                ("Expires", "0"),
                ("Cache-Control", "no-cache, must-revalidate"),
                ("Content-Type", "application/json"),
            ],
        )
        return [body]

    def _selection(self, request: wrappers.Request) -> Selection:
        worker = params.text(request, "worker")
        span = params.text(request, "span")
        run = self.selections.lookup(params.text(request, "run", required=True), worker, span)
        return self.selections.get(run, worker, span)

    # ----- static ---------------------------------------------------------------------
    def _index_js(self, request: wrappers.Request) -> Any:
        return self._static_file(request, "index.js")

    def _static(self, request: wrappers.Request) -> Any:
        return self._static_file(request, request.path.rsplit("/static/", 1)[-1])

    def _static_file(self, request: wrappers.Request, name: str) -> Any:
        root = STATIC_DIR.resolve()
        try:
            path = (root / name).resolve()
            outside = not path.is_relative_to(root) or path.suffix not in STATIC_TYPES
            found = not outside and path.is_file()
        except (OSError, ValueError):  # a NUL byte, a name part over 255 bytes
            outside = True
        if outside:
            raise errors.NotFoundError(f"no static file {name!r}")
        if not found:
            missing = errors.NotFoundError(f"dashboard file tb_syncfinder/static/{name} is missing")
            missing.hint = "build the dashboard: cd frontend && npm ci && npm run build"
            raise missing
        content_type = STATIC_TYPES.get(path.suffix) or mimetypes.guess_type(name)[0]
        try:
            body = path.read_bytes()
        except OSError:  # gone since the check (a build rewriting static/ while served)
            raise errors.NotFoundError(f"no static file {name!r}") from None
        return http_util.Respond(request, body, content_type)

    # ----- JSON routes ----------------------------------------------------------------
    def _catalogue(self, request: wrappers.Request) -> Any:
        return self._respond(request, api.catalogue_impl())

    def _runs(self, request: wrappers.Request) -> Any:
        return self._respond(request, api.runs_impl(self.loader))

    def _workers(self, request: wrappers.Request) -> Any:
        run = self.selections.lookup(params.text(request, "run", required=True))
        return self._respond(request, {"workers": workers_of(self.loader, run)})

    def _spans(self, request: wrappers.Request) -> Any:
        worker = params.text(request, "worker", required=True)
        run = self.selections.lookup(params.text(request, "run", required=True), worker)
        spans = {w["name"]: w["spans"] for w in workers_of(self.loader, run)}
        return self._respond(request, {"spans": spans.get(worker, [])})

    def _source(self, request: wrappers.Request) -> Any:
        file = params.text(request, "file", required=True)
        line = params.integer(request, "line", 1, 1, 10**9)
        context = params.integer(request, "context", 5, 0, 50)
        # A file that is not there, or not served (a trace from another machine names its
        # frames by paths outside the source roots: the usual case), is expected: a client
        # that asks for it so (the dashboard) gets a 200 answer saying so, not a 404 or
        # 403 its browser logs as an error once per site opened. A bad request stays a 400.
        missing_ok = params.flag(request, "missing_ok")
        try:
            body = self.guard.read(file, line, context).to_json()
        except SourceError as exc:
            if not (missing_ok and exc.status in (403, 404)):
                raise
            body = missing_source_json(file, line, exc)
        return self._respond(request, body)

    def _unprofiled(self, request: wrappers.Request) -> Any:
        """The saving without the profiler for the step time the user measured without it
        (``step_ms``): the selection's replayed traces analysed again with it, once per
        step time while the selection stands (kept with its other answers)."""
        worker = params.text(request, "worker")
        span = params.text(request, "span")
        run = self.selections.lookup(params.text(request, "run", required=True), worker, span)
        step_ms = params.number(request, "step_ms", UNPROFILED_STEP_MIN_MS, UNPROFILED_STEP_MAX_MS)
        sel = self.selections.get(run, worker, span)
        answer = self._unprofiled_once(
            sel,
            ("unprofiled", step_ms),
            lambda: api.unprofiled_impl(self.loader, run, worker, span, step_ms),
        )
        return http_util.Respond(request, answer.gzip, "application/json", content_encoding="gzip")

    def _unprofiled_once(self, sel: Selection, key: tuple, make: Callable[[], Any]) -> Any:
        """``sel.answer(key, make)``, made once at a time per selection and step time: a
        second request for it (a reload, another tab) waits for the first one's answer, or
        its error, instead of replaying again. Other step times go on beside it, as far as
        the pool has places (``TraceLoader.analyze_again``)."""
        flight_key = (sel.token, key)
        with self._unprofiled_lock:
            found = sel.kept(key)
            if found is not None:
                return found
            flight = self._unprofiled_flights.get(flight_key)
            owner = flight is None
            if owner:
                flight = self._unprofiled_flights[flight_key] = concurrent.futures.Future()
        assert flight is not None
        if not owner:
            try:
                return flight.result(timeout=UNPROFILED_WAIT_S)
            except concurrent.futures.TimeoutError:
                raise api.UnavailableError(
                    "the same prediction without the profiler is still being made: ask again soon"
                ) from None
        try:
            answer = sel.answer(key, make)
        except BaseException as exc:
            flight.set_exception(exc)
            raise
        else:
            flight.set_result(answer)
            return answer
        finally:
            with self._unprofiled_lock:
                self._unprofiled_flights.pop(flight_key, None)

    def _refuse_a_trace_changed_since_analysis(self, sel: Selection) -> None:
        """The annotated trace reads its file again: one replaced since its analysis (and
        before the next poll sees it) would get the old analysis's findings drawn onto
        other events. 409 then, and for a file removed since."""
        readable = [t for t in sel.report_json.get("traces") or [] if not t.get("error")]
        run = self.loader.get_run(sel.run)
        state = run.traces.get(readable[0]["path"]) if run and len(readable) == 1 else None
        if state is not None:
            api.refuse_traces_changed_since_analysis([state], "export again then")

    def _compare(self, request: wrappers.Request) -> Any:
        new = self._selection(request)
        base_worker = params.text(request, "base_worker")
        base_span = params.text(request, "base_span")
        base_run = self.selections.lookup(
            params.text(request, "base", required=True), base_worker, base_span, what="base"
        )
        base = self.selections.get(base_run, base_worker, base_span)
        return self._respond(request, api.compare_impl(base, new))

    def _export(self, request: wrappers.Request) -> Any:
        sel = self._selection(request)
        fmt = params.text(request, "format") or "json"
        stem = [sel.run, params.text(request, "worker"), params.text(request, "span")]
        if fmt == "trace":
            self._refuse_a_trace_changed_since_analysis(sel)
        body, media_type, disposition = api.export_impl(sel, fmt, stem)
        return http_util.Respond(
            request, body, media_type, headers=[("Content-Disposition", disposition)]
        )
