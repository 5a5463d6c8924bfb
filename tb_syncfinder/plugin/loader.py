"""Background, progressive loading of the traces under TensorBoard's logdir(s).

One daemon thread polls the logdirs (like torch-tb-profiler's ``_monitor_runs``), finds runs
with ``discovery.list_runs`` and hands each new or changed trace file to a bounded pool
(at most ``max_workers`` files parsed at once, not one process per file): the analysis
processes of ``workers.ProcessPool``, clean interpreters that never run the script that
started TensorBoard again (as multiprocessing's spawn would: issue 14), or threads where
processes cannot start. A trace becomes browsable as soon as its own analysis finishes, so
the first run can be read while others load. Results are kept in the disk cache, keyed by
path, size and mtime, so a restart does not analyse again. A file still being written is
retried on a later poll instead of being marked broken forever; every other failure is
data: an error entry naming the reason. An old, unchanged file that reads as truncated
(a writer that died) is such a failure too, cached like a result: it is not read again
until it changes.

Smallest first: the loader keeps the traces waiting for analysis itself and hands the pool
one per free process, the smallest first (``next_trace``), so a small run is usable in
seconds while big traces queue. A big trace still starts: one that smaller traces passed
while it waited for as many bytes as its own is next, and big traces (``BIG_TRACE_BYTES``)
never take the last free process while others run, so a small run found later does not
wait behind them either.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tb_syncfinder.discovery import (
    UNNAMED_TRACE_REASON,
    stat_trace,
    unnamed_traces,
    unread_ascend_folders,
    unread_ascend_reason,
)
from tb_syncfinder.models import (
    Stamp,
    TraceInfo,
    TraceRef,
    file_stamps,
    result_stamps,
    stamp_holds,
)
from tb_syncfinder.plugin.cache import DiskCache, cache_key
from tb_syncfinder.plugin.workers import ProcessPool, WorkerDied, WorkerStartError
from tb_syncfinder.reader import settled_truncation
from tb_syncfinder.summaries import SummaryStore, has_summaries

logger = logging.getLogger(__name__)

# States of one trace file.
PENDING = "pending"  # found, waiting for (re)analysis
RUNNING = "running"  # in the pool
DONE = "done"  # analysed (its result may still carry info.error from the engine)
RETRY = "retry"  # looked incomplete: analysed again on the next poll
ERROR = "error"  # failed for good (until the file changes)
# In a summarised run (one where `tb-syncfinder report --write-summaries` or `--ray` left
# per-trace summaries), a trace without a valid summary is listed, not parsed: a 1,000-rank
# job is summarised on its cluster, and TensorBoard must not parse it all again itself.
NO_SUMMARY = "no_summary"

# A file read while its writer is still at it fails like this; such a failure is retried.
TRANSIENT_MARKERS = (
    "truncat",
    "incomplete",
    "unexpected end",
    "end of file",
    "eof",
    "compressed file ended",
    "unterminated",
    "input data ended",
)
# An unchanged file that keeps failing with a transient-looking error is given up on after
# this many polls (it is retried again as soon as its size or mtime changes); so is a
# trace whose analysis process died this many times.
MAX_TRANSIENT_ATTEMPTS = 3
# A truncated-looking file whose mtime is older than this is not being written: its read
# is a final answer (cached like a result, read again only once the file changes). One
# written to more recently (or with no known mtime: a remote file) is read again on the
# next polls, up to MAX_TRANSIENT_ATTEMPTS reads of the same size and mtime.
WRITING_QUIET_S = 60.0
# A trace at least this large (a gzip file counts as GZIP_RATIO times its size) never
# takes the last free analysis process while another runs: small traces, also those found
# later, always have one. Analysed in seconds below it (and never split into windows).
BIG_TRACE_BYTES = 64 << 20
GZIP_RATIO = 8
# How long a request for traces analysed again with other options (``analyze_again``)
# waits for them all: a 1 GB trace read in windows takes minutes.
AGAIN_TIMEOUT_S = 600.0
BEING_WRITTEN = "being written: the file changed while it was read (read again on the next scan)"


def looks_transient(reason: str) -> bool:
    """True when a read error suggests the file was still being written."""
    text = reason.lower()
    return any(marker in text for marker in TRANSIENT_MARKERS)


def _file_version(path: str) -> tuple[int | None, int | None]:
    """``stat_trace``, with a symbolic link to nothing as (None, None): such a link is
    listed at every poll, so it is analysed once and the reader names where it points (as
    the CLI does), where it had been left out silently: a run of it alone read as a trace
    without device activity."""
    try:
        return stat_trace(path)
    except OSError:
        if os.path.islink(path):
            return None, None
        raise


def queue_weight(path: str, size: int | None) -> int:
    """About how much JSON a trace holds, from its file's size: what orders the queue."""
    if size is None:
        return 0
    return size * GZIP_RATIO if path.endswith(".gz") else size


