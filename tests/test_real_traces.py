"""Real Kineto traces recorded by others (../shared/traces/real, see its README).

Every expected number is counted here from the raw events with a few lines of plain json,
independently of the engine, then compared with what the engine reports. The tier skips
when ../shared is absent.
"""

from __future__ import annotations

import bisect
import gzip
import json
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED_DIR

from tb_syncfinder import analyze
from tb_syncfinder.discovery import list_runs
from tb_syncfinder.models import Report

REAL = SHARED_DIR / "traces" / "real"
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"no real traces at {REAL}")

NAMES = (
    "a100_df_index_resolver",
    "a100_item_heavy_rank0",
    "a100_nccl_event_sync",
    "alexnet_cuda_sync_events",
    "cpu_legacy_call_stack",
    "rocm_mi250_minitoy",
)


def trace_path(name: str) -> str:
    return str(REAL / f"{name}.pt.trace.json.gz")


@cache
def events(name: str) -> tuple[dict[str, Any], ...]:
    data = json.loads(gzip.decompress(Path(trace_path(name)).read_bytes()))
    return tuple(e for e in data["traceEvents"] if e.get("ph") == "X")


@cache
def _by_name(name: str) -> dict[str, list[dict[str, Any]]]:
    index: dict[str, list[dict[str, Any]]] = {}
    for event in events(name):
        index.setdefault(event.get("name"), []).append(event)
    return index


def named(name: str, event_name: str) -> list[dict[str, Any]]:
    return _by_name(name).get(event_name, [])


@cache
def cpu_ops(name: str) -> tuple[dict[str, Any], ...]:
    return tuple(e for e in events(name) if e.get("cat") == "cpu_op")


def enclosing_ops(name: str, call: dict[str, Any]) -> list[dict[str, Any]]:
    """cpu_ops on the call's thread whose span contains it, outermost first."""
    return sorted(
        (
            op
            for op in cpu_ops(name)
            if op["pid"] == call["pid"]
            and op["tid"] == call["tid"]
            and op["ts"] <= call["ts"]
            and call["ts"] + call["dur"] <= op["ts"] + op["dur"]
        ),
        key=lambda op: (op["ts"], -op["dur"]),
    )


def memcpy_kind_by_correlation(name: str) -> dict[Any, str]:
    return {
        e["args"].get("correlation"): e["name"]
        for e in events(name)
        if e.get("cat") == "gpu_memcpy"
    }


@cache
def report_of(name: str) -> Report:
    return analyze(trace_path(name), contexts=False)


def by_api(report: Report) -> Counter:
    return Counter(s.api for s in report.syncs)


def test_item_heavy_stream_syncs_are_copies_inside_aten_to_not_item() -> None:
    name = "a100_item_heavy_rank0"
    stream_syncs = named(name, "cudaStreamSynchronize")
    outer = Counter(enclosing_ops(name, s)[0]["name"] for s in stream_syncs)
    assert outer == {"aten::to": 75}  # every stream sync in the trace
    # The 945 aten::item ran on CPU tensors: no CUDA runtime call inside any of them.
    runtime_starts: dict[Any, list[float]] = {}
    for call in events(name):
        if call.get("cat") == "cuda_runtime":
            runtime_starts.setdefault((call["pid"], call["tid"]), []).append(call["ts"])
    for starts in runtime_starts.values():
        starts.sort()
    items = named(name, "aten::item")

    def has_runtime_call(op: dict[str, Any]) -> bool:
        starts = runtime_starts.get((op["pid"], op["tid"]), [])
        first = bisect.bisect_left(starts, op["ts"])
        return first < len(starts) and starts[first] <= op["ts"] + op["dur"]

    items_with_runtime = [i for i in items if has_runtime_call(i)]
    assert len(items) == 945 and items_with_runtime == []

    report = report_of(name)
    to_syncs = [s for s in report.syncs if s.op == "aten::to"]
    assert len(to_syncs) == len(stream_syncs)
    assert all("cudaStreamSynchronize" in s.apis for s in to_syncs)
    assert all(s.host_wait_us > 0 for s in to_syncs)
    assert not [s for s in report.syncs if "aten::item" in s.op_chain]
    assert not [s for s in report.syncs if s.op == "aten::is_nonzero"]


