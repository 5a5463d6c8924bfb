"""Per-trace extraction of collectives (tb_syncfinder.collectives): NCCL shapes from the
fixture builder (2024+ and 2023), real traces, and what the job stage is given."""

from __future__ import annotations

import dataclasses
import json
import pickle
import random
import subprocess
from pathlib import Path

import msgspec
import pytest
from kineto_builder import KinetoTraceBuilder

from tb_syncfinder.collectives import (
    canonical_collective,
    extract_rank_file,
)

HTA_MIRROR = Path("/work/.mirror/facebookresearch+HolisticTraceAnalysis/repo")
BASE_NS = 1_788_480_000_000_000_000


def _two_rank_group(b: KinetoTraceBuilder, rank: int) -> None:
    b.set_distributed(rank, 2, pg_config=[KinetoTraceBuilder.pg_entry("0", [0, 1], "default_pg")])
    b.set_clock(base_time_ns=BASE_NS, host_name="node0")


@pytest.mark.parametrize(
    "name, expected",
    [
        ("c10d::allreduce_", "allreduce"),
        ("nccl:all_reduce", "allreduce"),
        ("gloo:all_reduce", "allreduce"),
        ("allreduce", "allreduce"),
        (
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "allreduce",
        ),
        (
            "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "allgather",
        ),
        ("c10d::_allgather_base_", "allgather"),
        ("nccl:_all_gather_base", "allgather"),
        ("_c10d_functional::all_gather_into_tensor", "allgather"),
        ("c10d::_reduce_scatter_base_", "reducescatter"),
        ("reduce_scatter", "reducescatter"),
        ("all_to_allv", "alltoall"),
        ("c10d::alltoall_base_", "alltoall"),
        ("nccl:all_to_all", "alltoall"),
        ("c10d::broadcast_", "broadcast"),
    ],
)
def test_every_spelling_of_a_collective_has_one_canonical_name(name, expected):
    assert canonical_collective(name) == expected


def test_modern_nccl_collective_has_group_sizes_dtype_enqueue_kernel_and_step(tmp_path):
    b = KinetoTraceBuilder(start_us=4_000_000_000)
    _two_rank_group(b, 1)
    with b.step(7):
        b.kernel(dur=300)
        enqueue_at = b.now
        kernel = b.nccl_collective(
            "allreduce", nelems=2049000, dtype="Float", pg_name="0", pg_ranks=[0, 1], kernel_dur=250
        )
    path = b.write(tmp_path / "rank1.pt.trace.json")
    rt = extract_rank_file(str(path))
    assert rt.rank == 1 and rt.dist.world_size == 2
    assert rt.dist.groups[0].name == "0" and rt.dist.groups[0].ranks == (0, 1)
    assert rt.base_time_ns == BASE_NS and rt.host_name == "node0"
    (c,) = rt.collectives
    assert (c.name, c.group, c.group_ranks) == ("allreduce", "0", (0, 1))
    assert (c.in_nelems, c.out_nelems, c.dtype) == (2049000, 2049000, "Float")
    assert c.host_op == "c10d::allreduce_" and c.enqueue_ts == enqueue_at
    assert c.exec_kind == "kernel" and c.exec_name.startswith("ncclDevKernel_AllReduce")
    assert (c.exec_ts, c.exec_end) == (kernel["ts"], kernel["ts"] + 250)
    assert c.arrival_ts == kernel["ts"] and c.arrival_source == "kernel"
    assert c.step == 7


def test_kernel_is_joined_by_correlation_when_its_external_id_equals_the_correlation(tmp_path):
    b = KinetoTraceBuilder(start_us=4_000_000_000)
    _two_rank_group(b, 0)
    with b.step(1):
        kernel = b.nccl_collective(kernel_dur=80, external_id_is_correlation=True)
    rt = extract_rank_file(str(b.write(tmp_path / "r.pt.trace.json")))
    assert [c.exec_ts for c in rt.collectives] == [kernel["ts"]]
    assert kernel["args"]["External id"] == kernel["args"]["correlation"]