def next_trace(
    waiting: Sequence[TraceState], running: Sequence[TraceState], max_workers: int
) -> TraceState | None:
    """The trace to analyse next (None: none may start now): the oldest one that smaller
    traces passed by as many bytes as its own, else the smallest; a big one only while
    another process stays free for the small ones (or where there is a single process)."""
    big_running = sum(1 for state in running if state.weight >= BIG_TRACE_BYTES)
    big_may_start = max_workers == 1 or big_running + 1 < max_workers
    candidates = [s for s in waiting if big_may_start or s.weight < BIG_TRACE_BYTES]
    if not candidates:
        return None
    due = [s for s in candidates if s.passed_by >= s.weight > 0]
    if due:
        return min(due, key=lambda s: s.queued)
    return min(candidates, key=lambda s: (s.weight, s.queued))


def analyze_in_worker(ref: TraceRef, options: Any) -> Any:
    """Pool entry point (top level so that a process pool can pickle it)."""
    from tb_syncfinder import engine

    return engine.analyze_trace(ref, options)


def error_result(ref: TraceRef, reason: str) -> Any:
    """A TraceResult that only says why ``ref`` could not be analysed."""
    from tb_syncfinder.models import TraceResult

    info = TraceInfo(path=ref.path, worker=ref.worker, span=ref.span, run=ref.run, error=reason)
    return TraceResult(info=info, syncs=[], latent=[], steps=[], contexts={})


@dataclass
class TraceState:
    ref: TraceRef
    size: int | None
    mtime_ns: int | None
    status: str = PENDING
    result: Any = None  # engine.TraceResult once analysed
    error: str | None = None
    attempts: int = 0  # consecutive transient failures of this file version
    # The file looks like it is still being written (its last read was truncated, or it
    # changed while it was read): shown as such until a read settles it either way. Kept
    # across the file's versions while it grows, so it never drops out of the error list
    # between two reads.
    being_written: bool = False
    from_summary: bool = False  # its result was read from its per-trace summary
    # Size and mtime of each source file the result's lines were resolved in (None: gone),
    # when settled from an analysis or the disk cache: a poll that finds one changed has
    # the trace analysed again, so the lines follow the user's edits while TensorBoard runs.
    source_stamps: dict[str, Stamp | None] | None = None
    # The result of the version before, served while this one is analysed when only its
    # source files changed (the trace is the same: its findings stay listed meanwhile).
    previous_result: Any = None
    # The analysis queue (RUNNING covers both waiting in it and being analysed): the order
    # it joined in, how many bytes of smaller traces started before it meanwhile, and
    # whether it was handed to the pool.
    queued: int = 0
    passed_by: int = 0
    in_pool: bool = False

    @property
    def weight(self) -> int:
        return queue_weight(self.ref.path, self.size)


@dataclass
class RunState:
    name: str
    traces: dict[str, TraceState] = field(default_factory=dict)  # by path
    # Bumped whenever what results() returns for this run changes (a trace analysed, failed
    # for good, changed or removed): the plugin memoises reports, and their "loading" flag,
    # per (run, worker, span, generation).
    generation: int = 0
    # Some trace of this run has a summary file: traces without a valid one are NO_SUMMARY.
    summarised: bool = False

    @property
    def loading(self) -> bool:
        return any(t.status in (PENDING, RUNNING, RETRY) for t in self.traces.values())


def _prefixed(prefix: str | None, run: str) -> str:
    return f"{prefix}/{run}" if prefix else run


