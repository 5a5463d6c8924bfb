"""The reports the routes answer from: one per selection (a run, optionally one worker and
span), built by the engine's job-level stages from what the loader has analysed, memoised
until the run changes (its generation), and built once even under concurrent requests."""

from __future__ import annotations

import gzip
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tensorboard import errors

from tb_syncfinder.plugin.loader import RunState, TraceLoader

MEMO_SIZE = 32  # selections kept; each is one selection of one run
ANSWERS_PER_SELECTION = 256  # encoded answers kept per selection (pages, details, ...)


@dataclass
class Selection:
    """One memoised report: a run's traces filtered by worker and span."""

    run: str
    report_json: dict[str, Any]
    syncs_by_id: dict[str, dict[str, Any]]
    sites_by_key: dict[str, dict[str, Any]]
    contexts: dict[str, dict[str, Any]]
    loading: bool
    top_kinds: list[dict[str, Any]]  # count and host wait per kind, costliest first
    # Answers already sent, as gzipped JSON, by route and arguments: a selection never
    # changes (a changed run is a new selection), so under load a repeated request costs
    # a lookup instead of filtering, encoding and compressing again.
    _answers: OrderedDict[tuple, bytes] = field(default_factory=OrderedDict, repr=False)
    _answers_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def answer(self, key: tuple, make: Callable[[], Any]) -> bytes:
        """The gzipped JSON of ``make()``, computed once per ``key``."""
        with self._answers_lock:
            found = self._answers.get(key)
            if found is not None:
                self._answers.move_to_end(key)
                return found
        body = gzip_json(make())
        with self._answers_lock:
            self._answers[key] = body
            while len(self._answers) > ANSWERS_PER_SELECTION:
                self._answers.popitem(last=False)
        return body


def gzip_json(value: Any) -> bytes:
    """Strict JSON (non-finite numbers as null), gzipped as TensorBoard would (level 3, no
    timestamp: the same answer is the same bytes)."""
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (ValueError, TypeError):
        from tensorboard.backend import json_util

        text = json.dumps(json_util.Cleanse(value), separators=(",", ":"), default=str)
    return gzip.compress(text.encode("utf-8"), compresslevel=3, mtime=0)


def _top_kinds(syncs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_kind: dict[str, dict[str, Any]] = {}
    for sync in syncs:
        entry = by_kind.setdefault(
            sync["kind"], {"kind": sync["kind"], "count": 0, "host_wait_us": 0.0}
        )
        entry["count"] += 1
        entry["host_wait_us"] += sync["host_wait_us"] or 0.0
    return sorted(by_kind.values(), key=lambda k: (-k["host_wait_us"], -k["count"]))


def workers_of(loader: TraceLoader, run: RunState) -> list[dict[str, Any]]:
    """The run's workers, each with its spans (as the PyTorch Profiler tab orders them)."""
    spans: dict[str, set] = {}
    with loader.lock:  # the loader thread edits run.traces
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


class Selections:
    """Looks up runs, workers and spans and memoises their reports."""

    def __init__(self, loader: TraceLoader) -> None:
        self.loader = loader
        self._memo: OrderedDict[tuple, Selection] = OrderedDict()
        self._memo_lock = threading.Lock()
        self._build_locks: dict[tuple, threading.Lock] = {}
        self._indexes: OrderedDict[tuple, dict[str, set[str | None]]] = OrderedDict()

    def lookup(
        self,
        run_name: str | None,
        worker: str | None = None,
        span: str | None = None,
        what: str = "run",
    ) -> RunState:
        """The run, after checking that worker and span name something it holds."""
        if run_name is None:
            raise errors.InvalidArgumentError(f"parameter {what!r} is required")
        run = self.loader.get_run(run_name)
        if run is None:
            raise errors.NotFoundError(f"unknown run {run_name!r}")
        spans_by_worker = self._spans_by_worker(run)
        if worker is not None and worker not in spans_by_worker:
            raise errors.NotFoundError(f"unknown worker {worker!r} in run {run_name!r}")
        if span is not None and not any(
            span in spans
            for name, spans in spans_by_worker.items()
            if worker is None or name == worker
        ):
            raise errors.NotFoundError(f"unknown span {span!r} in run {run_name!r}")
        return run

    def _spans_by_worker(self, run: RunState) -> dict[str, set[str | None]]:
        """The run's workers and their spans, indexed once per run generation (a lookup
        per request must not walk a 1,000-trace run)."""
        # A trace found but not yet analysed joins the run without a new generation: the
        # count of traces tells that the index is stale.
        with self.loader.lock:
            key = (id(run), run.generation, len(run.traces))
        with self._memo_lock:
            found = self._indexes.get(key)
        if found is not None:
            return found
        index: dict[str, set[str | None]] = {}
        with self.loader.lock:
            for state in run.traces.values():
                index.setdefault(state.ref.worker, set()).add(state.ref.span)
        with self._memo_lock:
            self._indexes[key] = index
            while len(self._indexes) > MEMO_SIZE:
                self._indexes.popitem(last=False)
        return index

    def get(self, run: RunState, worker: str | None, span: str | None) -> Selection:
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
        from tb_syncfinder.engine import report_runs

        with self.loader.lock:
            loading = run.loading
        results = self.loader.results(run, worker, span)
        report_json = report_runs(results).report.to_json()
        syncs_by_id = {s["id"]: s for s in report_json["syncs"] + report_json["latent"]}
        sites_by_key = {
            s["key"]: s for s in report_json["sites"] + report_json.get("latent_sites", [])
        }
        contexts: dict[str, dict[str, Any]] = {}
        for result in results:
            contexts.update(result.contexts or {})
        return Selection(
            run.name,
            report_json,
            syncs_by_id,
            sites_by_key,
            contexts,
            loading,
            _top_kinds(report_json["syncs"]),
        )
