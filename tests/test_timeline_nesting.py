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
