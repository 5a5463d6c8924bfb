"""The H100 demo traces in ../shared/traces/h100_demo (torch 2.11, with_stack): the mask's
backward (seg.py:127, missed before) is found and attributed to its forward line, and the
profiler's own synchronize is not among the findings. Skipped without the shared folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SHARED_DIR

from tb_syncfinder import analyze
from tb_syncfinder.attribute import is_profiler_stack

H100 = SHARED_DIR / "traces" / "h100_demo"
RUNS = ("cnn_baseline", "cnn_optimized", "seg_baseline", "seg_optimized")

pytestmark = pytest.mark.skipif(not H100.is_dir(), reason=f"{H100} is not here")


@pytest.fixture(scope="module")
def reports():
    return {run: analyze(H100 / f"{run}.pt.trace.json.gz") for run in RUNS}


def _sites(report) -> list[tuple[str, int, bool, bool]]:
    return sorted((Path(s.file).name, s.line, s.line_exact, s.backward) for s in report.sites)


def test_the_mask_backward_is_found_at_its_forward_line_run_by_loss_backward(reports):
    report = reports["seg_baseline"]
    assert _sites(report) == [
        ("seg.py", 76, True, False),
        ("seg.py", 77, True, False),
        ("seg.py", 82, True, False),
        ("seg.py", 82, True, True),
    ]
    backward = next(s for s in report.sites if s.backward)
    assert backward.count == 5 and backward.kind == "dynamic_shape"
    assert backward.ops[0] == "autograd::engine::evaluate_function: IndexBackward0"
    assert (backward.run_by.line, backward.run_by.line_exact, backward.run_by.func) == (
        127,
        True,
        "baseline_step",
    )
    for sync in report.syncs:
        if sync.source.backward:
            assert sync.stack == [] and sync.forward_op == "aten::index"
            assert sync.forward_stack[0].func == "baseline_loss"


def test_no_profiler_sync_is_among_the_findings(reports):
    for run, report in reports.items():
        assert not any(is_profiler_stack(s.stack) for s in report.syncs), run
        assert "explicit_sync" not in report.summary.by_kind, run
        overhead = report.profiler_overhead
        assert overhead.count == 1, run
        (sync,) = overhead.syncs
        assert sync.api == "cudaDeviceSynchronize" and is_profiler_stack(sync.stack)
        assert overhead.host_wait_us == sync.host_wait_us > 0


def test_the_other_demo_lines_stay_where_they_were(reports):
    assert _sites(reports["cnn_baseline"]) == [
        ("cnn.py", 95, True, False),
        ("cnn.py", 96, True, False),
        ("cnn.py", 104, True, False),
    ]
    assert reports["cnn_optimized"].sites == [] and reports["seg_optimized"].sites == []
