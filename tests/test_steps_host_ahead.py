"""A host that runs steps ahead of its GPU (a GPU-bound program without syncs): the work of
the step before the trace, still queued when recording began, runs inside the first steps'
host spans without a launch in the trace. It is no profiled step's work: each step's device
time is its own work's span (the bundled demo's ``seg_optimized`` read 47 ms per step
against 13 ms of work before, and compare called its fix 30 ms slower)."""

from __future__ import annotations

import json

import pytest
from kineto_builder import KinetoTraceBuilder

from tb_syncfinder import analyze

KERNEL_US = 2_000.0
KERNELS_PER_STEP = 4


def _host_ahead_trace(tmp_path, queued_before: int):
    b = KinetoTraceBuilder()
    early = [b.kernel("void warmup_step_kernel()", dur=KERNEL_US) for _ in range(queued_before)]
    for n in (1, 2, 3, 4):
        with b.step(n):
            for _ in range(KERNELS_PER_STEP):
                b.kernel("void step_kernel()", dur=KERNEL_US)
            b.advance(1_500)  # the host's own work: less than the GPU's 8 ms
    doc = b.to_dict()
    # The warm-up step's launches were not recorded (the profiler's schedule drops them);
    # its kernels ran inside the trace.
    cut = {k["args"]["correlation"] for k in early}
    doc["traceEvents"] = [
        e
        for e in doc["traceEvents"]
        if not (
            (e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in cut)
            or (e.get("cat") == "ac2g" and e.get("id") in cut)
        )
    ]
    path = tmp_path / "worker0.pt.trace.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("queued_before", [0, 3])
def test_work_queued_before_the_trace_is_in_no_steps_device_time(tmp_path, queued_before):
    report = analyze(str(_host_ahead_trace(tmp_path, queued_before))).to_json()
    own = KERNEL_US * KERNELS_PER_STEP
    for step in report["steps"]:
        assert step["device_time_us"] == pytest.approx(own, abs=KERNELS_PER_STEP * 3), step
    assert report["summary"]["mean_wall_step_time_us"] == pytest.approx(own, abs=20)
