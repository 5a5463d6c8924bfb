"""The reports the routes answer from: one per selection (a run, optionally one worker and
span), built by the engine's job-level stages from what the loader has analysed, memoised
until the run changes (its generation), and built once even under concurrent requests."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from tensorboard import errors

from tb_syncfinder.plugin.loader import RunState, TraceLoader

MEMO_SIZE = 32  # selections kept; each is one selection of one run


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
        {"name": worker,
         "spans": sorted(values, key=lambda s: (s is not None, len(s or ""), s or ""))}
        for worker, values in sorted(spans.items())
    ]


class Selections:
    """Looks up runs, workers and spans and memoises their reports."""

    def __init__(self, loader: TraceLoader) -> None:
        self.loader = loader
        self._memo: OrderedDict[tuple, Selection] = OrderedDict()
        self._memo_lock = threading.Lock()
        self._build_locks: dict[tuple, threading.Lock] = {}

    def lookup(self, run_name: str | None, worker: str | None = None,
               span: str | None = None, what: str = "run") -> RunState:
        """The run, after checking that worker and span name something it holds."""
        if run_name is None:
            raise errors.InvalidArgumentError(f"parameter {what!r} is required")
        run = self.loader.get_run(run_name)
        if run is None:
            raise errors.NotFoundError(f"unknown run {run_name!r}")
        with self.loader.lock:
            refs = [t.ref for t in run.traces.values()]
        if worker is not None and not any(r.worker == worker for r in refs):
            raise errors.NotFoundError(f"unknown worker {worker!r} in run {run_name!r}")
        if span is not None and not any(
            r.span == span and (worker is None or r.worker == worker) for r in refs
        ):
            raise errors.NotFoundError(f"unknown span {span!r} in run {run_name!r}")
        return run

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
        return Selection(run.name, report_json, syncs_by_id, sites_by_key, contexts, loading,
                         _top_kinds(report_json["syncs"]))
