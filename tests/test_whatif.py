"""The what-if replay (issue 11): the unmodified replay reproduces the recording, and
dropping a sync's edges saves what the device timeline says it should, across steps."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_DIR
from kineto_builder import KinetoTraceBuilder, item_sync, mask_index_sync
from trace_shapes import sites_in_steps

from tb_syncfinder.detect import detect_syncs
from tb_syncfinder.reader import read_trace
from tb_syncfinder.timeline import build_timeline
from tb_syncfinder.whatif import WhatIf, profiler_episodes, replay

TRACES = SHARED_DIR / "traces"


def _replay(b: KinetoTraceBuilder, tmp_path: Path, **kwargs):
    path = b.write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    return episodes, replay(tl, episodes, **kwargs)


def _item(b: KinetoTraceBuilder, stream: int | None = None) -> dict:
    """``loss.item()``: a pageable DtoH copy, then a stream sync; returns the copy."""
    with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
        b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), stream=stream)
        copy = next(e for e in reversed(b.events) if e.get("cat") == "gpu_memcpy")
        b.runtime("cudaStreamSynchronize", stream=stream)
    return copy


def _end(event: dict) -> float:
    return event["ts"] + event["dur"]


def _step_spans(b: KinetoTraceBuilder) -> dict[int, float]:
    return {
        int(e["name"].split("#")[1]): e["dur"]
        for e in b.events
        if e.get("name", "").startswith("ProfilerStep#")
    }


# -- reproducing the recording -----------------------------------------------------------


def test_unmodified_replay_reproduces_the_built_step_times(tmp_path):
    b = KinetoTraceBuilder()
    kernels = {}
    for n in (1, 2, 3):
        with b.step(n):
            b.advance(150)
            first = b.kernel(dur=800)
            _item(b)
            b.advance(60)
            last = b.kernel(dur=120)
            kernels[n] = (first, last)
    _, result = _replay(b, tmp_path)
    assert result.available, result.reason
    spans = _step_spans(b)
    assert [s.step for s in result.steps] == [1, 2, 3]
    for step in result.steps:
        first, last = kernels[step.step]
        assert step.recorded_host_us == pytest.approx(spans[step.step])
        assert step.replayed_host_us == pytest.approx(spans[step.step], abs=1e-6)
        # The device span runs from the step's first device start to its last device end.
        assert step.recorded_device_us == pytest.approx(_end(last) - first["ts"])
        assert step.replayed_device_us == pytest.approx(step.recorded_device_us, abs=1e-6)
        assert step.fidelity == pytest.approx(1.0, abs=1e-9)
    assert result.fidelity_ok
    assert result.stats["deviating_nodes"] == 0
    assert result.stats["order_violations"] == 0


def test_step_time_is_the_longer_of_host_and_device(tmp_path):
    # No sync: the host runs ahead, its ProfilerStep spans are short while the GPU works.
    b = KinetoTraceBuilder()
    for n in (1, 2):
        with b.step(n):
            b.kernel(dur=3000)
    _, result = _replay(b, tmp_path)
    for step in result.steps:
        assert step.recorded_host_us < 100
        assert step.recorded_device_us == pytest.approx(3000)
        assert step.recorded_us == pytest.approx(3000)
    # Completion-based intervals add up to the window: the second step's kernel queues
    # behind the first, so it completes 3000 us later.
    assert result.steps[1].interval_us == pytest.approx(3000)
    assert sum(s.interval_us for s in result.steps) == pytest.approx(result.window_us)


# -- savings -------------------------------------------------------------------------------


def _step_end_sync_trace(steps: int = 4, kernel_us: float = 2000, python_us: float = 300):
    """GPU-bound steps that end with ``loss.item()``: the GPU idles at the start of the
    next step while Python prepares it."""
    b = KinetoTraceBuilder()
    copies, firsts = [], []
    for n in range(1, steps + 1):
        with b.step(n):
            b.advance(python_us)
            firsts.append(b.kernel(dur=kernel_us))
            copies.append(_item(b))
    bubbles = [nxt["ts"] - _end(copy) for copy, nxt in zip(copies, firsts[1:], strict=False)]
    return b, bubbles


def test_step_end_sync_saves_its_bubble_in_the_next_step(tmp_path):
    b, bubbles = _step_end_sync_trace()
    episodes, result = _replay(b, tmp_path)
    assert len(episodes) == 4
    bubble = bubbles[0]
    assert bubble > 300  # Python before the next launch, plus the launch itself
    first = result.episode_savings[0]
    # Almost nothing of it shows in the sync's own step (the GPU was busy until the sync
    # returned; only the host's few us after it): the bubble goes in the next step.
    assert first.per_step_us[0] == pytest.approx(0.0, abs=5.0)
    assert first.per_step_us[1] == pytest.approx(bubble, abs=5.0)
    assert first.total_us == pytest.approx(bubble, abs=2.0)
    # All of them: every step after the first loses its bubble.
    assert result.all_syncs.steady_us == pytest.approx(bubble, abs=2.0)
    assert result.all_syncs.total_us == pytest.approx(sum(bubbles), abs=6.0)
    # The sync of the last step would save in a step after the window: only the host's
    # few us after it are seen here.
    assert result.episode_savings[3].total_us == pytest.approx(0.0, abs=5.0)


def test_cpu_bound_step_saves_about_nothing(tmp_path):
    b = KinetoTraceBuilder()
    for n in range(1, 5):
        with b.step(n):
            b.kernel(dur=5)
            _item(b)
            b.advance(1000)  # the host is the bottleneck
    episodes, result = _replay(b, tmp_path)
    step_us = result.steps[1].recorded_us
    assert step_us > 1000
    # Only the few microseconds the host waited come back, not the GPU's idle time.
    assert result.all_syncs.steady_us < 0.02 * step_us
    assert result.gpu_idle_from_syncs_us < 0.02 * result.window_us
    assert result.gpu_idle_us > 0.9 * result.window_us  # idle, but not because of syncs


def test_gpu_bound_step_saves_about_its_bubble(tmp_path):
    b = KinetoTraceBuilder()
    bubbles = []
    for n in range(1, 5):
        with b.step(n):
            b.kernel(dur=1000)
            copy = _item(b)
            b.advance(200)  # host work after the sync: the GPU starves meanwhile
            nxt = b.kernel(dur=1000)
            bubbles.append(nxt["ts"] - _end(copy))
    assert min(bubbles) > 200
    _, result = _replay(b, tmp_path)
    for saving, bubble in zip(result.episode_savings, bubbles, strict=True):
        assert saving.total_us == pytest.approx(bubble, abs=2.0)
        assert saving.per_step_us[result.episode_savings.index(saving)] == pytest.approx(
            bubble, abs=2.0
        )
    assert result.all_syncs.total_us == pytest.approx(sum(bubbles), abs=8.0)
    assert result.gpu_idle_from_syncs_us == pytest.approx(sum(bubbles), abs=8.0)


def test_back_to_back_syncs_save_their_shared_bubble_only_together(tmp_path):
    b = KinetoTraceBuilder()
    idle = []  # device idle from the kernel's end to the next kernel, copies aside
    for n in range(1, 4):
        with b.step(n):
            kernel = b.kernel(dur=1500)
            first = _item(b)  # waits for the kernel
            second = _item(b)  # right after: the GPU has nothing left, it waits for nothing
            b.advance(250)
            nxt = b.kernel(dur=500)
            idle.append(nxt["ts"] - _end(kernel) - first["dur"] - second["dur"])
    assert min(idle) > 250
    episodes, result = _replay(b, tmp_path)
    assert len(episodes) == 6
    # Either one alone: the other still waits for the kernel, the bubble stays.
    for index in range(6):
        assert result.episode_savings[index].total_us < 10.0
    # Both together (the way a site is fixed): the bubble goes.
    both = result.saving([0, 1])
    assert both.total_us == pytest.approx(idle[0], abs=1.0)
    assert result.all_syncs.total_us == pytest.approx(sum(idle), abs=3.0)


def _two_stream_pipeline(record: bool) -> tuple[KinetoTraceBuilder, list[float]]:
    """Stream 7 and stream 20 take turns through events (each step's A waits for the
    previous step's B, B for A): the device is serial even without syncs."""
    b = KinetoTraceBuilder(concurrent_streams=True)
    after_b = None
    bubbles = []
    copy = None
    for n in range(1, 5):
        with b.step(n):
            b.advance(300)
            if after_b is not None:
                b.stream_wait_event(7, after_b, record=record)
            a = b.kernel(dur=600)
            if copy is not None:
                bubbles.append(a["ts"] - _end(copy))
            after_a = b.event_record(7)
            b.stream_wait_event(20, after_a, record=record)
            b.kernel(dur=600, stream=20)
            after_b = b.event_record(20)
            copy = _item(b, stream=20)
    return b, bubbles


@pytest.mark.parametrize("record", [True, False], ids=["cupti_records", "inferred"])
def test_event_waits_keep_two_streams_serial_in_the_what_if(tmp_path, record):
    b, bubbles = _two_stream_pipeline(record)
    episodes, result = _replay(b, tmp_path)
    assert result.stats["event_waits"] >= 6
    assert result.stats["event_waits_contradicted"] == 0
    # Without the syncs the host runs ahead, but B still waits for A and A for the previous
    # B: only the bubble goes. (Streams free to overlap would save another ~600 us.)
    assert result.all_syncs.steady_us == pytest.approx(bubbles[0], abs=3.0)
    assert result.fidelity_ok


def test_a_sync_on_another_thread_saves_through_the_thread_that_waits_for_it(tmp_path):
    # The main thread sits in run_backward while the autograd thread runs the backward
    # ops; a sync there keeps both waiting.
    b = KinetoTraceBuilder()
    main = b.tid
    bubbles = []
    for n in range(1, 4):
        with b.step(n):
            b.kernel(dur=800)
            with b.frame(("torch/autograd/graph.py", 860, "_engine_run_backward")):
                b.advance(20)
                b.tid = 4600  # the autograd thread
                with b.op("autograd::engine::evaluate_function: IndexBackward0"):
                    b.kernel(dur=800)
                    with b.op("aten::nonzero"):
                        b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"))
                        copy = next(e for e in reversed(b.events) if e.get("cat") == "gpu_memcpy")
                        b.runtime("cudaStreamSynchronize")
                    b.advance(200)
                    nxt = b.kernel(dur=800)
                    bubbles.append(nxt["ts"] - _end(copy))
                b.tid = main
                b.advance(20)
    episodes, result = _replay(b, tmp_path)
    assert result.stats["thread_joins"] == 3
    assert {ep.thread.tid for ep in episodes} == {4600}
    for saving, bubble in zip(result.episode_savings, bubbles, strict=True):
        assert saving.total_us == pytest.approx(bubble, abs=3.0)


# -- inputs the replay cannot use --------------------------------------------------------------


def test_missing_correlations_make_the_replay_unavailable_with_a_reason(tmp_path):
    b = KinetoTraceBuilder()
    for n in (1, 2):
        with b.step(n):
            b.kernel(dur=500, link=False)
            b.kernel(dur=500, link=False)
            _item(b)
    episodes, result = _replay(b, tmp_path)
    assert len(episodes) == 2  # the syncs are still found
    assert not result.available
    assert "correlation" in result.reason
    assert "4 of 6" in result.reason
    assert result.episode_savings == [] and not result.steps


@pytest.mark.parametrize("memset_on_device", [False, True], ids=["none_recorded", "some"])
def test_memset_calls_without_device_activity_do_not_stop_the_replay(tmp_path, memset_on_device):
    """cuDNN's RNNs call cudaMemsetAsync for zero bytes hundreds of times a step and CUPTI
    records nothing for them (an H200 GRU: 327 of 1,293 launch and copy calls), whether or
    not other memsets in the trace are recorded (``clip_grad_norm_``'s are): they say
    nothing of the launches' links. Kernels without theirs still do."""
    b = KinetoTraceBuilder()
    for n in (1, 2):
        with b.step(n):
            b.kernel(dur=500)
            for _ in range(6):
                b.runtime("cudaMemsetAsync", dur=0.3)
            if memset_on_device:
                corr = b._corr()
                b._x("cuda_runtime", "cudaMemsetAsync", b.now, 2, {"correlation": corr})
                b._device_event("gpu_memset", "Memset (Device)", 1.0, corr, None, b.now)
                b.advance(3)
            b.kernel(dur=500)
            _item(b)
    episodes, result = _replay(b, tmp_path)
    assert len(episodes) == 2
    assert result.available, result.reason
    assert any("12 memset calls have no device activity" in n for n in result.notes)
    assert result.episode_savings and all(s.total_us > 0 for s in result.episode_savings)


def test_kernels_without_device_activity_still_stop_the_replay_beside_memsets(tmp_path):
    b = KinetoTraceBuilder()
    for n in (1, 2):
        with b.step(n):
            b.kernel(dur=500)
            for _ in range(6):
                b.runtime("cudaMemsetAsync", dur=0.3)
                b.runtime("cudaLaunchKernel", dur=0.3)  # a launch whose kernel is lost
            b.kernel(dur=500)
            _item(b)
    _, result = _replay(b, tmp_path)
    assert not result.available and "12 of" in result.reason


def test_a_cpu_only_trace_has_no_replay(tmp_path):
    b = KinetoTraceBuilder(gpu=False)
    with b.step(1), b.op("aten::add"):
        b.advance(10)
    _, result = _replay(b, tmp_path)
    assert not result.available
    assert "no device activity" in result.reason


# -- what the caller chooses and keeps ---------------------------------------------------------


def test_the_profilers_own_device_synchronize_is_recognised(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=500)
        with (
            b.frame(("train.py", 20, "train")),
            b.frame(("torch/cuda/__init__.py", 1152, "synchronize")),
        ):
            b.runtime("cudaDeviceSynchronize")  # the user's torch.cuda.synchronize()
        b.kernel(dur=500)
        # A user item() in a record_function: the profiler's __enter__ frame encloses the
        # annotation (its frame never closes in the recorded tree), the annotation the op.
        with (
            b.frame(("torch/autograd/profiler.py", 854, "__enter__")),
            b.annotation("log_loss"),
            b.frame("<built-in method item of Tensor object>"),
        ):
            _item(b)
    frames = [
        ("torch/profiler/profiler.py", 884, "step"),
        ("torch/autograd/profiler.py", 403, "__exit__"),
        ("torch/cuda/__init__.py", 1152, "synchronize"),
        "<built-in function _cuda_synchronize>",
    ]
    with b._frames(frames):
        b.runtime("cudaDeviceSynchronize")
    path = b.write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    assert len(episodes) == 3
    assert profiler_episodes(tl, episodes) == [2]
    counted = [0, 1]
    result = replay(tl, episodes, counted=counted)
    assert result.counted == counted
    assert result.all_syncs == result.saving(counted)


def test_the_result_pickles_without_events_and_keeps_its_precomputed_savings(tmp_path):
    b, _ = _step_end_sync_trace()
    _, result = _replay(b, tmp_path, groups={"site": [0, 1, 2, 3]})
    data = pickle.dumps(result)
    assert b"tb_syncfinder.reader" not in data and b"msgspec" not in data
    restored: WhatIf = pickle.loads(data)
    assert restored.group_savings["site"] == result.group_savings["site"]
    assert restored.saving([0, 1, 2, 3]) == result.saving([0, 1, 2, 3])
    assert restored.saving_us([1]) == result.saving_us([1])
    assert restored.all_syncs_saving_us == result.all_syncs_saving_us
    with pytest.raises(KeyError):
        restored.saving([0, 2])  # never computed, and the graph is not kept
    assert result.saving([0, 2]).total_us > 0  # the live result can still compute it


# -- real traces -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "h100_demo/cnn_baseline",
        "h100_demo/seg_baseline",
        "real/a100_nccl_event_sync",
        "real/alexnet_cuda_sync_events",
        "real/rocm_mi250_minitoy",
    ],
)
def test_real_gpu_traces_replay_within_two_percent_per_step(name):
    path = TRACES / f"{name}.pt.trace.json.gz"
    if not path.is_file():
        pytest.skip(f"shared traces not available at {path}")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    result = replay(tl, episodes)
    assert result.available, result.reason
    assert result.fidelity_error <= 0.02
    assert all(0.98 <= s.fidelity <= 1.02 for s in result.steps)


