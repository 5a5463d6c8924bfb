"""Host wait, GPU idle after a sync, per-step stats and the saving estimate."""

from __future__ import annotations

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder.aggregate import build_report
from tb_syncfinder.engine import analyze_trace


def test_host_wait_is_the_summed_blocking_calls_and_idle_runs_to_next_kernel(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=500)
        with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
            copy = b.runtime("cudaMemcpyAsync", dur=10, memcpy=("DtoH", "Pageable"))
            wait = b.runtime("cudaStreamSynchronize")  # lasts until the GPU is done
        b.advance(70)  # Python work before the next launch: the GPU starves
        kernel = b.kernel(dur=50)
    (sync,) = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json"))).syncs
    assert wait["dur"] > 400
    assert sync.host_wait_us == pytest.approx(copy["dur"] + wait["dur"])
    assert sync.gpu_idle_after_us == pytest.approx(kernel["ts"] - (wait["ts"] + wait["dur"]))


def test_idle_is_zero_while_another_stream_is_still_busy(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=2000, stream=20)  # long work on a side stream
        b.device_now = b.now  # the main stream is free
        b.runtime("cudaStreamSynchronize", dur=5)
        b.advance(50)
        b.kernel(dur=10)
    (sync,) = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json"))).syncs
    assert sync.gpu_idle_after_us == 0


def test_idle_is_capped_at_the_end_of_the_step(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=100)
        b.runtime("cudaDeviceSynchronize")
        b.advance(300)
    step_end = b.now
    b.advance(10_000)
    b.kernel(dur=10)
    (sync,) = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json"))).syncs
    assert sync.gpu_idle_after_us == pytest.approx(step_end - sync.end_us)


def test_step_stats_and_summary_saving_do_not_double_count(tmp_path):
    b = KinetoTraceBuilder()
    for n in (1, 2):
        with b.step(n):
            item_sync(b, kernel_us=300)
            item_sync(b, kernel_us=300)
            b.advance(40)
            b.kernel(dur=100)
    result = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json")))
    assert [(s.step, s.sync_count) for s in result.steps] == [(1, 2), (2, 2)]
    for st in result.steps:
        assert st.host_wait_us == pytest.approx(
            sum(s.host_wait_us for s in result.syncs if s.step == st.step)
        )
    report = build_report([result])
    summary = report.summary
    assert summary.step_count == 2 and summary.syncs_per_step == 2
    assert summary.estimated_saving_us <= summary.host_wait_us + summary.gpu_idle_us
    assert summary.estimated_saving_us > summary.host_wait_us * 0.9
    assert 0 < summary.share_of_step <= 1
    assert summary.estimated_step_time_us == pytest.approx(
        summary.mean_step_time_us - summary.estimated_saving_us / 2
    )


def test_trace_without_profiler_steps_is_one_step_spanning_its_ops(tmp_path):
    b = KinetoTraceBuilder()
    with b.op("aten::add"):
        b.kernel(dur=100)
    item_sync(b)
    result = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json")))
    assert len(result.steps) == 1 and result.steps[0].sync_count == 1
    assert result.steps[0].step_time_us > 0


def test_back_to_back_syncs_count_their_shared_gpu_bubble_once():
    from tb_syncfinder.cost import idle_union_us
    from tb_syncfinder.models import Sync

    def sync_ending(end_us: float, idle_us: float) -> Sync:
        return Sync(
            kind="explicit_sync",
            api="cudaEventSynchronize",
            apis=["cudaEventSynchronize"],
            op=None,
            trigger_op=None,
            step=1,
            thread=1,
            ts_us=end_us - 5,
            host_wait_us=5,
            gpu_idle_after_us=idle_us,
            trace="t.json",
            end_us=end_us,
            device_id=0,
        )

    # Three syncs in a row before the next kernel at t=1000: one bubble of 900 us.
    syncs = [sync_ending(100, 900), sync_ending(110, 890), sync_ending(120, 880)]
    assert idle_union_us(syncs) == 900
    # The same bubble on another device, or in another trace, is a different bubble.
    other = sync_ending(100, 900)
    other.device_id = 1
    assert idle_union_us([*syncs, other]) == 1800


def test_a_sync_outside_the_only_step_numbered_zero_saves_no_step_time():
    from tb_syncfinder.cost import estimated_saving_us
    from tb_syncfinder.models import StepStats, Sync

    def sync_in(step, end_us: float) -> Sync:
        return Sync(
            kind="explicit_sync",
            api="cudaDeviceSynchronize",
            apis=["cudaDeviceSynchronize"],
            op=None,
            trigger_op=None,
            step=step,
            thread=1,
            ts_us=end_us - 100,
            host_wait_us=100,
            gpu_idle_after_us=0,
            trace="t.json",
            end_us=end_us,
            device_id=0,
        )

    steps = [StepStats(step=0, step_time_us=1000, sync_count=1, host_wait_us=100, gpu_idle_us=0)]
    syncs = [sync_in(0, 500), sync_in(None, 5000)]  # ProfilerStep#0, then a sync after it
    assert estimated_saving_us(steps, syncs, step_markers=True) == 100
    # No ProfilerStep markers at all: the whole trace is the step, both syncs are in it.
    assert estimated_saving_us(steps, syncs, step_markers=False) == 200


def test_the_gpu_lanes_copy_of_profiler_steps_is_not_a_step_of_its_own(tmp_path):
    """torch 2.11 writes each ProfilerStep#N twice: on the host, and as a
    gpu_user_annotation on the GPU lane, later (the GPU runs behind). Only the host's is
    the step: the GPU's copy of step N, starting inside host step N+1, made that step's
    syncs fall outside any step (step null, zero per-step cost)."""
    b = KinetoTraceBuilder()
    for n in (1, 2, 3):
        with b.step(n):
            b.advance(100)
            item_sync(b)
    host = {e["name"]: e for e in b.events if e["name"].startswith("ProfilerStep#")}
    for n in (1, 2):
        later = host[f"ProfilerStep#{n + 1}"]
        b.events.append(
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": f"ProfilerStep#{n}",
                "pid": b.device,
                "tid": b.stream,
                "ts": later["ts"] + 10,
                "dur": 20,
                "args": {"External id": n},
            }
        )
    result = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json")))
    assert [s.step for s in result.syncs] == [1, 2, 3]
    assert [st.sync_count for st in result.steps] == [1, 1, 1]


def test_the_detail_names_the_lane_of_device_wide_sync_records_not_stream_minus_one(tmp_path):
    """CUPTI writes cudaDeviceSynchronize's "Context Sync" record on no stream (tid -1)."""
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=300)
        b.runtime("cudaDeviceSynchronize", sync="Context Sync")
        b.kernel(dur=100)
    result = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json")))
    (sync,) = result.syncs
    lanes = {event["lane"] for event in result.contexts[sync.id]["device"]}
    assert "GPU 0 device-wide syncs" in lanes
    assert not any("stream -1" in lane for lane in lanes)
    assert any(lane.startswith("GPU 0 stream ") for lane in lanes)