def test_item_heavy_copy_direction_decides_the_kind_outside_collective_waits() -> None:
    """Each stream sync is inside an aten::to copy; the copy's direction gives its kind,
    except where the copy reads back a collective's result inside torchrec's awaitable
    wait() (its innermost annotation): the host waits on the all-to-all there."""
    name = "a100_item_heavy_rank0"
    kinds = memcpy_kind_by_correlation(name)
    annotations = [
        e
        for e in events(name)
        if e.get("cat") == "user_annotation" and not e["name"].startswith("ProfilerStep#")
    ]
    expected: Counter = Counter()
    for sync in named(name, "cudaStreamSynchronize"):
        op = enclosing_ops(name, sync)[0]
        copies = [
            c
            for c in named(name, "cudaMemcpyAsync")
            if c["tid"] == op["tid"] and op["ts"] <= c["ts"] <= op["ts"] + op["dur"]
        ]
        direction = kinds[copies[0]["args"]["correlation"]].split(" (")[0]
        around = [
            a
            for a in annotations
            if a["tid"] == sync["tid"]
            and a["ts"] <= sync["ts"]
            and sync["ts"] + sync["dur"] <= a["ts"] + a["dur"]
        ]
        innermost = max(around, key=lambda a: (a["ts"], -a["dur"]))["name"] if around else ""
        if "Awaitable wait()" in innermost:
            expected["collective_wait"] += 1
        else:
            expected[
                {"Memcpy DtoH": "device_to_host_copy", "Memcpy HtoD": "blocking_host_to_device"}[
                    direction
                ]
            ] += 1
    assert expected == {
        "collective_wait": 20,
        "device_to_host_copy": 10,
        "blocking_host_to_device": 45,
    }

    kinds_reported = Counter(s.kind for s in report_of(name).syncs if s.op == "aten::to")
    assert kinds_reported == expected


def test_item_heavy_host_wait_covers_the_blocking_calls() -> None:
    name = "a100_item_heavy_rank0"
    blocking = sum(s["dur"] for s in named(name, "cudaStreamSynchronize"))
    reported = sum(s.host_wait_us for s in report_of(name).syncs if s.op == "aten::to")
    assert reported >= blocking
    assert report_of(name).summary.step_count == len(
        [e for e in events(name) if e["name"].startswith("ProfilerStep#")]
    )


def test_nccl_event_synchronize_calls_are_explicit_syncs() -> None:
    name = "a100_nccl_event_sync"
    event_syncs = named(name, "cudaEventSynchronize")
    assert len(event_syncs) == 24
    assert all(not enclosing_ops(name, s) for s in event_syncs)  # standalone API calls
    report = report_of(name)
    found = [s for s in report.syncs if s.api == "cudaEventSynchronize"]
    assert len(found) == len(event_syncs)
    assert {s.kind for s in found} == {"explicit_sync"} and {s.op for s in found} == {None}
    # 960 device-to-device copies never block the host.
    assert set(memcpy_kind_by_correlation(name).values()) == {"Memcpy DtoD (Device -> Device)"}
    assert by_api(report)["cudaMemcpyAsync"] == 0


def test_alexnet_cupti_sync_records_join_their_runtime_calls() -> None:
    name = "alexnet_cuda_sync_events"
    records = Counter(e["name"] for e in events(name) if e.get("cat") == "cuda_sync")
    assert records == {"Stream Sync": 16, "Context Sync": 5, "Stream Wait Event": 20}
    stream_syncs = named(name, "cudaStreamSynchronize")
    device_syncs = named(name, "cudaDeviceSynchronize")
    assert (len(stream_syncs), len(device_syncs)) == (16, 5)

    report = report_of(name)
    # One finding per runtime call: a joined cuda_sync record is not a second finding, and
    # "Stream Wait Event" (a device-side wait) is none at all.
    in_to = [s for s in report.syncs if s.op == "aten::to"]
    assert len(in_to) == len(stream_syncs)
    assert all("cudaStreamSynchronize" in s.apis for s in in_to)
    # The last of the 5 is the profiler stopping (see the test of the profiler's stop).
    assert len([s for s in report.syncs if s.api == "cudaDeviceSynchronize"]) == 4
    assert not [s for s in report.syncs if s.api in records or "Stream Wait Event" in s.apis]