# -- the engine stage and the job stage's hook --------------------------------------------


def test_report_ranks_sites_by_replayed_saving_and_says_how_it_was_obtained(tmp_path):
    from tb_syncfinder import analyze

    b, bubbles = _step_end_sync_trace()
    path = b.write(tmp_path / "w.pt.trace.json")
    data = analyze(str(path)).to_json()
    summary = data["summary"]
    assert summary["saving_method"] == "replay" and summary["saving_note"] is None
    assert "replaying" in summary["saving_how"]
    # Every step after the first loses its bubble; the bound's figure is kept beside it.
    assert summary["predicted_saving_us"] == pytest.approx(sum(bubbles), abs=6.0)
    assert summary["estimated_saving_us"] > summary["predicted_saving_us"]
    # GPU-bound steps: the wall step time is the device's span, not the host's.
    for step in data["steps"]:
        assert step["wall_time_us"] == pytest.approx(
            max(step["step_time_us"], step["device_time_us"])
        )
    (site,) = data["sites"]
    assert site["saving_method"] == "replay"
    assert site["predicted_saving_us"] == pytest.approx(summary["predicted_saving_us"], abs=1.0)
    assert all(s["saving_method"] == "replay" for s in data["syncs"])


def test_missing_correlations_give_a_report_with_the_bound_marked_and_why(tmp_path):
    from tb_syncfinder import analyze

    b = KinetoTraceBuilder()
    for n in (1, 2):
        with b.step(n):
            b.kernel(dur=500, link=False)
            b.kernel(dur=500, link=False)
            _item(b)
    data = analyze(str(b.write(tmp_path / "w.pt.trace.json"))).to_json()
    summary = data["summary"]
    assert summary["sync_count"] == 2
    assert summary["saving_method"] == "bound"
    assert "correlation" in summary["saving_note"]
    assert summary["predicted_saving_us"] == pytest.approx(summary["estimated_saving_us"])
    assert [s["saving_method"] for s in data["sites"]] == ["bound"]
    assert data["traces"][0]["saving_method"] == "bound"


