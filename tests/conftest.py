"""Shared fixtures. Keep this small; announce additions to the other engineers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# ../shared next to the repository (real traces, notes), or where TB_SYNCFINDER_SHARED
# says (a clone elsewhere); absent: the tests using it skip, as the header says.
SHARED_DIR = Path(
    os.environ.get("TB_SYNCFINDER_SHARED") or Path(__file__).resolve().parents[1].parent / "shared"
)
REAL_TRACES_DIR = SHARED_DIR / "traces" / "real"


def pytest_report_header() -> str:
    found = "found" if (SHARED_DIR / "traces").is_dir() else "absent: the tests on its traces skip"
    return f"shared traces: {SHARED_DIR} ({found}; TB_SYNCFINDER_SHARED=DIR points elsewhere)"


@pytest.fixture
def real_traces_dir() -> Path:
    """The folder of real Kineto traces; skips the test when ../shared is not there."""
    if not REAL_TRACES_DIR.is_dir():
        pytest.skip(f"real traces not available at {REAL_TRACES_DIR}")
    return REAL_TRACES_DIR


def make_site(
    file: str | None,
    line: int | None,
    func: str | None,
    kind: str,
    ops: list[str],
    count: int,
    host_wait_us: float,
    gpu_idle_us: float,
    steps: int = 4,
    **extra: object,
):
    """A Site as aggregate.py makes one, for tests of the stages after it."""
    from tb_syncfinder.models import Site

    fields = dict(
        key=f"{file}:{line}:{ops[0] if ops else ''}",
        file=file,
        line=line,
        func=func,
        kind=kind,
        ops=ops,
        count=count,
        per_step=count / steps,
        host_wait_us=host_wait_us,
        gpu_idle_us=gpu_idle_us,
        share_of_step=(host_wait_us + gpu_idle_us) / (steps * 10_000),
        advice={
            "title": f"fix {kind}",
            "text": "do this",
            "before": "a",
            "after": "b",
            "removes": "host wait",
        },
        mean_host_wait_us=host_wait_us / max(count, 1),
        line_exact=True,
        def_line=line,
        apis=["cudaStreamSynchronize"],
        steps=list(range(1, steps + 1)),
    )
    fields.update(extra)
    return Site(**fields)


@pytest.fixture
def sample_report():
    """A small two-site CUDA report over 4 steps of 10 ms, built without the engine."""
    from tb_syncfinder.models import Frame, Report, Source, StepStats, Summary, Sync, TraceInfo

    item = make_site(
        "/home/me/proj/train.py",
        42,
        "train_step",
        "scalar_readback",
        ["aten::item", "aten::_local_scalar_dense"],
        8,
        3000.0,
        1000.0,
    )
    nonzero = make_site(
        "/home/me/proj/model.py",
        17,
        "forward",
        "dynamic_shape",
        ["aten::nonzero"],
        4,
        400.0,
        100.0,
        apis=["cudaMemcpyAsync"],
    )
    sync = Sync(
        kind="scalar_readback",
        api="cudaStreamSynchronize",
        apis=["cudaMemcpyAsync", "cudaStreamSynchronize"],
        op="aten::item",
        trigger_op="aten::_local_scalar_dense",
        step=1,
        thread=7,
        ts_us=1000.0,
        host_wait_us=375.0,
        gpu_idle_after_us=125.0,
        stack=[Frame("/home/me/proj/train.py", 40, "train_step", True)],
        source=Source("/home/me/proj/train.py", 42, 40, "train_step", True),
        trace="/traces/w.pt.trace.json",
        id="abcd1234-0",
        end_us=1375.0,
        site_key=item.key,
    )
    summary = Summary(
        sync_count=12,
        host_wait_us=3400.0,
        gpu_idle_us=1100.0,
        step_time_us=40_000.0,
        step_count=4,
        syncs_per_step=3.0,
        share_of_step=4500.0 / 40_000.0,
        estimated_saving_us=1125.0,
        estimated_step_time_us=8875.0,
        mean_step_time_us=10_000.0,
        by_kind={"scalar_readback": 8, "dynamic_shape": 4},
    )
    return Report(
        traces=[
            TraceInfo(
                path="/traces/w.pt.trace.json",
                worker="w",
                span=None,
                run="r",
                device="cuda",
                steps=4,
                has_gpu_activity=True,
            )
        ],
        summary=summary,
        syncs=[sync],
        sites=[nonzero, item],
        latent=[],
        steps=[
            StepStats(
                step=n,
                step_time_us=10_000.0,
                sync_count=3,
                host_wait_us=850.0,
                gpu_idle_us=275.0,
                trace="/traces/w.pt.trace.json",
            )
            for n in range(1, 5)
        ],
    )
