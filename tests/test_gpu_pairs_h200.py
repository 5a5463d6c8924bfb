"""The savings pairs re-recorded on an H200 (``gpu_pairs_h200/``), after the saving without
the profiler (``report --unprofiled-step-ms``) was written on the H100 recordings of
``gpu_pairs/``: the lines the report names against torch's sync detector, and where the
figure without the profiler stands against what the fixes measured (docs/validation.md,
section 15). No GPU is needed here.

On this host the profiled steps of five baselines are slower than the per-event estimate of
the profiler's overhead explains (its data pipeline, 8.3 ms a batch, ran slower under the
profiler), or faster than their unprofiled runs: those get no figure and say why, rather
than a guess.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tb_syncfinder import analyze

PAIRS_DIR = Path(__file__).resolve().parent / "gpu_pairs_h200"
PAIRS = json.loads((PAIRS_DIR / "pairs.json").read_text(encoding="utf-8"))["pairs"]
VARIANTS = [
    (name, variant)
    for name, pair in PAIRS.items()
    for variant, found in pair.items()
    if isinstance(found, dict) and "trace" in found
]
# dynamic_shapes' boolean masks inline in a loop already running: candidates of one site
# (as on the H100, section 5), and their backward, which torch warns at in loss.backward()
# (line 124, in backward_step), a site of its own; torch.cuda.synchronize, which torch's
# detector does not warn at.
INEXACT = {("dynamic_shapes", 157), ("dynamic_shapes", 158)}
BACKWARD = {("dynamic_shapes", 124)}
UNWARNED = {("explicit_synchronize", 222)}


def _report(name: str, variant: str, step_ms: float | None = None):  # noqa: ANN202
    return analyze(
        str(PAIRS_DIR / PAIRS[name][variant]["trace"]),
        source_roots=[str(PAIRS_DIR)],
        unprofiled_step_us=None if step_ms is None else step_ms * 1000,
    )


@pytest.mark.parametrize(("name", "variant"), VARIANTS)
def test_every_line_torch_warned_at_is_named_and_no_other(name: str, variant: str) -> None:
    report = _report(name, variant)
    warned = {int(line) for line in PAIRS[name][variant]["warned"] or {}}
    exact = {s.line for s in report.sites if s.line_exact}
    candidates = {line for s in report.sites if not s.line_exact for line in s.candidates}
    for line in warned:
        if (name, line) in INEXACT:
            assert line in candidates
        elif (name, line) in BACKWARD:
            assert any(s.backward for s in report.sites)
        else:
            assert line in exact
    assert exact - warned <= {line for n, line in UNWARNED if n == name}
    if variant == "fixed":
        assert report.sites == []


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_the_saving_without_the_profiler_moves_towards_the_measured_one_or_says_why(
    name: str,
) -> None:
    baseline, fixed = PAIRS[name]["baseline"], PAIRS[name]["fixed"]
    measured = statistics.median(
        b - f for b, f in zip(baseline["rounds_ms"], fixed["rounds_ms"], strict=True)
    )
    report = _report(name, "baseline", baseline["median_ms"])
    profiled = report.summary.predicted_saving_per_step_us / 1000
    unprofiled = report.summary.unprofiled_predicted_saving_per_step_us
    trace = report.traces[0]
    if unprofiled is None:
        assert trace.unprofiled_note  # no guess: why not
        return
    unprofiled /= 1000
    if trace.unprofiled_overhead_scale:  # something was taken out: towards the measured
        assert abs(unprofiled - measured) < abs(profiled - measured)