def test_2023_trace_sizes_come_from_input_dims_of_the_nccl_op(tmp_path):
    b = KinetoTraceBuilder()  # absolute timestamps, no baseTimeNanoseconds
    b.set_distributed(0, 4)  # no pg_config before 2024
    with b.step(551):
        b.nccl_collective("allreduce", nelems=19618307, dtype="Float", legacy=True, pg_id=3)
    rt = extract_rank_file(str(b.write(tmp_path / "r.pt.trace.json")))
    (c,) = rt.collectives
    assert rt.base_time_ns is None
    assert (c.name, c.in_nelems, c.dtype, c.group) == ("allreduce", 19618307, "float", "3")
    assert c.host_op == "nccl:all_reduce"
    assert c.exec_name.startswith("ncclKernel_AllReduce")


def test_kernel_enqueued_before_the_window_is_a_collective_without_enqueue_first_in_order(tmp_path):
    b = KinetoTraceBuilder(start_us=4_000_000_000)
    _two_rank_group(b, 0)
    with b.step(1):
        early = b.nccl_collective(kernel_dur=500)
        b.nccl_collective(nelems=64, kernel_dur=50)
    # The first collective's host ops happened before the profiler started.
    b.events = [
        e
        for e in b.events
        if not (
            e.get("pid") == b.pid
            and e.get("ts", 0) < early["ts"]
            and e.get("name") != "ProfilerStep#1"
        )
    ]
    rt = extract_rank_file(str(b.write(tmp_path / "r.pt.trace.json")))
    first, second = rt.collectives
    assert first.enqueue_ts is None and first.exec_ts == early["ts"]
    assert first.arrival_source == "kernel" and first.in_nelems == 1 << 20
    assert second.in_nelems == 64 and second.enqueue_ts is not None
    assert [c.index for c in rt.collectives] == [0, 1]


def test_work_wait_records_are_not_collectives(tmp_path):
    b = KinetoTraceBuilder(start_us=4_000_000_000)
    _two_rank_group(b, 0)
    with b.step(1):
        b.nccl_collective(kernel_dur=50)
        with b.op(
            "record_param_comms",
            args={"Collective name": "wait", "dtype": "Byte", "In msg nelems": 0},
        ):
            b.advance(5)
    rt = extract_rank_file(str(b.write(tmp_path / "r.pt.trace.json")))
    assert [c.name for c in rt.collectives] == ["allreduce"]


def test_blocking_python_call_becomes_a_host_wait_with_its_user_frame(tmp_path):
    b = KinetoTraceBuilder(start_us=4_000_000_000, gpu=False)
    _two_rank_group(b, 0)
    with b.step(1), b.frame(("train.py", 12, "train_step")):
        with b.frame("<built-in function sleep>"):
            b.advance(30_000)
        with b.frame("<built-in function sleep>"):
            b.advance(10)  # too short to matter: not listed
    rt = extract_rank_file(str(b.write(tmp_path / "r.pt.trace.json")))
    (w,) = rt.waits
    assert (w.kind, w.op, w.file, w.line, w.func) == (
        "blocking_call",
        "time.sleep",
        "train.py",
        12,
        "train_step",
    )
    assert w.wait_us == pytest.approx(30_002) and w.step == 1 and not w.is_sync
    assert w.site_key == "train.py:12:time.sleep"


def test_collective_arguments_of_a_repaired_trace_come_from_the_reader(tmp_path):
    b = KinetoTraceBuilder(start_us=4_000_000_000)
    _two_rank_group(b, 0)
    with b.step(1):
        b.nccl_collective(kernel_dur=50)
    # An unquoted N/A (some Kineto versions): the reader repairs it and keeps the collective
    # arguments, so nothing is read from the file a second time.
    text = json.dumps(b.to_dict()).replace('"Group size": 2', '"Group size": N/A')
    path = tmp_path / "r.pt.trace.json"
    path.write_text(text)
    rt = extract_rank_file(str(path))
    assert [c.name for c in rt.collectives] == ["allreduce"]
    assert rt.collectives[0].in_nelems is not None
    assert not any("unreadable" in n for n in rt.notes)


def test_a_2023_trace_sized_only_by_input_dims_gets_its_sizes_from_the_reader(tmp_path):
    # Before 2024, nccl:* ops carried only Input Dims / Input type, which record_shapes
    # writes on every operator: the reader keeps them on nccl:* ops alone.
    b = KinetoTraceBuilder(start_us=4_000_000_000)
    _two_rank_group(b, 0)
    with b.step(1):
        b.nccl_collective(nelems=4096, legacy=True, kernel_dur=50)
    path = b.write(tmp_path / "r2023.pt.trace.json")
    rt = extract_rank_file(str(path))
    assert [(c.name, c.in_nelems, c.dtype) for c in rt.collectives] == [
        ("allreduce", 4096, "float")
    ]