def test_rocm_blocking_copy_and_device_synchronize() -> None:
    name = "rocm_mi250_minitoy"
    copies = named(name, "hipMemcpyWithStream")
    assert len(copies) == 2 and len(named(name, "hipDeviceSynchronize")) == 1
    report = report_of(name)
    assert report.traces[0].device == "rocm"
    assert by_api(report) == {"hipMemcpyWithStream": 2}  # the synchronize: profiler stop
    assert [s.api for s in report.profiler_overhead.syncs] == ["hipDeviceSynchronize"]
    assert {s.op for s in report.syncs if s.api == "hipMemcpyWithStream"} == {
        enclosing_ops(name, copies[0])[0]["name"]
    }


def test_cpu_legacy_trace_has_latent_findings_and_no_stack() -> None:
    name = "cpu_legacy_call_stack"
    raw = json.loads(gzip.decompress(Path(trace_path(name)).read_bytes()))["traceEvents"]
    stacks = [e["args"]["Call stack"] for e in raw if "Call stack" in e.get("args", {})]
    assert stacks and all(stack == "" for stack in stacks)
    assert not [e for e in raw if e.get("cat") in ("cuda_runtime", "kernel", "gpu_memcpy")]
    scalar_reads = named(name, "aten::_local_scalar_dense")

    report = report_of(name)
    assert report.traces[0].device == "cpu" and report.syncs == []
    assert report.traces[0].has_stacks is False
    readbacks = [s for s in report.latent if s.kind == "scalar_readback"]
    assert len(readbacks) == len(scalar_reads) == 5
    assert all(
        s.latent and s.host_wait_us == 0 and s.stack == [] and s.source is None
        for s in report.latent
    )


def test_df_index_resolver_has_one_device_synchronize_and_no_blocking_copies() -> None:
    name = "a100_df_index_resolver"
    assert len(named(name, "cudaMemcpyAsync")) == 2040
    assert set(memcpy_kind_by_correlation(name).values()) == {"Memcpy DtoD (Device -> Device)"}
    device_syncs = named(name, "cudaDeviceSynchronize")
    assert len(device_syncs) == 1
    report = report_of(name)
    # That synchronize is the profiler stopping: no finding is left.
    assert report.syncs == []
    (sync,) = report.profiler_overhead.syncs
    assert (sync.kind, sync.api, sync.op) == ("explicit_sync", "cudaDeviceSynchronize", None)
    assert sync.host_wait_us == pytest.approx(device_syncs[0]["dur"])


DEVICE_SYNCHRONIZE = ("cudaDeviceSynchronize", "hipDeviceSynchronize")


@pytest.mark.parametrize("name", [n for n in NAMES if n != "cpu_legacy_call_stack"])
def test_the_profilers_stop_is_listed_apart_in_traces_without_stacks(name: str) -> None:
    """torch's profiler synchronizes the device as it stops, so each GPU trace ends with a
    device synchronize outside any operator, after its last ProfilerStep: with no stack
    to say so, its place does. Any other device synchronize stays a finding."""
    syncs = sorted(
        (e for e in events(name) if e["name"] in DEVICE_SYNCHRONIZE), key=lambda e: e["ts"]
    )
    last = syncs[-1]
    assert not enclosing_ops(name, last)
    steps = [e for e in events(name) if e["name"].startswith("ProfilerStep#")]
    assert all(last["ts"] >= step["ts"] + step["dur"] for step in steps)
    later = [
        e
        for e in events(name)
        if (e["pid"], e["tid"]) == (last["pid"], last["tid"])
        and e.get("cat") in ("cpu_op", "cuda_runtime", "user_annotation")
        and e["ts"] > last["ts"]
    ]
    assert later == []

    report = report_of(name)
    (apart,) = report.profiler_overhead.syncs
    assert (apart.api, apart.ts_us, apart.op) == (last["name"], last["ts"], None)
    kept = sorted(s.ts_us for s in report.syncs if s.api in DEVICE_SYNCHRONIZE)
    assert kept == [e["ts"] for e in syncs[:-1]]


def test_run_folder_analyses_each_trace_as_a_worker() -> None:
    ((run_name, refs),) = list_runs(str(REAL)).items()
    assert run_name == "real" and sorted(r.worker for r in refs) == list(NAMES)
    report = analyze(str(REAL), contexts=False)
    assert sorted(t.worker for t in report.traces) == list(NAMES)
    assert all(t.error is None for t in report.traces)
    assert len(report.syncs) == sum(len(report_of(n).syncs) for n in NAMES)
    assert len(report.latent) == sum(len(report_of(n).latent) for n in NAMES)