def test_a_sync_before_a_collective_lets_its_kernel_start_earlier_by_the_bubble(tmp_path):
    from tb_syncfinder.collectives import extract_rank
    from tb_syncfinder.ranks import what_ifs_for_rank
    from tb_syncfinder.whatif import collective_earlier

    b = KinetoTraceBuilder()
    for n in (1, 2):
        with b.step(n):
            b.kernel(dur=2000)
            _item(b)
            b.advance(400)  # Python between the sync and the collective
            b.nccl_collective("allreduce", kernel_dur=100)
    path = b.write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    result = replay(tl, episodes)
    collectives = extract_rank(tl, None).collectives
    assert [c.index for c in collectives] == [0, 1]
    earlier = collective_earlier(result, collectives, {"first": [0], "second": [1]})
    # Without the sync the collective is launched while the kernel still runs: it starts
    # when the kernel ends instead of after the host's 400 us and more of Python.
    assert earlier["first"][0] > 390
    assert 1 not in earlier["first"]  # interval-local: nothing more gained after the first
    assert earlier["second"][1] > 390 and 0 not in earlier["second"]
    (whatif,) = [w for w in what_ifs_for_rank(3, earlier) if w.wait_id == "first"]
    assert (whatif.rank, whatif.collective_index, whatif.bound) == (3, 0, False)