def _plain(value, seen_types):
    """Walk a result: only records of this package, containers and scalars."""
    if isinstance(value, msgspec.Struct):
        seen_types.add(type(value).__name__)
        for name in value.__struct_fields__:
            _plain(getattr(value, name), seen_types)
    elif dataclasses.is_dataclass(value):
        seen_types.add(type(value).__name__)
        for f in dataclasses.fields(value):
            _plain(getattr(value, f.name), seen_types)
    elif isinstance(value, (list, tuple, set)):
        for v in value:
            _plain(v, seen_types)
    elif isinstance(value, dict):
        for k, v in value.items():
            _plain(k, seen_types)
            _plain(v, seen_types)
    else:
        assert value is None or isinstance(value, (str, int, float, bool)), type(value)


def test_rank_trace_is_small_picklable_and_holds_no_raw_events(tmp_path):
    b = KinetoTraceBuilder(start_us=4_000_000_000)
    _two_rank_group(b, 0)
    for s in range(1, 4):
        with b.step(s):
            b.kernel(dur=3000)
            b.nccl_collective(kernel_dur=100)
    path = b.write(tmp_path / "r.pt.trace.json")
    rt = extract_rank_file(str(path))
    types: set[str] = set()
    _plain(rt, types)
    assert types <= {
        "RankTrace",
        "DistributedInfo",
        "ProcessGroupInfo",
        "Collective",
        "HostWait",
        "StepSpan",
    }
    again = pickle.loads(pickle.dumps(rt))
    assert again == rt
    assert len(pickle.dumps(rt)) < path.stat().st_size / 3


def test_real_8_rank_job_trace_has_its_21_collectives_joined_to_their_kernels(real_traces_dir):
    path = real_traces_dir / "a100_nccl_event_sync.pt.trace.json.gz"
    rt = extract_rank_file(str(path))
    names = [c.name for c in rt.collectives]
    assert names.count("allreduce") == 15 and names.count("broadcast") == 6
    assert len(names) == 21  # the 6 record_param_comms "wait" records are not collectives
    assert all(c.exec_kind == "kernel" and c.enqueue_ts is not None for c in rt.collectives)
    assert all(c.exec_ts >= c.enqueue_ts for c in rt.collectives)
    assert rt.base_time_ns == 1711964646000000000
    assert {c.group for c in rt.collectives} == {"0"}
    assert rt.collectives[2].in_nelems == 2049000 and rt.collectives[2].dtype == "Float"
    assert sorted({c.step for c in rt.collectives}) == [4, 5, 6]


def test_the_reader_keeps_the_collective_arguments_of_a_real_trace(real_traces_dir):
    from tb_syncfinder.reader import read_trace

    data = read_trace(str(real_traces_dir / "a100_nccl_event_sync.pt.trace.json.gz"))
    kernels = [e for e in data.events if getattr(e, "name", "").startswith("ncclKernel")]
    assert len(kernels) == 21 and all(e.args.collective_name for e in kernels)
    assert data.base_time_ns and data.fast_path


def hta_trace_filter_pair(tmp_path: Path) -> list[Path]:
    """HolisticTraceAnalysis's tests/data/trace_filter pair (2 of 128 ranks, NCCL, 2023), from
    a local mirror of the repository (``fetch`` it); skips when there is none."""
    if not (HTA_MIRROR / "HEAD").exists() and not (HTA_MIRROR / ".git").exists():
        pytest.skip("HolisticTraceAnalysis mirror not available")
    out = []
    for r in (0, 1):
        name = f"sampled_rank-{r}.json.gz"
        blob = subprocess.run(
            ["git", "--git-dir", str(HTA_MIRROR), "show", f"HEAD:tests/data/trace_filter/{name}"],
            capture_output=True,
            check=False,
        )
        if blob.returncode != 0 or not blob.stdout:
            pytest.skip("trace_filter data not in the HolisticTraceAnalysis mirror")
        path = tmp_path / f"rank{r}.pt.trace.json.gz"
        path.write_bytes(blob.stdout)
        out.append(path)
    return out


