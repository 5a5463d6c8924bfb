"""A run profiled without ``prof.step()`` in a real TensorBoard and Chromium: its trace has no
ProfilerStep markers, so the step chart's one bar is the whole trace. Clicking it used to
filter to a "step 0" no sync is in (an empty table), and a link naming that step opened a
detail saying to record stacks the trace has."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from tests.e2e.helpers import new_page, plugin_url, rows, serve_tensorboard, skip_without_browser
from tests.kineto_builder import KinetoTraceBuilder, item_sync

skip_without_browser()


def _write(path: Any, marked: bool) -> None:
    builder = KinetoTraceBuilder()
    for n in range(5):
        with builder.step(n) if marked else nullcontext():
            item_sync(builder, stack=[("train.py", 8, "train_step")])
    builder.write(path)


def test_the_bar_of_a_trace_without_step_markers_is_the_whole_trace_not_a_step_filter(
    tmp_path: Any, browser: Any, page_errors: list[str]
) -> None:
    _write(tmp_path / "logs" / "plain" / "worker0.pt.trace.json", marked=False)
    _write(tmp_path / "logs" / "mixed" / "worker0.pt.trace.json", marked=True)
    _write(tmp_path / "logs" / "mixed" / "worker1.pt.trace.json", marked=False)
    expected = {"plain", "mixed"}
    with serve_tensorboard(tmp_path / "logs", cwd=tmp_path, expected_runs=expected) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=plain"))
        assert rows(page)
        # Its figures are per trace, and said so.
        syncs_card = page.inner_text("[data-testid=card-syncs]")
        assert "Syncs per trace" in syncs_card and "1 trace file (no step markers)" in syncs_card
        assert "Host wait per trace" in page.inner_text("[data-testid=card-wait]")
        bar = page.locator(".sa-chart g.step[data-whole-trace=true]")
        assert bar.count() == 1
        assert "the whole trace (no ProfilerStep markers" in (bar.get_attribute("aria-label") or "")
        texts = "e => e.map(t => t.textContent)"
        assert page.eval_on_selector_all(".sa-chart g.step text", texts) == ["all"]
        bar.click()
        assert page.locator("[data-testid=step-filter]").count() == 0
        assert rows(page)  # the sites stay: nothing was filtered away
        assert page.evaluate("location.hash") == "#run=plain"
        # Its syncs are in no step: said so, not a bare dash.
        page.locator("[data-testid=sites] tbody tr").first.click()
        page.wait_for_selector("[data-testid=detail] [data-testid=waited-in]")
        detail = page.inner_text("[data-testid=detail]")
        assert "Step\tnone" in detail or "Step\nnone" in detail, detail

        # A link naming the pseudo-step: said and closed, not an empty list or a detail
        # advising with_stack=True.
        page.goto(plugin_url(base, "#run=plain&step=0&site=train.py%3A8%3Aaten%3A%3Aitem"))
        said = page.wait_for_selector("[data-testid=missing-part]")
        assert "Step 0 is not in run" in said.inner_text()
        assert "with_stack" not in page.inner_text("body")

        # A run of a marked worker and an unmarked one: the marked worker's steps filter,
        # the unmarked worker's bar selects that worker only.
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=mixed"))
        rows(page)
        assert "Syncs per step" in page.inner_text("[data-testid=card-syncs]")  # steps, mostly
        banner = page.inner_text("[data-testid=no-step-markers]")
        assert "worker1 is counted as one step beside the other files' steps" in banner, banner
        page.click(".sa-chart g.step[data-worker=worker0][data-step='2']")
        page.wait_for_selector("[data-testid=step-filter]:has-text('step 2')")
        page.goto(plugin_url(base, "#run=mixed"))
        rows(page)
        page.click(".sa-chart g.step[data-whole-trace=true]")
        page.wait_for_function("location.hash.includes('worker=worker1')")
        assert page.locator("[data-testid=step-filter]").count() == 0
        assert rows(page)
    assert page_errors == []