# -- long traces: each sync alone, without a pass over the whole graph --------------------


def _many_item_steps(steps: int) -> KinetoTraceBuilder:
    """GPU-bound steps with a ``.item()`` in each: removing one sync moves everything after
    it, the worst case for replaying each sync alone."""
    b = KinetoTraceBuilder()
    for n in range(1, steps + 1):
        with b.step(n):
            b.kernel(dur=1000)
            _item(b)
            b.advance(200 + 10 * (n % 3))
            b.kernel(dur=1000)
    return b


def test_each_sync_alone_gives_the_same_floats_as_a_full_replay_and_restores_the_base(
    tmp_path,
):
    from tb_syncfinder import whatif

    path = _many_item_steps(12).write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    graph = whatif._build(tl, episodes)
    pristine = list(graph.base_values)
    for index in range(len(episodes)):
        key = frozenset((index,))
        full = graph.saving_from(graph.metrics_for(key))
        alone = graph.saving(key)
        assert (alone.total_us, alone.per_step_us) == (full.total_us, full.per_step_us)
        assert graph.base_values == pristine
    assert any(graph.saving(frozenset((i,))).total_us > 100 for i in range(len(episodes)))


def _host_bound_item_steps(steps: int) -> KinetoTraceBuilder:
    """Host-bound steps with an ``.item()`` each: without one, the host (and with it every
    later launch) runs earlier by its wait, everything after it by the same amount."""
    b = KinetoTraceBuilder()
    for n in range(1, steps + 1):
        with b.step(n):
            b.kernel(dur=300 + 10 * (n % 4))
            _item(b)
            b.advance(2000)
            b.kernel(dur=100)
    return b


def test_a_sync_whose_removal_shifts_the_rest_replays_only_up_to_the_shift(tmp_path):
    from tb_syncfinder import whatif

    path = _host_bound_item_steps(100).write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    graph = whatif._build(tl, episodes)
    pristine = list(graph.base_values)
    shifted = 0
    for index in range(len(episodes)):
        key = frozenset((index,))
        with graph._removed(graph._jumps_of(key)) as changed:
            work = len(changed)
            if changed.cut is not None:
                shifted += 1
                assert changed.shift > 0
                # What it evaluated: a few steps' variables, not the 99 steps after them.
                assert work < len(graph.base_values) / 10
        alone = graph.saving(key)
        full = graph.saving_from(graph.metrics_for(key))
        assert alone.total_us == pytest.approx(full.total_us, abs=1e-6)
        assert alone.per_step_us == pytest.approx(full.per_step_us, abs=1e-6)
        assert graph.base_values == pristine
    assert shifted >= 0.9 * len(episodes)  # the last few reach the end of the trace first
    assert graph.saving(frozenset((0,))).total_us > 100