class TraceLoader:
    """Polls ``logdirs`` ([(run name prefix or None, path)]) and analyses what it finds."""

    def __init__(
        self,
        logdirs: list[tuple[str | None, str]],
        options: Any,
        cache: DiskCache,
        *,
        reload_interval_s: float = 10.0,
        max_workers: int | None = None,
        use_processes: bool = True,
        analyze_fn: Callable[[TraceRef, Any], Any] | None = None,
        list_runs_fn: Callable[[str], dict[str, list[TraceRef]]] | None = None,
        summaries: SummaryStore | None = None,
    ) -> None:
        self.logdirs = logdirs
        # The memory share below is left out: it decides only whether a trace is read
        # whole or in windows, which give the same findings.
        self.options_digest = hashlib.sha256(repr(options).encode()).hexdigest()[:16]
        self.cache = cache
        self.reload_interval_s = reload_interval_s
        self.max_workers = max_workers or min(4, os.cpu_count() or 1)
        # Large traces run side by side in at most this many workers (``next_trace``):
        # each may count on that share of the memory when it sizes its windows.
        big_at_once = 1 if self.max_workers == 1 else self.max_workers - 1
        self.options = (
            msgspec.structs.replace(options, memory_share=1.0 / big_at_once)
            if isinstance(options, msgspec.Struct) and hasattr(options, "memory_share")
            else options
        )
        # An injected analyse function (tests) need not be picklable: run it in threads.
        self.use_processes = use_processes and analyze_fn is None
        self.analyze_fn = analyze_fn or analyze_in_worker
        if list_runs_fn is None:
            from tb_syncfinder.discovery import list_runs as list_runs_fn
        self.list_runs_fn = list_runs_fn
        self.summaries = summaries

        self.lock = threading.RLock()
        self.runs: dict[str, RunState] = {}
        self.logdir_errors: list[dict[str, Any]] = []  # a logdir that cannot be listed
        # What each JSON file's first bytes said (a trace under another name or not), by
        # (path, size, mtime): a poll reads only new and changed files' (``unnamed_traces``).
        self._first_bytes: dict[tuple[str, int, int], bool] = {}
        self.found_any = False  # cheap answer for is_active()
        self.polled_once = False
        self.changed = threading.Condition(self.lock)  # notified when a trace settles
        self._place_freed = threading.Condition(self.lock)  # a place in the pool freed

        self._executor: concurrent.futures.Executor | None = None
        # Traces to analyse, and those in the pool (at most max_workers): see next_trace.
        self._waiting: list[TraceState] = []
        self._in_pool: list[TraceState] = []
        self._queue_order = itertools.count()
        self._dispatching = False
        self._dispatch_again = False
        # What "now" is for a file's mtime (tests move it).
        self.clock: Callable[[], float] = time.time
        # Each notebook a result's lines came from, as the poll last read it (its stamp
        # with its code digest): read again only once it is saved (``file_stamps``).
        self._notebooks_read: dict[str, Stamp] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()

    # ----- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        """Start the polling thread (daemon: it never keeps TensorBoard from exiting)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._poll_forever, name="sync_advisor_loader", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self.lock:
            executor, self._executor = self._executor, None
            self._waiting.clear()
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def reload_now(self) -> None:
        """Ask the thread for a poll without waiting for the interval."""
        self._wake.set()

    def _poll_forever(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - the thread must survive anything
                logger.exception("sync_advisor: polling the logdir failed")
            self._wake.wait(self.reload_interval_s)
            self._wake.clear()

    # ----- state for the plugin ---------------------------------------------------------
    @property
    def loading(self) -> bool:
        with self.lock:
            return not self.polled_once or any(r.loading for r in self.runs.values())

    @property
    def busy(self) -> bool:
        """True until a poll happened and no trace is queued or being analysed."""
        with self.lock:
            return not self.polled_once or any(
                t.status in (PENDING, RUNNING)
                for r in self.runs.values()
                for t in r.traces.values()
            )

    def run_names(self) -> list[str]:
        with self.lock:
            return list(self.runs)

    def get_run(self, name: str) -> RunState | None:
        with self.lock:
            return self.runs.get(name)

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until a poll has happened and nothing is queued or running (tests, bench).

        Files waiting for a retry on the next poll do not count: they wait for the writer.
        """
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while self.busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.2))
        return True

    # ----- polling ----------------------------------------------------------------------
    def discover(self) -> dict[str, list[TraceRef]]:
        """Runs of every logdir, named with their logdir's prefix when there are several."""
        found: dict[str, list[TraceRef]] = {}
        errors = []
        for prefix, logdir in self.logdirs:
            try:
                runs = self.list_runs_fn(logdir)
            except Exception as exc:  # noqa: BLE001 - reported, other logdirs still load
                errors.append({"path": logdir, "run": None, "reason": str(exc)})
                continue
            for run, refs in runs.items():
                name = _prefixed(prefix, run)
                found[name] = [msgspec.structs.replace(ref, run=name) for ref in refs]
            # torch_npu's folders with nothing to read yet (raw data, a database export):
            # no run of them appears, so say why where the unreadable files are listed.
            errors.extend(
                {"path": folder, "run": None, "reason": unread_ascend_reason(folder, why)}
                for folder, why in unread_ascend_folders(logdir)
            )
            # A trace under a name of the user's: passed over, as by the Profiler tab.
            if len(self._first_bytes) > 10_000:  # files rewritten poll after poll
                self._first_bytes.clear()
            errors.extend(
                {"path": file, "run": None, "reason": UNNAMED_TRACE_REASON}
                for file in unnamed_traces(logdir, memo=self._first_bytes)
            )
        with self.lock:
            self.logdir_errors = errors
        return found

    def poll(self) -> None:
        """One scan: pick up new, changed and removed traces; submit what needs analysis."""
        found = self.discover()
        sources_now = self._source_files_now()
        to_submit: list[TraceState] = []
        with self.lock:
            for name in list(self.runs):
                if name not in found:
                    del self.runs[name]
            for name, refs in found.items():
                run = self.runs.setdefault(name, RunState(name))
                paths = {ref.path for ref in refs}
                for path in list(run.traces):
                    if path not in paths:
                        del run.traces[path]
                        run.generation += 1
                run.summarised = self._is_summarised(run, refs)
                for ref in refs:
                    self.found_any = True
                    state = self._refresh(run, ref, sources_now)
                    if state is not None:
                        to_submit.append(state)
            # In the order a restart lists them (each logdir's runs by name): a run found
            # while TensorBoard ran was listed last.
            self.runs = {name: self.runs[name] for name in found}
        for state in to_submit:
            self._start(state)
        self._dispatch()  # after the whole scan: the smallest of all it found go first
        with self.changed:
            self.polled_once = True
            self.changed.notify_all()

    def _source_files_now(self) -> dict[str, Stamp | None]:
        """Size and mtime of every source file an analysed result's lines came from, each
        file once (the ranks of a job share theirs), and a notebook's code digest (read
        again only once it is saved), outside the lock: a slow file system must not hold
        up the requests."""
        with self.lock:
            stamps = [
                (path, stamp)
                for run in self.runs.values()
                for state in run.traces.values()
                if state.status == DONE and state.source_stamps
                for path, stamp in state.source_stamps.items()
            ]
        files = sorted({path for path, _ in stamps})
        notebooks = {path for path, stamp in stamps if stamp is not None and len(stamp) > 2}
        return file_stamps(files, notebooks, self._notebooks_read)

    def _refresh(
        self,
        run: RunState,
        ref: TraceRef,
        sources_now: dict[str, tuple[int, int] | None],
    ) -> TraceState | None:
        """Update one trace's state from a fresh stat (and its source files' from
        ``sources_now``); returns it when it needs analysis."""
        try:
            size, mtime_ns = _file_version(ref.path)
        except OSError as exc:
            # Gone between listing and stat (rotated, deleted): next poll settles it.
            logger.debug("sync_advisor: cannot stat %s (%s)", ref.path, exc)
            return None
        state = run.traces.get(ref.path)
        if (
            state is not None
            and state.status == DONE
            and state.source_stamps
            and (state.size, state.mtime_ns) == (size, mtime_ns)
            and not all(
                stamp_holds(stamp, sources_now.get(path, stamp))
                for path, stamp in state.source_stamps.items()
            )
        ):
            logger.info("sync_advisor: source files of %s changed; analysing again", ref.path)
            run.generation += 1
            fresh = TraceState(ref, size, mtime_ns, previous_result=state.result)
            run.traces[ref.path] = fresh
            return fresh
        if state is None or (state.size, state.mtime_ns) != (size, mtime_ns):
            if state is not None and state.status == RUNNING and state.in_pool:
                # Its pool job will see the change and ask for another poll. (One still
                # waiting in the queue is replaced: the queue drops it.)
                return None
            if state is not None:
                run.generation += 1
            previous = state
            state = TraceState(ref, size, mtime_ns)
            if previous is not None and previous.being_written:
                # Still growing: it stays listed as being written (with its last reason)
                # until this version is read, instead of vanishing from the errors.
                state.being_written = True
                state.error = previous.error
            run.traces[ref.path] = state
            return state
        if state.status == RETRY:
            state.status = PENDING
            return state
        if state.status == NO_SUMMARY:
            return state  # its summary may have been written since: looked up again
        self._settle_quiet_truncation(run, state)
        return None

    def _settle_quiet_truncation(self, run: RunState, state: TraceState) -> None:
        """A truncated file given up on while it was fresh asked "still being written?";
        once it has been quiet for WRITING_QUIET_S it is answered, as ``_settle`` answers a
        file read when already quiet. (Under ``self.lock``, from the poll.)"""
        if state.status not in (DONE, ERROR) or state.error is None or state.mtime_ns is None:
            return
        if self.clock() - state.mtime_ns / 1e9 < WRITING_QUIET_S:
            return
        settled = settled_truncation(state.error, state.mtime_ns / 1e9)
        if settled == state.error:
            return
        state.error = settled
        if state.result is not None:
            state.result.info.error = settled
        run.generation += 1  # what the run's routes answer changed

    def _is_summarised(self, run: RunState, refs: list[TraceRef]) -> bool:
        """Whether the run has summaries (``summaries.has_summaries``). Once a trace was
        served from its summary the run stays summarised without looking again."""
        if self.summaries is None:
            return False
        if any(state.from_summary for state in run.traces.values()):
            return True
        return has_summaries(self.summaries, [ref.path for ref in refs])

    def _key(self, state: TraceState) -> str:
        return cache_key(state.ref.path, state.size, state.mtime_ns, self.options_digest)

    def _start(self, state: TraceState) -> None:
        if self.summaries is not None and self._from_summary(state):
            return
        cached = self.cache.get(self._key(state))
        if cached is not None:
            self._settle(state, cached, None, from_cache=True)
            return
        with self.lock:
            state.status = RUNNING
            state.queued = next(self._queue_order)
            state.passed_by = 0
            state.in_pool = False
            self._waiting.append(state)

    def _dispatch(self) -> None:
        """Hand the pool the next traces (``next_trace``) while it has a free process. Any
        thread may call it; one dispatches at a time, again if asked meanwhile."""
        with self.lock:
            self._dispatch_again = True
            if self._dispatching:
                return
            self._dispatching = True
        try:
            while True:
                with self.lock:
                    if not self._dispatch_again or self._stop.is_set():
                        self._dispatching = False
                        return
                    self._dispatch_again = False
                    picked = self._pick()
                for state in picked:
                    if not self._submit(state):
                        self._release(state)
        except BaseException:
            with self.lock:
                self._dispatching = False
            raise

    def _pick(self) -> list[TraceState]:
        """Take the traces that start now off the queue (under the lock)."""
        self._waiting = [s for s in self._waiting if self._is_current(s) and s.status == RUNNING]
        picked = []
        while self._waiting and len(self._in_pool) < self.max_workers:
            state = next_trace(self._waiting, self._in_pool, self.max_workers)
            if state is None:
                break
            self._waiting.remove(state)
            for other in self._waiting:
                if other.queued < state.queued and other.weight > state.weight:
                    other.passed_by += state.weight
            state.in_pool = True
            self._in_pool.append(state)
            picked.append(state)
        return picked

    def _is_current(self, state: TraceState) -> bool:
        run = self.runs.get(state.ref.run)
        return run is not None and run.traces.get(state.ref.path) is state

    def _release(self, state: TraceState) -> None:
        """``state``'s analysis is over (whatever came of it): its process is free."""
        with self.lock:
            # By identity: a trace analysed again (``analyze_again``) has a state of its own
            # whose fields may equal its queue state's.
            self._in_pool = [other for other in self._in_pool if other is not state]
            self._place_freed.notify_all()
        self._dispatch()

    def _submit(self, state: TraceState) -> bool:
        """Hand ``state`` to the pool; False when no pool takes it (then settled)."""
        for _attempt in range(3):
            pool = self._pool()
            try:
                future = pool.submit(self.analyze_fn, state.ref, self.options)
            except RuntimeError as exc:  # a pool shut down under us
                self._reset_pool(pool)
                error = exc
                if self._stop.is_set():
                    break
                # Another job's failure may have replaced it (no process could start: on to
                # threads) between _pool() and submit(): the replacement takes the job.
                continue
            future.add_done_callback(lambda f, s=state, p=pool: self._finished(s, f, p))
            return True
        self._settle(state, None, f"cannot start analysis ({error})")
        return False

    def _from_summary(self, state: TraceState) -> bool:
        """Settle ``state`` from its summary, or as NO_SUMMARY in a summarised run; False
        when it is to be analysed here. A summary made with other source options is used
        all the same: its findings are the trace's, and re-parsing a summarised job is what
        the summaries exist to avoid (the source route resolves files with this server's
        own roots)."""
        assert self.summaries is not None
        lookup = self.summaries.get(state.ref, self.options)
        if lookup.result is not None:
            with self.lock:
                state.from_summary = True
            self._settle(state, lookup.result, None, from_cache=True)
            return True
        with self.changed:
            run = self.runs.get(state.ref.run)
            if run is None or not run.summarised or run.traces.get(state.ref.path) is not state:
                return False
            if state.status != NO_SUMMARY or state.error != lookup.reason:
                state.error = lookup.reason
                state.result = None
                state.previous_result = None
                state.status = NO_SUMMARY
                run.generation += 1
                self.changed.notify_all()
        return True

    def _pool(self) -> concurrent.futures.Executor:
        with self.lock:
            if self._executor is None:
                self._executor = self._new_pool()
            return self._executor

    def _new_pool(self) -> concurrent.futures.Executor:
        if self.use_processes:
            try:
                # Not multiprocessing: fork is unsafe (TensorBoard's server threads hold
                # locks a fork would copy), and spawn and forkserver run the user's script
                # again in every worker (see workers.py).
                return ProcessPool(self.max_workers)
            except OSError as exc:
                logger.warning("sync_advisor: no analysis processes (%s), using threads", exc)
                self.use_processes = False
        return concurrent.futures.ThreadPoolExecutor(
            max_workers=self.max_workers, thread_name_prefix="sync_advisor_analyse"
        )

    def _reset_pool(self, broken: concurrent.futures.Executor, cancel: bool = True) -> None:
        """Drop ``broken`` if it is still the current pool. Every job of a broken pool fails
        on its own; a late failure of one must not shut down the pool that replaced it
        (that would cancel the replacement's jobs and leave their traces running forever).
        Without ``cancel`` its queued jobs still run (and fail, each on its own)."""
        with self.lock:
            if self._executor is not broken:
                return
            self._executor = None
        broken.shutdown(wait=False, cancel_futures=cancel)

    def _finished(
        self,
        state: TraceState,
        future: concurrent.futures.Future,
        pool: concurrent.futures.Executor,
    ) -> None:
        resubmitted = False
        try:
            resubmitted = self._outcome(state, future, pool)
        finally:
            if not resubmitted:
                self._release(state)

    def _outcome(
        self,
        state: TraceState,
        future: concurrent.futures.Future,
        pool: concurrent.futures.Executor,
    ) -> bool:
        """Settle a finished job; True when it was handed to another pool instead."""
        try:
            result = future.result()
            error = None
        except WorkerDied as exc:
            # The process analysing this trace died (out of memory, a crash in a native
            # library); only this job failed, and the pool replaced the process. Retried on
            # the next poll; the attempt counts, so a file that always kills its process ends
            # as an error naming the process and how it ended instead of looping.
            self._settle(state, None, str(exc), retry=True)
            return False
        except WorkerStartError as exc:
            if not getattr(pool, "started_any", False):
                # Not one process ever started (no usable interpreter, a sandbox, a process
                # limit): analyse in threads from now on, this trace at once.
                with self.lock:
                    switch = self.use_processes
                    self.use_processes = False
                if switch:
                    logger.warning("sync_advisor: %s; analysing in threads", exc)
                self._reset_pool(pool, cancel=False)
                return not self._stop.is_set() and self._submit(state)
            # Processes did start before: this is a passing failure, retried on the next poll.
            self._settle(state, None, f"cannot start an analysis process ({exc})", retry=True)
            return False
        except concurrent.futures.CancelledError:
            # Cancelled by stop(), or by a pool shut down under it: unless stopping, analyse
            # it again on the next poll instead of leaving it RUNNING for ever.
            with self.lock:
                run = self.runs.get(state.ref.run)
                if (
                    not self._stop.is_set()
                    and run is not None
                    and run.traces.get(state.ref.path) is state
                    and state.status == RUNNING
                ):
                    state.status = RETRY
            return False
        except Exception as exc:  # noqa: BLE001 - per-file errors are data
            result, error = None, str(exc) or type(exc).__name__
        self._settle(state, result, error)
        return False

    def _settle(
        self,
        state: TraceState,
        result: Any,
        error: str | None,
        from_cache: bool = False,
        retry: bool = False,
    ) -> None:
        """Record the outcome of one analysis and publish it to readers."""
        reason = error if result is None else getattr(result.info, "error", None)
        # A truncated read is retried while the file may still be written to; an old file
        # that reads truncated again and again is a final answer (from the cache: it was).
        transient = (
            reason is not None
            and not from_cache
            and not retry
            and looks_transient(reason)
            and not self._final_read(state)
        )
        if reason is not None and not (retry or transient) and looks_transient(reason):
            # A final answer for a file quiet for WRITING_QUIET_S: it is not being written
            # any more, and its reason says so (the engine's, read earlier, may still ask;
            # so may the cache's, kept from a read while it was fresh). One that ran out of
            # reads while fresh keeps the question until then.
            quiet = (
                state.mtime_ns is not None
                and self.clock() - state.mtime_ns / 1e9 >= WRITING_QUIET_S
            )
            settled = settled_truncation(reason, state.mtime_ns / 1e9) if quiet else reason
            if settled != reason:
                reason = error = settled
                if result is not None:
                    result.info.error = settled
        if result is None and reason is not None and not (retry or transient):
            if looks_transient(reason) and not from_cache:
                result = error_result(state.ref, reason)  # cached as the file's answer
        stamps = None
        if result is not None and not state.from_summary:
            stamps = result_stamps(result)
        changed_meanwhile = False
        if not from_cache:
            try:
                changed_meanwhile = _file_version(state.ref.path) != (state.size, state.mtime_ns)
            except OSError:
                changed_meanwhile = True
        with self.changed:
            run = self.runs.get(state.ref.run)
            if run is None or run.traces.get(state.ref.path) is not state:
                return  # removed or replaced while it was analysed
            if changed_meanwhile:
                # Written to while it was read: whatever came out describes no real file
                # version. The next poll sees the new size/mtime and starts over (not at
                # once: a file being written for minutes would be re-read in a loop).
                state.size = state.mtime_ns = None
                state.result = None
                state.error = BEING_WRITTEN
                state.being_written = True
                state.status = RETRY
            elif retry or transient:
                # Status last, here and below: a reader must never see a status without
                # the result or error that goes with it.
                state.attempts += 1
                state.error = reason
                state.result = None
                state.being_written = not retry
                state.status = RETRY if state.attempts < MAX_TRANSIENT_ATTEMPTS else ERROR
                if state.status == ERROR:
                    state.previous_result = None
                    run.generation += 1  # results() now holds its error entry
            elif result is None:
                state.error = reason
                state.result = None
                state.previous_result = None
                state.being_written = False
                state.status = ERROR
                run.generation += 1  # results() now holds its error entry
            else:
                state.error = reason
                state.result = result
                state.source_stamps = stamps
                state.previous_result = None
                state.being_written = False
                state.status = DONE
                run.generation += 1
                if not from_cache:
                    self.cache.put(self._key(state), result, stamps)
            self.changed.notify_all()

    def _final_read(self, state: TraceState) -> bool:
        """Whether a truncated read of ``state``'s file version is its final answer: the
        file was last written WRITING_QUIET_S ago or more, or this is the last of
        MAX_TRANSIENT_ATTEMPTS reads of the same version."""
        if state.attempts + 1 >= MAX_TRANSIENT_ATTEMPTS:
            return True
        if state.mtime_ns is None:  # a remote file: its size alone tells it changed
            return False
        return self.clock() - state.mtime_ns / 1e9 >= WRITING_QUIET_S

    def analyze_again(self, states: Sequence[TraceState], options: Any) -> list[Any]:
        """``states``' traces analysed with other ``options`` (the saving without the
        profiler: a replay fitted to a step time the user gives), in the analysis processes,
        each ``TraceResult`` in their order (an error result where its analysis fails or has
        not ended ``AGAIN_TIMEOUT_S`` after the call). Each takes a place in the pool as the
        queue's traces do (``_in_pool``, with ``next_trace``'s rule for big traces), leaving
        one process to the queue while it has traces waiting; one still running at the
        deadline keeps its place until it ends. The traces' kept results stay."""
        results: list[Any] = [None] * len(states)
        waiting = list(enumerate(states))
        running: dict[concurrent.futures.Future, int] = {}
        deadline = time.monotonic() + AGAIN_TIMEOUT_S
        while waiting or running:
            started = []
            with self.lock:
                while waiting:
                    index, state = waiting[0]
                    job = TraceState(state.ref, state.size, state.mtime_ns, status=RUNNING)
                    if not self._may_start_again(job):
                        break
                    waiting.pop(0)
                    job.in_pool = True
                    self._in_pool.append(job)
                    started.append((index, job))
            for index, job in started:
                try:
                    future = self._pool().submit(self.analyze_fn, job.ref, options)
                except RuntimeError as exc:  # a pool shut down under us: that trace fails
                    results[index] = error_result(job.ref, f"cannot start analysis ({exc})")
                    self._release(job)
                    continue
                future.add_done_callback(lambda _f, job=job: self._release(job))
                running[future] = index
            left = deadline - time.monotonic()
            if left <= 0:  # out of time: what has not started never will
                late = f"not analysed in {AGAIN_TIMEOUT_S:.0f} s"
                for future, index in running.items():
                    future.cancel()  # a job already running goes on, in its place
                    results[index] = error_result(states[index].ref, late)
                for index, state in waiting:
                    results[index] = error_result(state.ref, late)
                break
            if running:
                # Woken at least every 0.5 s while traces wait for a place that may free.
                done, _ = concurrent.futures.wait(
                    running,
                    timeout=min(left, 0.5) if waiting else left,
                    return_when=concurrent.futures.FIRST_COMPLETED,
                )
            else:
                done = set()
                with self._place_freed:
                    self._place_freed.wait(timeout=min(left, 0.5))
            for future in done:
                index = running.pop(future)
                try:
                    results[index] = future.result()
                except Exception as exc:  # noqa: BLE001 - one trace's failure is its own
                    results[index] = error_result(states[index].ref, f"analysis failed: {exc}")
        return results

    def _may_start_again(self, job: TraceState) -> bool:
        """Whether a trace analysed again may take a place in the pool now (under the lock):
        one is free, and another stays free for the queue's waiting traces (where there are
        several processes), and ``next_trace`` would start it (a big one)."""
        free = self.max_workers - len(self._in_pool)
        if free <= 0 or (self._waiting and self.max_workers > 1 and free < 2):
            return False
        return next_trace([job], self._in_pool, self.max_workers) is job

    # ----- selections -------------------------------------------------------------------
    def results(self, run: RunState, worker: str | None, span: str | None) -> list[Any]:
        """TraceResults of a run's selection, error results included (they are data)."""
        settled: list[tuple[TraceRef, Any, str | None]] = []
        with self.lock:  # status, result and error are read together, as _settle wrote them
            for state in run.traces.values():
                if worker is not None and state.ref.worker != worker:
                    continue
                if span is not None and state.ref.span != span:
                    continue
                if state.status == DONE:
                    settled.append((state.ref, state.result, None))
                elif state.previous_result is not None and state.status != ERROR:
                    settled.append((state.ref, state.previous_result, None))
                elif state.status == ERROR:
                    settled.append((state.ref, None, state.error or "unknown error"))
        return [
            result if error is None else error_result(ref, error) for ref, result, error in settled
        ]
