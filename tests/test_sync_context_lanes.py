"""The host lanes of a sync's detail view ("Timeline around the sync"): each host event's
depth is the number of drawn host events (operators, annotations, runtime calls; not
python frames) around it in time. ``prof.step()`` enters each ``ProfilerStep#N`` span inside
python frames that it outlives, and the next call's frames begin inside step N and end
after it: counted along the thread's chain of open nodes, step N sat a lane below step N-1
and every host event of later steps with it, out of the dashboard's four host lanes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder.engine import Options, analyze_trace

STEPS = 5
DEMO_TRACES = Path(__file__).resolve().parents[1] / "tb_syncfinder" / "demo" / "traces"
STEP_FRAME = ("torch/profiler/profiler.py", 884, "step")
ENTER_FRAME = "<built-in method _record_function_enter_new of PyCapsule object at 0x7f1c>"
TRAIN_STEP = (("train.py", 20, "train_step"),)


def _steps_entered_by_the_profiler(b: KinetoTraceBuilder) -> None:
    """A loop of ``STEPS`` steps recorded with stacks, as torch writes it: each step's span
    begins in ``prof.step()``'s frames and ends in the next call's, and each step reads a
    loss with ``.item()`` (a sync inside the step)."""
    previous: dict[str, Any] | None = None
    with b.frame(("train.py", 10, "train")):
        for n in range(1, STEPS + 2):
            with b.frame(STEP_FRAME):
                b.advance(5)
                if previous is not None:
                    previous["dur"] = b.now - previous["ts"]  # ends inside this frame
                b.advance(5)
                if n > STEPS:
                    break
                with b.frame(ENTER_FRAME):
                    b.advance(2)
                    previous = b._x(
                        "user_annotation",
                        f"ProfilerStep#{n}",
                        b.now,
                        0,
                        {"External id": b._ext(), "Ev Idx": 0},
                    )
                    b.advance(2)
            b.advance(20)
            with b.frames(TRAIN_STEP):
                with b.op("aten::add"):
                    b.kernel(dur=50)
                item_sync(b, stack=TRAIN_STEP)
            b.advance(20)


def _depths(context: dict[str, Any]) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for event in context["host"]:
        name = event["name"]
        name = "ProfilerStep" if name.startswith("ProfilerStep#") else name
        found.setdefault(name, set()).add(event["depth"])
    return found


def test_each_steps_host_events_start_at_the_top_lane_in_every_step(tmp_path):
    b = KinetoTraceBuilder()
    _steps_entered_by_the_profiler(b)
    path = b.write(tmp_path / "steps.pt.trace.json")
    result = analyze_trace(str(path), Options())
    syncs = sorted(result.syncs, key=lambda s: s.ts_us)
    assert len(syncs) == STEPS
    for sync in syncs:
        depths = _depths(result.contexts[sync.id])
        # The step at the top, then the operators in it, then the sync's runtime call:
        # the same lanes in step 5 as in step 1.
        assert depths["ProfilerStep"] == {0}, (sync.step, depths)
        assert depths["aten::item"] == {1}, (sync.step, depths)
        assert depths["aten::_local_scalar_dense"] == {2}, (sync.step, depths)
        assert depths["cudaStreamSynchronize"] == {3}, (sync.step, depths)


def _lanes_problems(context: dict[str, Any]) -> list[str]:
    """What a lane drawing of ``context``'s host events would get wrong: two events of one
    lane overlapping, an event a lane down with no event around it a lane up, a step span
    below the top lane."""
    tolerance = 1e-3
    host = context["host"]
    by_depth: dict[int, list[dict[str, Any]]] = {}
    for event in host:
        by_depth.setdefault(event["depth"], []).append(event)
    problems = []
    for depth, events in by_depth.items():
        events.sort(key=lambda e: e["ts_us"])
        for a, b in zip(events, events[1:], strict=False):
            if a["ts_us"] + a["dur_us"] > b["ts_us"] + tolerance:
                problems.append(f"{a['name']} and {b['name']} overlap at depth {depth}")
    for event in host:
        start, end = event["ts_us"], event["ts_us"] + event["dur_us"]
        if event["name"].startswith("ProfilerStep#") and event["depth"] != 0:
            problems.append(f"{event['name']} at depth {event['depth']}")
        if event["depth"] > 0 and not any(
            up["ts_us"] <= start + tolerance and up["ts_us"] + up["dur_us"] + tolerance >= end
            for up in by_depth.get(event["depth"] - 1, [])
        ):
            problems.append(f"{event['name']} at depth {event['depth']} is inside nothing")
    return problems


@pytest.mark.parametrize("name", ["cnn_baseline", "seg_baseline"])
def test_the_demo_syncs_host_lanes_nest_in_every_step(name):
    # The bundled demo (recorded with stacks): ProfilerStep#N sat at depth N-2, and from
    # step 6 on every host event of the detail view lay below the four lanes drawn.
    result = analyze_trace(str(DEMO_TRACES / f"{name}.pt.trace.json.gz"), Options())
    assert len({sync.step for sync in result.syncs}) > 2
    for sync in result.syncs:
        context = result.contexts[sync.id]
        assert context["host"], sync.step
        assert min(event["depth"] for event in context["host"]) == 0, sync.step
        assert _lanes_problems(context) == [], sync.step


def test_the_lanes_of_the_real_traces_nest(real_traces_dir):
    traces = sorted(real_traces_dir.glob("*.json.gz"))
    if not traces:
        pytest.skip(f"no real traces in {real_traces_dir}")
    for trace in traces:
        result = analyze_trace(str(trace), Options())
        for sync_id, context in result.contexts.items():
            assert _lanes_problems(context) == [], (trace.name, sync_id)


def test_spans_that_overlap_without_one_holding_the_other_get_lanes_of_their_own(tmp_path):
    """Lightning's shape: a hook near the end of each ``run_training_batch`` span calls
    ``prof.step()``, so ``ProfilerStep#N`` begins inside batch N's span and outlives it, and
    batch N+1's span begins inside that step. Neither holds the other: both had depth 0 and
    were drawn over each other on one row."""
    b = KinetoTraceBuilder()
    previous_step = None
    for number in range(1, 5):
        batch = b._x("user_annotation", "run_training_batch", b.now, 0, {"External id": b._ext()})
        if previous_step is not None:
            b.advance(3)
            previous_step["dur"] = b.now - previous_step["ts"]
        b.advance(10)
        with b.frames(TRAIN_STEP):
            item_sync(b, stack=TRAIN_STEP)
        b.advance(10)
        previous_step = b._x(
            "user_annotation", f"ProfilerStep#{number}", b.now, 0, {"External id": b._ext()}
        )
        b.advance(5)
        batch["dur"] = b.now - batch["ts"]
        b.advance(5)
    previous_step["dur"] = b.now - previous_step["ts"]
    result = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json")), Options())
    assert len(result.syncs) == 4
    for sync in result.syncs:
        overlapping = [p for p in _lanes_problems(result.contexts[sync.id]) if "overlap" in p]
        assert overlapping == [], sync.step
