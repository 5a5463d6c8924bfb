"""The host timeline's nesting on a real torch trace with stacks, where spans cross: the
profiler's ``ProfilerStep#N`` begins inside the Python frames that enter it and outlives
them, and ``prof.step()``'s frames begin in step N and end in step N+1."""

from __future__ import annotations

import pytest
from cpu_workload import WORKLOAD, profile_workload

from tb_syncfinder.reader import read_trace
from tb_syncfinder.timeline import build_timeline

STEPS = 8
TOLERANCE_US = 1e-3


@pytest.fixture(scope="module")
def threads(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("nesting")
    trace = folder / "w.pt.trace.json"
    source = WORKLOAD.replace(
        "def main(trace_path, steps=3):", f"def main(trace_path, steps={STEPS}):"
    )
    profile_workload(source, folder / "train.py", trace)
    timeline = build_timeline(read_trace(str(trace)))
    return [t for t in timeline.threads.values() if t.nodes]


def test_every_nodes_parent_encloses_it(threads) -> None:
    for thread in threads:
        for i, p in enumerate(thread.parent):
            if p >= 0:
                assert thread.starts[p] <= thread.starts[i], (thread.nodes[p].name, i)
                assert thread.ends[p] + TOLERANCE_US >= thread.ends[i], thread.nodes[i].name


def test_chains_do_not_grow_with_the_steps(threads) -> None:
    """Each step's chain ran through every earlier step (the stack's top taken as the
    parent), so a chain walk grew with the run: 1.8 s of an 800-step trace's 2.2 s."""
    (main,) = [t for t in threads if any(n.name.startswith("ProfilerStep#") for n in t.nodes)]
    steps = [i for i, n in enumerate(main.nodes) if n.name.startswith("ProfilerStep#")]
    assert len(steps) == STEPS
    first, last = (max(len(main.ancestors(j)) for j in range(a, b)) for a, b in (
        (steps[0], steps[1]), (steps[-1], len(main.nodes))
    ))  # fmt: skip
    assert last <= first + 1, (first, last)


def test_a_context_finds_every_node_still_open_before_its_window(threads) -> None:
    """What a sync's context draws as begun before its window and still open, the spans
    the last node before it outlives included (no chain of enclosing nodes holds those):
    exactly the earlier nodes whose end reaches the window, found without walking every
    earlier step."""
    from tb_syncfinder.context import _Depths

    for thread in threads:
        depths = _Depths(thread)
        for first in range(1, len(thread.nodes), 5):
            at = thread.starts[first - 1] + 0.5 * (thread.starts[first] - thread.starts[first - 1])
            expected = [j for j in range(first) if thread.ends[j] >= at]
            assert depths.open_before(first, at) == expected


def test_a_child_ending_with_its_parent_stays_its_child_at_epoch_microseconds(tmp_path) -> None:
    """At ~1.7e15 us (microseconds since the epoch) a double holds a time to 0.25 us: a
    child ending when its parent ends may compute a ``ts + dur`` past the parent's by a
    rounding step, and was taken for a span that outlives it (its grandparent became its
    parent: 42 parents of a real trace shifted there changed)."""
    import json

    base = 1.7e15
    for k in range(2000):
        parent_ns, end_ns = int(base * 1000) + 7919 * k, int(base * 1000) + 7919 * k + 50003
        child_ns = parent_ns + 1 + k % 997
        parent = (float(f"{parent_ns / 1000:.3f}"), float(f"{(end_ns - parent_ns) / 1000:.3f}"))
        child = (float(f"{child_ns / 1000:.3f}"), float(f"{(end_ns - child_ns) / 1000:.3f}"))
        if sum(child) - sum(parent) > 1e-3:
            break
    else:
        pytest.skip("no pair whose computed ends part by more than 1e-3 us")

    def event(name: str, ts: float, dur: float) -> dict:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    path = tmp_path / "w.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [
        event("outer", parent[0] - 10, 100), event("aten::to", *parent),
        event("aten::_to_copy", *child),
    ]}))  # fmt: skip
    (thread,) = [t for t in build_timeline(read_trace(str(path))).threads.values() if t.nodes]
    names = [n.name for n in thread.nodes]
    assert names[thread.parent[names.index("aten::_to_copy")]] == "aten::to"
