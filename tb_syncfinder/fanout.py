"""Past one machine: the per-trace stage mapped over a Ray cluster (the optional extra,
``pip install 'ray>=2.10'``, the ``ray`` extra); the job-level stages still run on the driver.

Tasks read the traces from where they are (local paths, NFS, ``s3://``/``gs://`` through
torch-tb-profiler's io layer, as on one machine), write each trace's summary there (so the
plugin and later runs read them instead of parsing), and return only what the reduce needs:
the result without its detail-view contexts (those stay in the summary). Small traces are
batched into one task (a task costs ~1.5 ms of scheduling; 200 tiny traces one by one were
slower than serial), large ones get a task each. Nothing here runs unless Ray is asked for:
the local path never imports it.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec

from tb_syncfinder.discovery import stat_trace
from tb_syncfinder.engine import Options, TraceMapper, analyze_trace
from tb_syncfinder.models import TraceInfo, TraceRef, TraceResult
from tb_syncfinder.summaries import SummaryStore

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
) -> list[TraceResult]:
    """One task: analyse, keep the summary, return what the driver's reduce needs."""
    resolver = options.resolver()
    results = []
    for ref in refs:
        result = analyze_trace(ref, options, resolver)
        if store is not None:
            store.put(ref, result, options)
        results.append(msgspec.structs.replace(result, contexts={}))
    return results


@dataclasses.dataclass
class ClusterInfo:
    """What the driver saw of the cluster, for progress lines and benchmarks."""

    address: str | None = None
    cpus: float = 0.0
    start_s: float = 0.0  # time to start or join the cluster
    tasks: int = 0


def ray_mapper(
    address: str | None = None,
    workers: int | None = None,
    *,
    batch_bytes: int = BATCH_BYTES,
    batch_max: int = BATCH_MAX,
    on_cluster: Callable[[ClusterInfo], None] | None = None,
) -> TraceMapper:
    """A per-trace map over Ray: a local cluster of ``workers`` CPUs (default: all), or the
    running cluster at ``address`` ("auto", "ray://head:10001"). The cluster this starts is
    stopped when the map ends; a joined one is only disconnected from."""

    def mapper(
        refs: Sequence[TraceRef], options: Options, store: SummaryStore | None
    ) -> Iterator[TraceResult]:
        ray = _ray()
        # Workers have their own working directory: resolve sources against the driver's.
        options = msgspec.structs.replace(
            options, source_roots=tuple(options.source_roots) or (os.getcwd(),)
        )
        info = ClusterInfo(address=address)
        started = time.perf_counter()
        connected_here = not ray.is_initialized()
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
                        yield from ray.get(object_ref)
                    except Exception as exc:  # noqa: BLE001 - a lost task fails its traces only
                        reason = f"analysis task failed on the cluster: {type(exc).__name__}"
                        for ref in batch:
                            yield TraceResult(
                                TraceInfo(ref.path, ref.worker, ref.span, ref.run, error=reason)
                            )
        finally:
            if connected_here:
                ray.shutdown()

    return mapper


def _connect(ray: Any, address: str | None, workers: int | None) -> None:
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        if address:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        else:
            # A local cluster runs this very package, installed or a checkout.
            pythonpath = os.pathsep.join(
                filter(None, [package_parent, os.environ.get("PYTHONPATH")])
            )
            # address="local": a new cluster of our own even when another one runs on this
            # machine (ray.init() would join that one, and refuses num_cpus then).
            ray.init(
                address="local",
                num_cpus=workers or os.cpu_count(),
                include_dashboard=False,
                logging_level="ERROR",
                log_to_driver=False,
                runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
            )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        raise FanoutError(f"cannot start or join {where}: {exc}") from exc
