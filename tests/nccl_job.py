"""NCCL-shaped multi-rank jobs written with the fixture builder, with known lateness.

The job is simulated in true time, collective by collective across all ranks (an NCCL
kernel ends when the last member has arrived, plus the transfer), then each rank's trace is
written on its host's clock. Per step, every rank runs::

    train.py
    80  def train_step(...):          <- the python_function frame (a def line)
    ..      forward/backward kernels  (compute_us, plus the injected lateness)
    88      loss.item()               <- waits for the GPU: a rank with more GPU work
    ..      all_reduce #1 (group "0") <-   reaches its all-reduce later
            one more kernel, all_reduce #2 (group "0")
            all_gather in its host's group ("1": ranks 0-3, "2": ranks 4-7)

``late`` adds GPU time before the ``.item()`` of a (rank, step): that rank reaches all-reduce
#1 of that step late by about that much, and every other member waits as long there.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kineto_builder import KinetoTraceBuilder

TRAIN_FILE = "train.py"
DEF_LINE = 80
ITEM_LINE = 88
# Kineto floors the base to ~3-month periods: the same base on every rank of a job.
BASE_TIME_NS = 1_790_000_000_000_000_000 - 1_790_000_000_000_000_000 % (7_776_000 * 10**9)
TRAIN_SOURCE = "\n" * (DEF_LINE - 1) + (
    "def train_step(model, batch, opt):\n"  # 80
    "    out = model(batch)\n"  # 81
    "    loss = out.sum()\n"  # 82
    "    loss.backward()\n"  # 83
    "    #\n"  # 84
    "    #\n"  # 85
    "    #\n"  # 86
    "    #\n"  # 87
    "    value = loss.item()\n"  # 88
    "    opt.step()\n"  # 89
    "    return value\n"  # 90
)


@dataclass
class JobSpec:
    world: int = 8
    ranks_per_host: int = 4
    host_skew_us: Sequence[float] = (0.0, 2500.0)  # clock offset per host (host 0 = 0)
    steps: int = 5
    compute_us: float = 3000.0
    transfer_us: float = 400.0
    late: dict[tuple[int, int], float] = field(default_factory=dict)  # (rank, step) -> us
    missing: Sequence[int] = ()  # simulated, but no trace written
    last_step: dict[int, int] = field(default_factory=dict)  # rank -> its trace's last step
    host_names: bool = True
    subgroups: bool = True
    legacy: bool = False  # 2023 shapes: nccl:* ops, Input Dims, absolute ts, no pg_config
    item: bool = True  # each rank reads its loss back (.item()) every step
    item_ranks: Sequence[int] | None = None  # those ranks alone do (None: every rank)
    item_steps: Sequence[int] | None = None  # in those steps alone (None: every step)


def _jitter(rank: int, step: int, salt: int = 0) -> float:
    """A few microseconds that differ per rank and step (no ties, deterministic)."""
    return float((rank * 37 + step * 11 + salt * 5) % 17)


def host_of(spec: JobSpec, rank: int) -> int:
    return rank // spec.ranks_per_host


def _groups(spec: JobSpec) -> list[tuple[str, list[int]]]:
    groups = [("0", list(range(spec.world)))]
    if spec.subgroups:
        hosts = (spec.world + spec.ranks_per_host - 1) // spec.ranks_per_host
        for h in range(hosts):
            lo = h * spec.ranks_per_host
            groups.append((str(h + 1), list(range(lo, min(spec.world, lo + spec.ranks_per_host)))))
    return groups


def _collective(
    builders: dict[int, KinetoTraceBuilder],
    ranks: Sequence[int],
    name: str,
    nelems: int,
    pg: str,
    pg_ranks: Sequence[int],
    spec: JobSpec,
    step: int,
    salt: int,
) -> None:
    """One collective on ``ranks``: kernels end together (within 0-4 us, as on a real node),
    ``transfer_us`` after the last arrival (the kernel start)."""
    kernels: dict[int, dict[str, Any]] = {}
    for r in ranks:
        b = builders[r]
        b.advance(_jitter(r, step, salt))
        kernels[r] = b.nccl_collective(
            name,
            nelems=nelems,
            pg_name=pg,
            pg_ranks=pg_ranks,
            pg_desc="default_pg" if pg == "0" else "undefined",
            kernel_dur=1.0,
            legacy=spec.legacy,
            pg_id=int(pg) if spec.legacy else None,
        )
    end = max(k["ts"] for k in kernels.values()) + spec.transfer_us
    for r, k in kernels.items():
        k["dur"] = end + _jitter(r, step, salt + 1) % 5 - k["ts"]
        builders[r].device_now = k["ts"] + k["dur"]


def simulate(
    spec: JobSpec,
) -> tuple[dict[int, KinetoTraceBuilder], dict[int, dict[int, tuple[float, float]]]]:
    """All ranks' builders (true time) and each rank's step ends (host, device)."""
    start = 1_683_564_901_548_000 if spec.legacy else 4_000_000_000.0
    groups = _groups(spec)
    builders: dict[int, KinetoTraceBuilder] = {}
    for r in range(spec.world):
        b = KinetoTraceBuilder(
            pid=2000 + r, tid=2000 + r, device=r % spec.ranks_per_host, stream=20, start_us=start
        )
        pg_config = (
            None
            if spec.legacy
            else [
                KinetoTraceBuilder.pg_entry(
                    name, ranks, "default_pg" if name == "0" else "undefined"
                )
                for name, ranks in groups
            ]
        )
        b.set_distributed(r, spec.world, pg_config=pg_config)
        if not spec.legacy:
            b.set_clock(
                base_time_ns=BASE_TIME_NS,
                host_name=f"node{host_of(spec, r)}" if spec.host_names else None,
            )
        builders[r] = b
    step_end: dict[int, dict[int, tuple[float, float]]] = {r: {} for r in builders}
    everyone = list(range(spec.world))
    for s in range(1, spec.steps + 1):
        stacks = {r: ExitStack() for r in builders}
        for r, b in builders.items():
            stacks[r].enter_context(b.step(s))
            stacks[r].enter_context(b.frame((TRAIN_FILE, DEF_LINE, "train_step")))
            b.advance(20 + _jitter(r, s))
            b.kernel(dur=spec.compute_us + spec.late.get((r, s), 0.0))
            if (
                spec.item
                and (spec.item_ranks is None or r in spec.item_ranks)
                and (spec.item_steps is None or s in spec.item_steps)
            ):
                with b.op("aten::item", called="item"), b.op("aten::_local_scalar_dense"):
                    b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=4)
                    b.runtime("cudaStreamSynchronize")
            b.advance(30)
        _collective(builders, everyone, "allreduce", 1 << 22, "0", everyone, spec, s, 1)
        for b in builders.values():
            b.kernel(dur=500.0)
        _collective(builders, everyone, "allreduce", 1 << 18, "0", everyone, spec, s, 2)
        for name, ranks in groups[1:]:
            _collective(builders, ranks, "allgather", 4096, name, ranks, spec, s, 3)
        for r, b in builders.items():
            b.advance(10)
            stacks[r].close()
            step_end[r][s] = (b.now, b.device_now)
    return builders, step_end


def write_job(folder: Path, spec: JobSpec) -> dict[int, Path]:
    """Write the job's traces (``rank<N>.pt.trace.json``) and ``train.py``; returns the
    written traces by rank."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TRAIN_FILE).write_text(TRAIN_SOURCE)
    builders, step_end = simulate(spec)
    written = {}
    for r, b in builders.items():
        if r in spec.missing:
            continue
        if r in spec.last_step:
            # The profiler stopped after that step: host events up to its end, device
            # events up to the end of the work it had queued.
            host_cut, device_cut = step_end[r][spec.last_step[r]]
            b.events = [
                e
                for e in b.events
                if e.get("ts", 0) <= (device_cut if e.get("pid") == b.device else host_cut)
            ]
        skew = spec.host_skew_us[host_of(spec, r) % len(spec.host_skew_us)]
        if skew:
            b.shift_clock(skew)
        written[r] = b.write(folder / f"rank{r}.pt.trace.json")
    return written