def _steps_of_many_syncs(seed: int, steps: int, syncs_per_step: int) -> KinetoTraceBuilder:
    """Steps of many ``.item()`` calls (a ``.tolist()`` loop): kernels of random length on
    two streams, random host gaps (some stretches host-bound). A what-if moves some of a
    step's device ends and shifts others, and which end is a step's latest varies."""
    rng = random.Random(seed)
    b = KinetoTraceBuilder(concurrent_streams=True)
    for n in range(1, steps + 1):
        with b.step(n):
            for _ in range(syncs_per_step):
                for _ in range(rng.randint(0, 2)):
                    b.kernel(dur=rng.choice([5, 40, 300, 1500]), stream=rng.choice([7, 9]))
                _item(b)
                b.advance(rng.choice([2, 20, 400]))
    return b


@pytest.mark.parametrize("seed", range(6))
def test_a_step_of_many_syncs_gives_each_the_same_floats_as_a_full_replay(tmp_path, seed):
    # Each what-if reads a step's latest device end from the ends it changed and the
    # others by their base value, not from all of the step's ends (quadratic before).
    from tb_syncfinder import whatif

    path = _steps_of_many_syncs(seed, 3, 40).write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    graph = whatif._build(tl, episodes)
    pristine = list(graph.base_values)
    for index in range(len(episodes)):
        key = frozenset((index,))
        alone = graph.saving(key)
        full = graph.saving_from(graph.metrics_for(key))
        assert alone.total_us == pytest.approx(full.total_us, abs=1e-6)
        assert alone.per_step_us == pytest.approx(full.per_step_us, abs=1e-6)
        assert graph.base_values == pristine
    assert len(episodes) == 120


def test_a_steps_latest_end_read_from_the_largest_bases_is_the_largest_of_all_its_ends():
    from tb_syncfinder.whatif import _latest_end

    rng = random.Random(7)
    for _ in range(3000):
        size = rng.randint(1, 12)
        step = list(range(100, 100 + size))
        base = {v: float(rng.choice([0, 10, 20, 30, 40, 50]) + rng.random()) for v in step}
        changed = set(rng.sample(step, rng.randint(0, size)))
        moved = {v: base[v] - rng.choice([0.0, 5.0, 25.0, 60.0]) for v in changed}
        # Each variable not changed: unshifted, or shifted by its stretch's own amount (a
        # gap between two removed syncs, or the tail past the last).
        shifts = {v: rng.choice([0.0, 3.0, 15.0, 45.0]) for v in set(step) - changed}
        values = [0.0] * 200
        for v in step:
            values[v] = moved.get(v, base[v])  # changed ones in place, as in a what-if
        expected = max(moved[v] if v in changed else base[v] - shifts[v] for v in step)
        by_base = sorted(step, key=base.__getitem__, reverse=True)
        shift_of = shifts.__getitem__ if any(shifts.values()) else None
        found = _latest_end(by_base, [moved[v] for v in changed], values, changed, shift_of)
        assert found == expected


def _sites_in_every_step(seed: int) -> KinetoTraceBuilder:
    """Steps each calling ``.item()`` at the same few lines (sites), with random kernels on
    one or two streams, random host gaps (some stretches host-bound), sites that skip a
    step, and a second launching thread: a site's what-if removes one sync per step."""
    rng = random.Random(seed)
    b = KinetoTraceBuilder(concurrent_streams=rng.random() < 0.5)
    sites = rng.randint(2, 8)
    second_thread = rng.random() < 0.3
    host_bound = rng.random()
    for n in range(1, rng.randint(3, 10) + 1):
        with b.step(n):
            for _site in range(sites):
                if rng.random() < 0.15:
                    continue
                for _ in range(rng.randint(0, 25)):
                    streams = {"stream": rng.choice([7, 9])} if b.concurrent_streams else {}
                    b.kernel(dur=rng.choice([3, 20, 80, 300, 1500]), **streams)
                    busy = rng.random() > host_bound
                    b.advance(rng.choice([1, 3, 10]) if busy else rng.choice([50, 400]))
                if second_thread and rng.random() < 0.3:
                    with b.thread(2):
                        for _ in range(rng.randint(1, 6)):
                            b.kernel(dur=rng.choice([20, 60]))
                            b.advance(4)
                _item(b)
                b.advance(rng.choice([2, 20, 400]))
    return b


def _values_in(graph, changed) -> list[float]:
    """Every variable's value in the what-if ``changed`` describes (inside ``_removed``):
    in place where it wrote it, else the base value less its stretch's shift."""
    from tb_syncfinder.whatif import _shift_of

    shift_of = _shift_of(changed, graph._shift_tables.def_pos)
    return [
        value if var in changed else value - shift_of(var)
        for var, value in enumerate(graph.base_values)
    ]


# Seeds 5, 10 and 29 caught a stretch skipped over one of the what-if's own syncs.
@pytest.mark.parametrize("seed", [0, 5, 10, 29, 35, 38, 65, 70])
def test_a_sites_what_if_skipping_the_stretches_between_its_syncs_gives_the_full_replays_figures(
    tmp_path, seed
):
    from tb_syncfinder import whatif

    path = _sites_in_every_step(seed).write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    graph = whatif._build(tl, episodes)
    pristine = list(graph.base_values)
    count = len(episodes)
    groups = [frozenset(range(first, count, every)) for every in (2, 3, 5, 8) for first in (0, 1)]
    skipped = 0
    for group in groups:
        full = graph.metrics_for(group)
        with graph._removed(graph._jumps_of(group)) as changed:
            skipped += len(changed.stretches)
            assert _values_in(graph, changed) == pytest.approx(full.values, abs=1e-6, nan_ok=True)
        quick = graph.saving(group)
        expected = graph.saving_from(full)
        assert quick.total_us == pytest.approx(expected.total_us, abs=1e-6)
        assert quick.per_step_us == pytest.approx(expected.per_step_us, abs=1e-6)
        assert graph.base_values == pristine
    assert skipped or seed in (0, 35)  # the others each skip at least one stretch