def test_2023_real_pair_collectives_read_from_input_dims(tmp_path):
    paths = hta_trace_filter_pair(tmp_path)
    ranks = [extract_rank_file(str(p)) for p in paths]
    assert [r.rank for r in ranks] == [0, 1] and ranks[0].dist.world_size == 128
    for rt in ranks:
        assert len(rt.collectives) == 10 and rt.base_time_ns is None
        assert all(c.in_nelems and c.dtype and c.exec_kind == "kernel" for c in rt.collectives)
        assert all(c.group == "" for c in rt.collectives)  # no group recorded in 2023
    assert ranks[0].collectives[2].in_nelems == 19618307


# -- issue order and gloo pairing: the same answers as the quadratic searches they replace --


def _reference_issue_order(with_enqueue, without):
    ordered = sorted(with_enqueue, key=lambda p: p.enqueue.ts)
    for orphan in sorted(without, key=lambda p: p.execs[0].ts):
        start = orphan.execs[0].ts
        at = len(ordered)
        for i, p in enumerate(ordered):
            if p.enqueue is None:
                continue
            if p.execs and p.execs[0].ts > start:
                at = i
                break
        ordered.insert(at, orphan)
    return ordered


def _reference_pair(enqueues, cpu_execs):
    waiting = sorted((p for p in enqueues if not p.execs), key=lambda p: p.enqueue.ts)
    taken = [False] * len(waiting)
    left = []
    for ex in sorted(cpu_execs, key=lambda p: p.execs[0].ts):
        start = ex.execs[0].ts
        for i, p in enumerate(waiting):
            if taken[i] or p.pid != ex.pid or p.name != ex.name:
                continue
            if p.enqueue.ts > start + 1e-3:
                break
            taken[i] = True
            p.execs, p.exec_kind = ex.execs, "cpu_op"
            p.args.extend(ex.args)
            break
        else:
            left.append(ex)
    return left


def _random_pendings(seed: int):
    """Enqueued collectives (some executed, some waiting for a gloo execution), and
    executions without an enqueue, of a few names on two processes, times drawn coarsely
    so that ties happen."""
    from types import SimpleNamespace

    from tb_syncfinder.collectives import _Pending

    rng = random.Random(seed)

    def event(label: str, ts: float) -> SimpleNamespace:
        return SimpleNamespace(name=label, ts=ts, dur=1.0)

    enqueues, orphans = [], []
    for n in range(rng.randint(0, 40)):
        ts = float(rng.randint(0, 60))
        execs = [event(f"k{n}", ts + rng.randint(-5, 30))] if rng.random() < 0.6 else []
        enqueues.append(
            _Pending(
                rng.choice("ab"),
                "c10d::x",
                event(f"e{n}", ts),
                execs,
                None,
                [],
                1,
                rng.choice((1, 2)),
            )  # fmt: skip
        )
    for n in range(rng.randint(0, 40)):
        orphans.append(
            _Pending(
                rng.choice("ab"),
                None,
                None,
                [event(f"o{n}", float(rng.randint(0, 90)))],
                "cpu_op",
                [],
                1,
                rng.choice((1, 2)),
            )  # fmt: skip
        )
    return enqueues, orphans


def _labels(pendings) -> list[tuple[str, ...]]:
    return [
        ((p.enqueue.name if p.enqueue is not None else "-"), *(e.name for e in p.execs))
        for p in pendings
    ]


@pytest.mark.parametrize("seed", range(40))
def test_issue_order_and_gloo_pairing_match_the_searches_they_replace(seed):
    from tb_syncfinder.collectives import _issue_order, _pair_cpu_execs

    enqueues, orphans = _random_pendings(seed)
    expected_enqueues, expected_orphans = _random_pendings(seed)
    left = _pair_cpu_execs(enqueues, orphans)
    expected_left = _reference_pair(expected_enqueues, expected_orphans)
    assert _labels(left) == _labels(expected_left)
    assert _labels(enqueues) == _labels(expected_enqueues)
    assert _labels(_issue_order(enqueues, left)) == _labels(
        _reference_issue_order(expected_enqueues, expected_left)
    )
