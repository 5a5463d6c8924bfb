"""The per-trace stage fanned out: over this machine's cores (``process_mapper``: analysis
processes of ``plugin.workers``, the plugin's own), or past one machine over a Ray cluster
(``ray_mapper``; the optional extra, ``pip install 'ray>=2.10'``). The job-level stages
still run on the driver.

A process of this machine costs about a third of a second to start (an interpreter and the
engine's imports, numpy among them), so ``local_processes`` asks for them only where the
JSON to read is more than a few such starts' worth; small jobs stay in the one process.

Ray's tasks read the traces from where they are (local paths, NFS, ``s3://``/``gs://`` through
torch-tb-profiler's io layer, as on one machine), write each trace's summary there (so the
plugin and later runs read them instead of parsing), and return only what the reduce needs:
the result without its detail-view contexts (those stay in the summary). Small traces are
batched into one task (a task costs ~1.5 ms of scheduling; 200 tiny traces one by one were
slower than serial), large ones get a task each. Ray is imported only when it is asked for.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec

from tb_syncfinder.discovery import stat_trace
from tb_syncfinder.engine import Options, TraceMapper, analyze_trace, map_locally
from tb_syncfinder.models import TraceInfo, TraceRef, TraceResult
from tb_syncfinder.reader import NO_SUCH_FILE
from tb_syncfinder.summaries import SummaryStore, is_remote

BATCH_BYTES = 64 << 20  # a task's share of trace bytes (compressed, as stored)
BATCH_MAX = 64  # traces per task at most
MIN_BATCH_BYTES = 1 << 20  # below this a task's scheduling costs more than it spreads
# The ray extra is Ray alone: said as Ray, which pip finds anywhere (tb-syncfinder is
# installed from a clone, not from PyPI, where 'tb-syncfinder[ray]' is found by nobody).
INSTALL_HINT = "pip install 'ray>=2.10'"


class FanoutError(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise FanoutError(f"Ray is not installed ({INSTALL_HINT})") from exc
    return ray


def batches(
    refs: Sequence[TraceRef],
    batch_bytes: int = BATCH_BYTES,
    batch_max: int = BATCH_MAX,
    workers: int = 1,
) -> list[list[TraceRef]]:
    """Refs grouped into tasks of about ``batch_bytes`` each, but small enough that every
    worker gets a couple of tasks (a trace larger than a task's share is a task of its own),
    largest first so the long tasks start early."""
    sized = []
    for ref in refs:
        try:
            size = stat_trace(ref.path)[0] or 0
        except OSError:
            size = 0  # the task will say why it cannot be read
        sized.append((size, ref))
    sized.sort(key=lambda item: -item[0])
    total = sum(size for size, _ in sized)
    batch_bytes = max(MIN_BATCH_BYTES, min(batch_bytes, total // max(1, 2 * workers)))
    groups: list[list[TraceRef]] = []
    current: list[TraceRef] = []
    current_bytes = 0
    for size, ref in sized:
        if current and (current_bytes + size > batch_bytes or len(current) >= batch_max):
            groups.append(current)
            current, current_bytes = [], 0
        current.append(ref)
        current_bytes += size
    if current:
        groups.append(current)
    return groups


def analyze_batch(
    refs: Sequence[TraceRef], options: Options, store: SummaryStore | None
) -> tuple[list[TraceResult], list[str]]:
    """One task: analyse, keep the summary, return what the driver's reduce needs, and why
    each summary that could not be written was not (the task's own log lines never reach
    the driver)."""
    resolver = options.resolver()
    results = []
    unwritten = []
    for ref in refs:
        result = analyze_trace(ref, options, resolver)
        if store is not None:
            reason = store.write_failure(ref, result, options)
            if reason:
                unwritten.append(reason)
        results.append(msgspec.structs.replace(result, contexts={}))
    return results, unwritten


# Below this much JSON to analyse, starting processes costs more than it saves (each start
# is ~0.3 s, and ~0.4 s of analysis per 54 MB of JSON on one core: measured with
# bench/bench_local_processes.py).
PROCESSES_MIN_JSON_BYTES = 64 << 20
# Below this much JSON to analyse, ``--ray`` without an address starts no local cluster
# (5-10 s to start and stop here, for ~0.4 s of work per 54 MB of JSON on one core): the
# traces are read on this machine as without Ray, summaries written all the same.
LOCAL_CLUSTER_MIN_JSON_BYTES = PROCESSES_MIN_JSON_BYTES
# The most processes asked for by default: each holds a trace's analysis (2-3x its JSON).
PROCESSES_MAX_DEFAULT = 8


def _json_size(ref: TraceRef) -> int:
    """About how much JSON a trace holds (its file's size where that cannot be told)."""
    from tb_syncfinder.windows import json_bytes

    size = json_bytes(ref.path)
    if size is None:
        try:
            size = stat_trace(ref.path)[0] or 0
        except OSError:
            size = 0  # the analysis will say why it cannot be read
    return size


def local_processes(
    refs: Sequence[TraceRef],
    jobs: int | None = None,
    size: Callable[[TraceRef], int] = _json_size,
) -> int:
    """How many analysis processes to read ``refs`` with: ``jobs`` when given (at most one
    per trace; 1: none, in this process), else one per core (at most
    ``PROCESSES_MAX_DEFAULT``) where there are several traces and enough JSON that the
    starts pay, else 1. ``size``: each trace's JSON (the caller's, where it keeps them)."""
    if len(refs) < 2:
        return 1
    if jobs:
        return max(1, min(jobs, len(refs)))
    if any(is_remote(ref.path) for ref in refs):
        # Sizing them is a request each, and a file system registered in this process
        # only (a plugin's, a test's) is unknown to a fresh one: here, unless asked.
        return 1
    wanted = min(usable_cpus(), PROCESSES_MAX_DEFAULT, len(refs))
    if wanted < 2 or sum(map(size, refs)) < PROCESSES_MIN_JSON_BYTES:
        return 1
    return wanted


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _failed(ref: TraceRef, reason: str) -> TraceResult:
    return TraceResult(TraceInfo(ref.path, ref.worker, ref.span, ref.run, error=reason))


def analyze_in_process(ref: TraceRef, options: Options, progress_lines: bool) -> TraceResult:
    """One trace in an analysis process (a pool job: top level, importable by name).
    ``progress_lines``: the engine's progress lines (reading in windows) go to stderr, as
    the driver shows them for its large traces."""
    if progress_lines:
        import logging

        logger = logging.getLogger("tb_syncfinder")
        if not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("tb-syncfinder: %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
    return analyze_trace(ref, options)


def process_mapper(
    jobs: int | None = None,
    *,
    progress_lines: Callable[[TraceRef], bool] | None = None,
    analyze: Callable[[TraceRef, Options, bool], TraceResult] = analyze_in_process,
) -> TraceMapper:
    """A per-trace map over analysis processes of this machine, as many as
    ``local_processes`` says for the traces to read (largest first; with one, in this
    process), each trace's result yielded as it is done. Each analysis gets its share of the
    memory (``Options.memory_share``), so that those side by side split into windows what
    one alone would read whole. A process that dies fails its trace only, with how it died;
    where no process can start at all, the traces are read here, one after the other.
    ``progress_lines(ref)``: whether that trace's progress lines are shown; ``analyze``:
    what a process runs per trace (top level, importable by name)."""

    def mapper(
        refs: Sequence[TraceRef], options: Options, store: SummaryStore | None
    ) -> Iterator[TraceResult]:
        from tb_syncfinder.plugin.workers import ProcessPool, WorkerDied, WorkerStartError

        sizes: dict[str, int] = {}  # each file stat'ed once: to decide, then to order

        def size(ref: TraceRef) -> int:
            if ref.path not in sizes:
                sizes[ref.path] = _json_size(ref)
            return sizes[ref.path]

        count = local_processes(refs, jobs, size)
        if count < 2:
            yield from map_locally(refs, options, store)
            return
        shared = msgspec.structs.replace(
            options, memory_share=min(options.memory_share, 1.0 / count)
        )
        try:
            pool = ProcessPool(count, idle_timeout_s=None)
        except WorkerStartError:
            yield from map_locally(refs, options, store)
            return
        try:
            order = sorted(refs, key=size, reverse=True)
            futures = {
                pool.submit(analyze, ref, shared, bool(progress_lines and progress_lines(ref))): ref
                for ref in order
            }
            here: list[TraceRef] = []
            for future in concurrent.futures.as_completed(futures):
                ref = futures[future]
                try:
                    result = future.result()
                except WorkerStartError as exc:
                    if not pool.started_any:
                        here.append(ref)  # no process starts here: read it in this one
                        continue
                    result = _failed(ref, f"cannot start an analysis process ({exc})")
                except WorkerDied as exc:
                    result = _failed(ref, str(exc))
                except Exception as exc:  # noqa: BLE001 - one trace's failure, not the run's
                    result = _failed(ref, f"analysis failed: {type(exc).__name__}: {exc}")
                if store is not None:
                    store.put(ref, result, options)
                yield result
            yield from map_locally(here, options, store)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    return mapper


@dataclasses.dataclass
class ClusterInfo:
    """What the driver saw of the cluster, for progress lines and benchmarks."""

    address: str | None = None
    cpus: float = 0.0
    start_s: float = 0.0  # time to start or join the cluster
    tasks: int = 0
    # Why no local cluster was started (the traces analysed in this machine's processes).
    local_instead: str = ""


def ray_mapper(
    address: str | None = None,
    workers: int | None = None,
    *,
    batch_bytes: int = BATCH_BYTES,
    batch_max: int = BATCH_MAX,
    on_cluster: Callable[[ClusterInfo], None] | None = None,
) -> TraceMapper:
    """A per-trace map over Ray: a local cluster of ``workers`` CPUs (default: all), or the
    running cluster at ``address`` ("auto", "ray://head:10001"; without one, at
    ``RAY_ADDRESS`` where that is set, as every Ray program does). The cluster this starts
    is stopped when the map ends; a joined one is only disconnected from."""
    address = address or os.environ.get("RAY_ADDRESS") or None

    def mapper(
        refs: Sequence[TraceRef], options: Options, store: SummaryStore | None
    ) -> Iterator[TraceResult]:
        import logging

        ray = _ray()
        # Workers have their own working directory: resolve sources against the driver's.
        options = msgspec.structs.replace(
            options, source_roots=tuple(options.source_roots) or (os.getcwd(),)
        )
        info = ClusterInfo(address=address)
        connected_here = not ray.is_initialized()
        if connected_here and not address:
            json_bytes = sum(map(_json_size, refs))
            if json_bytes < LOCAL_CLUSTER_MIN_JSON_BYTES:
                # Less work than a local cluster's start and stop (5-10 s): the same
                # results, summaries included, from this machine's processes.
                info.local_instead = (
                    f"{len(refs)} trace{'s' if len(refs) != 1 else ''} to analyse, "
                    f"{json_bytes / 1e6:.0f} MB of JSON"
                )
                if on_cluster is not None:
                    on_cluster(info)
                yield from process_mapper(workers)(refs, options, store)
                return
        started = time.perf_counter()
        if connected_here:
            _connect(ray, address, workers)
        info.start_s = time.perf_counter() - started
        info.cpus = float(ray.cluster_resources().get("CPU", 0.0))
        task = ray.remote(num_cpus=1, max_retries=1)(analyze_batch)
        try:
            pending = {}
            for batch in batches(refs, batch_bytes, batch_max, workers=max(1, int(info.cpus))):
                pending[task.remote(batch, options, store)] = batch
            info.tasks = len(pending)
            if on_cluster is not None:
                on_cluster(info)
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for object_ref in done:
                    batch = pending.pop(object_ref)
                    try:
                        answer = ray.get(object_ref)
                        # A node with a tb-syncfinder before 2026-11-28 returns the list alone.
                        results, unwritten = answer if isinstance(answer, tuple) else (answer, [])
                    except Exception as exc:  # noqa: BLE001 - a lost task fails its traces only
                        if len(batch) > 1:
                            # Each trace of the batch again as a task of its own (those that
                            # never ran, too): a crash then fails only the trace it was in.
                            for ref in batch:
                                pending[task.remote([ref], options, store)] = [ref]
                            info.tasks += len(batch)
                            continue
                        reason = f"analysis task failed on the cluster: {_ray_reason(exc)}"
                        yield _failed(batch[0], reason)
                        continue
                    for reason in unwritten:
                        logging.getLogger("tb_syncfinder.summaries").warning("%s", reason)
                    for result in results:
                        yield _seen_here_not_there(result)
        finally:
            if connected_here:
                ray.shutdown()

    return mapper


def _ray_reason(exc: BaseException) -> str:
    """A failed task's exception in a line: its type and the first line of Ray's text
    (which says where it ran and how the worker ended: a pid, a node, OOM or a signal)."""
    text = str(exc).strip().splitlines()
    first = next((line.strip() for line in text if line.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _seen_here_not_there(result: TraceResult) -> TraceResult:
    """A trace a task found no file for, though this machine has it: said so (on a cluster
    each node reads the path itself)."""
    info = result.info
    if info.error == NO_SUCH_FILE and not is_remote(info.path) and os.path.isfile(info.path):
        info.error = (
            f"{NO_SUCH_FILE} on the Ray node that read it, though this machine has it: the "
            "traces must be where every node reads them (a shared filesystem, s3://)"
        )
    return result


# Ray retries an address that nothing answers at for minutes (821 s seen) before it says
# so: a plain connection first tells at once.
CONNECT_CHECK_S = 5.0


def _check_reachable(address: str) -> None:
    """Raise ``FanoutError`` where ``address`` is host:port (or ray://host:port) and
    nothing answers there."""
    text = address[len("ray://") :] if address.startswith("ray://") else address
    host, sep, port = text.rpartition(":")
    if not sep or "://" in text or not port.isdigit():
        return  # "auto", "local": Ray's own look-up, which answers at once
    host = host.strip("[]") or "127.0.0.1"
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_CHECK_S):
            pass
    except OSError as exc:
        raise FanoutError(
            f"cannot join the Ray cluster at {address}: nothing answers at {host}:{port} "
            f"({exc.strerror or exc}); is the cluster up (`ray status` on its head node)?"
        ) from None


def _connect(ray: Any, address: str | None, workers: int | None) -> None:
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if address:
        _check_reachable(address)  # its own message, not wrapped in the one below
    try:
        if address:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        else:
            # A local cluster runs this very package, installed or a checkout: its raylet,
            # started here, hands this PYTHONPATH on to its workers. (A runtime_env with it
            # made Ray start other workers than those it prestarts: 1.5-2 s a run.)
            was = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, was]))
            cores = usable_cpus()
            try:
                # address="local": a new cluster of our own even when another one runs on
                # this machine (ray.init() would join that one, and refuses num_cpus then).
                ray.init(
                    address="local",
                    num_cpus=min(workers or cores, cores),
                    include_dashboard=False,
                    logging_level="ERROR",
                    log_to_driver=False,
                )
            finally:
                if was is None:
                    del os.environ["PYTHONPATH"]
                else:
                    os.environ["PYTHONPATH"] = was
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        why = str(exc)
        cause = exc.__cause__ or exc.__context__
        if cause is not None and str(cause).strip() and str(cause).strip() not in why:
            # Ray's ConnectionError hides what it met (a missing token, a refused connection).
            why += f" ({str(cause).strip().splitlines()[-1]})"
        raise FanoutError(f"cannot start or join {where}: {why}") from exc