@pytest.mark.parametrize("late_thread", [False, True])
def test_a_sites_what_if_in_gpu_bound_steps_evaluates_about_its_own_syncs_only(
    tmp_path, late_thread
):
    """Twenty sites each syncing once per GPU-bound step: removing a site's syncs moves
    everything after its first one, and each stretch between two of them is the base replay
    shifted. Its what-if used to evaluate every task from its first sync to its last (400
    sites x a 50 MB trace: 30 s). A thread whose first point is in the last step (fixed
    where it was recorded: nothing feeds it) does not stop the stretches before it."""
    from tb_syncfinder import whatif

    b = KinetoTraceBuilder()
    for n in range(1, 9):
        with b.step(n):
            for _site in range(20):
                for _ in range(10):
                    b.kernel(dur=20)
                _item(b)
            if late_thread and n == 8:
                with b.thread(2):
                    b.runtime("cudaGetDevice", dur=2)
    path = b.write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    graph = whatif._build(tl, episodes)
    site = frozenset(range(3, len(episodes), 20))  # the fourth line's sync in each step
    assert len(site) == 8
    with graph._removed(graph._jumps_of(site)) as changed:
        assert len(changed.stretches) == 7  # one stretch between each two steps' syncs
        # About 60 variables around each sync, not the 7/8 of the trace between them (with
        # the late thread, the rest of the last step too: no shift holds up to its point).
        assert len(changed) < len(graph.base_values) / 4
    expected = graph.saving_from(graph.metrics_for(site))
    assert graph.saving(site).total_us == pytest.approx(expected.total_us, abs=1e-6)
    assert expected.total_us > 0


def test_a_sites_what_if_whose_syncs_move_little_evaluates_only_around_them(tmp_path):
    """Forty sites per step, each ``.item()`` after a few kernels, and autograd's thread
    launching most of the work: removing a sync moves two variables, which nothing reads
    far after it. A site's what-if used to evaluate every task from its first sync to its
    last (the shift never holds: the other thread's work does not move)."""
    from tb_syncfinder import whatif

    b = sites_in_steps(6, 40, kernels=5, second_thread=True)
    path = b.write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    graph = whatif._build(tl, episodes)
    pristine = list(graph.base_values)
    for first in (0, 7, 39):
        site = frozenset(range(first, len(episodes), 40))
        assert len(site) == 6
        evaluated = graph._dense_evaluated
        saving = graph.saving(site)
        assert graph._dense_evaluated - evaluated < len(graph.tasks) / 20
        expected = graph.saving_from(graph.metrics_for(site))
        assert (saving.total_us, saving.per_step_us) == (expected.total_us, expected.per_step_us)
        assert graph.base_values == pristine


def _steps_with_launch_bubbles(steps: int) -> KinetoTraceBuilder:
    """Many short launches and an ``.item()`` per step, then a short kernel on an idle
    second stream: without one sync, the next step's kernels fill its bubble."""
    b = KinetoTraceBuilder()
    for n in range(1, steps + 1):
        with b.step(n):
            for k in range(30):
                b.kernel(dur=150 + 7 * ((n + k) % 5))
                b.advance(3)
            _item(b)
            b.kernel(dur=20, stream=7)
            b.advance(40 + 5 * (n % 3))
    return b


def _steps_with_a_second_launching_thread(steps: int) -> KinetoTraceBuilder:
    """An ``.item()`` per step on the main thread, and a second thread (autograd's backward
    thread) launching most kernels onto the same stream: without one sync the main thread
    moves, the second thread's kernels stay where they were (3 % of the tasks change)."""
    return sites_in_steps(steps, 1, kernels=5, second_thread=True)


def _dense_only(graph):
    graph._count_dense = lambda evaluated, changed: None  # never switches
    return graph


@pytest.mark.parametrize(
    "shape", [_steps_with_launch_bubbles, _steps_with_a_second_launching_thread]
)
def test_a_what_if_evaluating_only_the_tasks_it_moved_gives_the_whole_range_figures(
    tmp_path, shape
):
    from tb_syncfinder import whatif

    path = shape(15).write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    dense = _dense_only(whatif._build(tl, episodes))
    sparse = whatif._build(tl, episodes)
    sparse._readers_wanted = True
    pristine = list(sparse.base_values)
    keys = [frozenset((i,)) for i in range(len(episodes))]
    keys += [frozenset(range(len(episodes))), frozenset((1, 4, 9))]
    for key in keys:
        with dense._removed(dense._jumps_of(key)) as a, sparse._removed(sparse._jumps_of(key)) as b:
            assert (dict(b), b.cut, b.shift) == (dict(a), a.cut, a.shift)
        assert sparse.saving(key) == dense.saving(key)
        assert sparse.metrics_for(key).values == dense.metrics_for(key).values
        assert sparse.base_values == pristine
    assert sparse._readers is not None
    assert not any(sparse._readers.pending)  # every flag cleared after each what-if
    assert any(dense.metrics_for(key).values != pristine for key in keys)  # some moved


