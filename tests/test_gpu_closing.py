"""A real H200 recording of the profiler's closing step written as a trace of its own
(docs/validation.md, section 13): ``schedule(wait=0, warmup=0, active=3)`` with the default
``repeat=0`` over a 3-step loop makes the profiler's exit write a second trace holding only
``ProfilerStep#3``. ``gpu_closing/closing.py`` recorded both runs (with and without
``with_stack``) and is the source the traces name. No GPU is needed here."""

from __future__ import annotations

from pathlib import Path

from tb_syncfinder import analyze

HERE = Path(__file__).resolve().parent / "gpu_closing"
SCRIPT = (HERE / "closing.py").read_text(encoding="utf-8").splitlines()
ITEM_LINE = next(n for n, line in enumerate(SCRIPT, 1) if "loss.item()" in line)


def _item_site(report):
    (site,) = [s for s in report.sites if "aten::item" in s.ops]
    return site


def test_with_stacks_the_closing_steps_own_trace_adds_no_step_to_the_run() -> None:
    report = analyze(HERE / "closing_stack", source_roots=[str(HERE)])
    assert sorted(t.steps for t in report.traces) == [0, 3]
    assert report.summary.step_count == 3
    site = _item_site(report)
    assert (site.line, site.count, site.per_step) == (ITEM_LINE, 3, 1.0)
    # The profiler's own waits (its step transitions, its stop) stay apart from the findings.
    assert report.profiler_overhead


def test_without_stacks_the_item_is_still_found_in_every_step() -> None:
    """The closing trace's device synchronize cannot be told from the program's without
    stacks, so its step still counts (section 13); the finding itself is unchanged."""
    report = analyze(HERE / "closing_nostack", source_roots=[str(HERE)])
    assert _item_site(report).count == 3
    assert sorted(t.steps for t in report.traces)[-1] == 3
