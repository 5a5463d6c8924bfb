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
# Encoded answers kept, over all selections: they are a cache of what the routes computed,
# bounded in count and in bytes (a gzipped answer, plus its plain form once a client that
# does not take gzip asked for it).
ANSWERS_MAX = 4096
ANSWERS_MAX_BYTES = 64 * 2**20


class Answer:
    """One route's answer as JSON, gzipped (what a browser takes) and, once asked for,
    plain (what a client without ``Accept-Encoding: gzip`` gets)."""

    __slots__ = ("gzip", "_plain")

    def __init__(self, gzipped: bytes) -> None:
        self.gzip = gzipped
        self._plain: bytes | None = None

    @property
    def plain(self) -> bytes:
        plain = self._plain
        if plain is None:
            plain = self._plain = gzip.decompress(self.gzip)
        return plain

    @property
    def has_plain(self) -> bool:
        return self._plain is not None

    @property
    def size(self) -> int:
        return len(self.gzip) + (len(self._plain) if self._plain is not None else 0)


class AnswerCache:
    """Answers by (selection, route and arguments), least recently used dropped first when
    over ``max_entries`` or ``max_bytes``. A selection never changes (a changed run is a new
    selection, see ``Selections.get``), so an answer is valid for as long as it is kept;
    ``drop`` forgets a selection's answers when the selection itself is dropped."""

    def __init__(self, max_entries: int = ANSWERS_MAX, max_bytes: int = ANSWERS_MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[tuple, tuple[Answer, int]] = OrderedDict()
        self._keys_of: dict[tuple, set[tuple]] = {}  # selection token -> its answer keys
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, token: tuple, key: tuple) -> Answer | None:
        with self._lock:
            found = self._entries.get((token, key))
            if found is None:
                return None
            self._entries.move_to_end((token, key))
            return found[0]

    def put(self, token: tuple, key: tuple, answer: Answer) -> Answer:
        """Keeps ``answer`` (or the one another thread kept first) and returns it; one over
        the whole budget is returned but not kept (it would push out every other)."""
        with self._lock:
            found = self._entries.get((token, key))
            if found is not None:
                return found[0]
            if answer.size > self.max_bytes:
                return answer
            self._entries[(token, key)] = (answer, answer.size)
            self._keys_of.setdefault(token, set()).add(key)
            self.bytes += answer.size
            self._shrink()
        return answer

    def resized(self, token: tuple, key: tuple) -> None:
        """An answer grew (its plain form was made): count it and keep within bounds."""
        with self._lock:
            found = self._entries.get((token, key))
            if found is None:
                return
            answer, counted = found
            if answer.size > self.max_bytes:
                self._pop(token, key)
                return
            self.bytes += answer.size - counted
            self._entries[(token, key)] = (answer, answer.size)
            self._shrink()

    def drop(self, token: tuple) -> None:
        """Forgets a selection's answers."""
        with self._lock:
            for key in list(self._keys_of.get(token, ())):
                self._pop(token, key)

    def _pop(self, token: tuple, key: tuple) -> None:
        _, counted = self._entries.pop((token, key))
        self.bytes -= counted
        keys = self._keys_of[token]
        keys.discard(key)
        if not keys:
            del self._keys_of[token]

    def _shrink(self) -> None:
        while self._entries and (
            len(self._entries) > self.max_entries or self.bytes > self.max_bytes
        ):
            self._pop(*next(iter(self._entries)))


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
    # Answers already sent, by route and arguments, kept in the ``Selections``' shared
    # cache under this selection's memo key: a selection never changes (a changed run is
    # a new selection), so under load a repeated request costs a lookup instead of
    # filtering, encoding and compressing again.
    token: tuple = ()
    answers: AnswerCache | None = field(default=None, repr=False)

    def answer(self, key: tuple, make: Callable[[], Any]) -> Answer:
        """``make()`` as JSON, computed once per ``key`` while the cache keeps it."""
        cache = self.answers
        if cache is None:
            return Answer(gzip_json(make()))
        found = cache.get(self.token, key)
        if found is not None:
            return found
        return cache.put(self.token, key, Answer(gzip_json(make())))

    def kept(self, key: tuple) -> Answer | None:
        """The answer made for ``key`` if the cache still keeps it."""
        return None if self.answers is None else self.answers.get(self.token, key)

    def plain(self, key: tuple, answer: Answer) -> bytes:
        """``answer``'s plain JSON, made once and counted in the cache's bytes."""
        made = answer.has_plain
        plain = answer.plain
        if not made and self.answers is not None:
            self.answers.resized(self.token, key)
        return plain


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


def _superseded(old: tuple, new: tuple) -> bool:
    """Whether memo key ``old`` is an older state of the selection ``new`` names: keys are
    (run name, worker, span, generation, id of the run's state)."""
    return old[:3] == new[:3] and (old[4] != new[4] or old[3] < new[3])


class Selections:
    """Looks up runs, workers and spans and memoises their reports."""

    def __init__(self, loader: TraceLoader) -> None:
        self.loader = loader
        self._memo: OrderedDict[tuple, Selection] = OrderedDict()
        self._memo_lock = threading.Lock()
        self._build_locks: dict[tuple, threading.Lock] = {}
        self._indexes: OrderedDict[tuple, dict[str, set[str | None]]] = OrderedDict()
        self.answers = AnswerCache()

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
                    found.token, found.answers = key, self.answers
                    with self._memo_lock:
                        # The same selection of an older generation (or of a run since
                        # removed and found again) is not asked for again: drop it and its
                        # answers now rather than when they age out.
                        dropped = [k for k in self._memo if _superseded(k, key)]
                        self._memo[key] = found
                        while len(self._memo) > MEMO_SIZE:
                            dropped.append(self._memo.popitem(last=False)[0])
                        for old in dropped:
                            self._memo.pop(old, None)
                    for old in dropped:
                        self.answers.drop(old)
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