@pytest.mark.skipif(not TRACES.is_dir(), reason="needs ../shared/traces")
def test_a_trace_whose_what_ifs_pass_far_more_tasks_than_they_move_switches_to_the_moved():
    """The real A100 trace with an ``.item()`` in every step and the backward thread
    launching most kernels: each what-if ran to the end of the trace (a live variable
    never moves, so the shift never holds) and changed 6 % of what it passed."""
    from tb_syncfinder import whatif

    path = TRACES / "real" / "a100_item_heavy_rank0.pt.trace.json.gz"
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    auto = whatif.replay(tl, episodes)
    assert auto._graph._readers is not None
    dense = whatif._build(tl, episodes)
    _dense_only(dense)
    for index, saving in enumerate(auto.episode_savings):
        if saving is not None:
            assert dense.saving(frozenset((index,))) == saving


def test_a_host_bound_trace_keeps_evaluating_whole_ranges(tmp_path):
    from tb_syncfinder import whatif

    path = _host_bound_item_steps(15).write(tmp_path / "h.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    graph = whatif._build(tl, episodes)
    for index in range(len(episodes)):
        graph.saving(frozenset((index,)))
    assert graph._readers is None  # each what-if stops at its shift: nothing to gain


def test_a_pinned_value_later_than_the_base_moves_every_task_reading_it(tmp_path):
    """A window's carried state may pin a variable later than its base value: then every
    reader, not only those whose base value it set, is evaluated again."""
    from tb_syncfinder import whatif

    path = _steps_with_a_second_launching_thread(6).write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    dense = _dense_only(whatif._build(tl, episodes))
    sparse = whatif._build(tl, episodes)
    sparse._readers_wanted = True
    n_dev = dense.n_dev
    # Each device end pinned 500 us later in turn (early items: many later tasks read them).
    for item in range(0, n_dev, 7):
        var = n_dev + item
        pins = whatif._Pins({var: dense.base_values[var] + 500.0}, None)
        for key in (frozenset(), frozenset((0,))):
            assert sparse.metrics_for(key, pins).values == dense.metrics_for(key, pins).values
    assert sparse._readers is not None


def test_readers_indexed_while_a_window_pins_a_task_still_see_its_own_inputs(tmp_path):
    """The index of readers may be built inside a window's pins (a pinned task is a
    constant then): the what-ifs after it must still re-evaluate that task when its inputs
    move."""
    from tb_syncfinder import whatif

    path = _steps_with_launch_bubbles(6).write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    dense = _dense_only(whatif._build(tl, episodes))
    keys = [frozenset((i,)) for i in range(len(episodes))]
    expected = [dense.saving(key) for key in keys]
    for item in range(0, dense.n_dev, 5):
        sparse = whatif._build(tl, episodes)
        sparse._readers_wanted = True
        pins = whatif._Pins({item: dense.base_values[item]}, None)  # its own start, pinned
        sparse.metrics_for(frozenset(), pins)  # the index is built here
        assert [sparse.saving(key) for key in keys] == expected


def test_each_syncs_saving_keeps_only_the_steps_it_changes(tmp_path):
    """A sync removed alone changes the few steps until its replay rejoins or only shifts
    the base: its per-step figures are kept as those, so memory grows with syncs plus
    steps. A list per sync grew with syncs x steps: 20,000 syncs in 10,000 steps took
    1.6 GB; 80,000 in 40,000 (a 167 MB trace) ran a 24 GB machine out of memory."""
    _episodes, result = _replay(_many_item_steps(120), tmp_path)
    savings = [s for s in result.episode_savings if s is not None]
    assert len(savings) == 120 and all(s.step_count == 120 for s in savings)
    assert sum(len(s.nonzero) for s in savings) <= 3 * len(savings)
    # What is kept is what the full list said, and the figures read from it are the same.
    for saving in savings:
        dense = saving.per_step_us
        assert len(dense) == 120
        assert {n: us for n, us in enumerate(dense) if us != 0.0} == saving.nonzero
        assert saving.over(0, 119) == sum(dense)
        assert saving.steady_us == sum(dense[1:]) / 119
    assert pickle.loads(pickle.dumps(savings[5])) == savings[5]


def test_a_long_trace_replays_syncs_alone_within_a_budget_and_says_which_are_bounds(
    tmp_path, monkeypatch
):
    from tb_syncfinder import analyze, whatif

    b = _many_item_steps(30)
    episodes, unbounded = _replay(b, tmp_path)
    monkeypatch.setattr(whatif, "ALONE_REPLAY_MIN", 0)
    monkeypatch.setattr(whatif, "ALONE_REPLAY_PASSES", 2)
    _, bounded = _replay(b, tmp_path)
    replayed = [s for s in bounded.episode_savings if s is not None]
    assert 0 < len(replayed) < len(episodes)
    # The ones replayed are the same figures; the others are left to the bound, and said.
    assert replayed == unbounded.episode_savings[: len(replayed)]
    assert bounded.all_syncs == unbounded.all_syncs
    assert any("not replayed each alone" in note for note in bounded.notes)
    data = analyze(str(tmp_path / "w.pt.trace.json")).to_json()
    methods = [s["saving_method"] for s in data["syncs"]]
    assert "replay" in methods and "bound" in methods
    assert "not replayed each alone" in data["traces"][0]["saving_note"]


def test_the_figures_of_each_steps_span_add_up_to_the_whole_trace(tmp_path):
    # Device work runs into the steps after its launch (a queue on each of two streams,
    # so work of two steps runs at once): a span's idle must count the work of other steps
    # inside it, and only that. The windows of a large trace add them up.
    b = KinetoTraceBuilder()
    for n in range(1, 9):
        with b.step(n):
            for _ in range(3):
                b.kernel("void deep_kernel<float>()", dur=700 + 300 * (n % 2), stream=7 + n % 2)
            b.advance(300)
            if n in (4, 8):
                _item(b)
    path = b.write(tmp_path / "q.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    whole = replay(tl, episodes)
    spans = [replay(tl, episodes, span_steps=[step.number]) for step in tl.steps]
    assert whole.gpu_idle_us > 0
    assert sum(s.window_us for s in spans) == pytest.approx(whole.window_us)
    assert sum(s.gpu_idle_us for s in spans) == pytest.approx(whole.gpu_idle_us)
    # Signed per span (the syncs before a span move work into it), clamped once summed.
    assert max(0.0, sum(s.gpu_idle_from_syncs_us for s in spans)) == pytest.approx(
        whole.gpu_idle_from_syncs_us
    )
    assert sum(s.all_syncs.total_us for s in spans) == pytest.approx(whole.all_syncs.total_us)


def _long_run(seed: int) -> KinetoTraceBuilder:
    """Many short steps, mostly GPU-bound, each calling ``.item()`` at one of twelve lines
    and some a mask; a few steps launch nothing (no device end). A site's what-if changes
    the steps from its first sync to its last, most of them shifted wholly."""
    rng = random.Random(seed)
    b = KinetoTraceBuilder(concurrent_streams=rng.random() < 0.5)
    host_bound = rng.random() < 0.3
    for n in range(1, 301):
        with b.step(n):
            if n % 10 == 7:
                b.advance(rng.choice([5, 500]))  # a step that launches nothing
                continue
            for _ in range(rng.randint(1, 4)):
                streams = {"stream": rng.choice([7, 9])} if b.concurrent_streams else {}
                b.kernel(dur=rng.choice([3, 50, 300]), **streams)
                b.advance(rng.choice([200, 400]) if host_bound else rng.choice([1, 10]))
            kernel_us = rng.choice([None, 80, 300])
            item_sync(b, stack=[("train.py", 10 + n % 12, "train_step")], kernel_us=kernel_us)
            if n % 5 == 0:
                mask_index_sync(b, sequence_number=n, stack=[("model.py", 50, "forward")])
            b.advance(rng.choice([2, 30]))
    return b


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_a_sites_steps_walked_with_numpy_give_the_same_floats_as_walked_in_python(
    tmp_path, monkeypatch, seed
):
    """A what-if spanning many steps walks them with numpy (``_Graph._walk_steps``); every
    saving, per step and in all, must be the floats the Python walk gives, not close ones:
    reports are compared byte for byte between versions."""
    from tb_syncfinder import whatif

    path = _long_run(seed).write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    count = len(episodes)
    sites = [frozenset(range(first, count, every)) for every in (1, 3, 12, 25) for first in (0, 5)]
    groups = sites + [frozenset((i,)) for i in range(0, count, 17)]

    def savings(vector_min: int) -> tuple[list[tuple[float, dict[int, float]]], int]:
        monkeypatch.setattr(whatif, "VECTOR_STEPS_MIN", vector_min)
        walks = []
        real_walk = whatif._Graph._walk_steps

        def counted_walk(self, *args):
            walks.append(args[1] - args[0])
            return real_walk(self, *args)

        monkeypatch.setattr(whatif._Graph, "_walk_steps", counted_walk)
        graph = whatif._build(tl, episodes)
        out = []
        for group in groups:
            saving = graph.saving(group)
            out.append((saving.total_us, dict(saving.nonzero)))
        return out, len(walks)

    in_python, python_walks = savings(10**9)
    with_numpy, numpy_walks = savings(8)
    assert python_walks == 0 and numpy_walks >= len(sites)
    assert with_numpy == in_python  # exact: == on floats
    assert any(total > 0 for total, _ in in_python)


def test_walking_steps_with_numpy_reads_each_step_where_the_python_walk_would(tmp_path):
    """``_walk_steps`` against the walk it replaces, on inputs no recorded trace has made
    (a cut inside the walked steps, steps shifted wholly and recomputed among them, a step
    without device work): the base step past the cut less the shift, a shifted or
    recomputed step's own ends, the running latest of host and device ends (NaN: none)."""
    from tb_syncfinder import whatif

    path = _long_run(1).write(tmp_path / "w.pt.trace.json")
    tl = build_timeline(read_trace(str(path)))
    graph = whatif._build(tl, detect_syncs(tl))
    tables = graph._build_shift_tables()
    base = graph.base_metrics
    n_steps = len(base.intervals)
    start, stop, shift = 20, n_steps - 20, 7.25
    cut = int(tables.step_first[n_steps // 2])
    assert any(base.dev_hi[n] != base.dev_hi[n] for n in range(start, stop))  # NaN steps
    steps = np.arange(start + 3, stop, 5)
    shifted = (steps, base_host := np.asarray(base.host_end)[steps] - 3.5, base_host + 1.0)
    recomputed = ({n: base.host_end[n] - 11.0 for n in range(start + 1, stop, 7)}, {})
    recomputed[1].update({n: float("nan") for n in range(start + 2, stop, 9)})
    done = base.completion[start - 1]
    per_step: dict[int, float] = {}
    walked = graph._walk_steps(start, stop, done, recomputed, shifted, cut, shift, per_step)

    ends = {
        n: (h, d)
        for n, h, d in zip(steps.tolist(), *[a.tolist() for a in shifted[1:]], strict=True)
    }
    expected: dict[int, float] = {}
    previous = done
    for n in range(start, stop):
        end, device = base.host_end[n], base.dev_hi[n]
        if tables.step_first[n] >= cut:
            end, device = end - shift, device - shift
        end, device = ends.get(n, (end, device))
        end = recomputed[0].get(n, end)
        device = recomputed[1].get(n, device)
        done = max(done, end, device if device == device else done)
        if base.intervals[n] - (done - previous) != 0.0:
            expected[n] = base.intervals[n] - (done - previous)
        previous = done
    assert walked == done
    assert per_step == expected
    assert any(tables.step_first[n] >= cut for n in expected)
