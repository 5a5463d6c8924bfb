"""torch_npu runs in a real TensorBoard and a headless Chromium: their figures are an NPU's,
in the compare view and the occurrences' orders as in the rest of the tab, and the step
time without the profiler gives the bound the NPU's own work sets (NPU runs are not
replayed: the form was not offered, and that bound came from the CLI only)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.e2e.helpers import new_page, plugin_url, serve_tensorboard, skip_without_browser

skip_without_browser()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_ascend_layout import torch_npu_trace, write_run  # noqa: E402

# Runs as tensorboard_trace_handler lays them out: each in a profile folder of its own time.
BASE = "npu_baseline/plugins/profile/2026_11_27_01_14_11"
NEW = "npu_optimized/plugins/profile/2026_11_27_02_20_45"
LEVEL0 = "npu_level0"  # torch_npu's default level: no AscendCL call, its syncs latent
ASCEND = "npu_ascend"  # torch_npu's own layout, which the PyTorch Profiler tab lists not


@pytest.fixture(scope="module")
def npu_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two torch_npu runs with the NPU's tasks (1 ms steps, 500 us of NPU work each): one
    whose steps each upload a batch and print a loss, one that only prints it."""
    logdir = tmp_path_factory.mktemp("npu_logdir")
    for run, level, upload in ((BASE, 2, True), (NEW, 2, False), (LEVEL0, 0, False)):
        (logdir / run).mkdir(parents=True)
        trace = {"traceEvents": torch_npu_trace(level, steps=4, upload=upload)}
        (logdir / run / "npu0.pt.trace.json").write_text(json.dumps(trace), encoding="utf-8")
    write_run(logdir, level=2, run_name=ASCEND)
    with serve_tensorboard(logdir, cwd=logdir, expected_runs={BASE, NEW, LEVEL0, ASCEND}) as base:
        yield base


def test_an_npu_runs_step_time_without_the_profiler_gives_the_bound_of_its_work(
    npu_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors, width=1600, height=1000)
    page.goto(plugin_url(npu_board, f"#run={quote(BASE, safe='')}"))
    form = page.wait_for_selector("[data-testid=unprofiled-form]")
    assert "NPU traces are not replayed" in form.inner_text()
    page.fill("[data-testid=unprofiled-input]", "0.9")
    page.press("[data-testid=unprofiled-input]", "Enter")
    answer = page.wait_for_selector("[data-testid=unprofiled-text]")
    text = answer.inner_text()
    assert "fixing every sync saves at most 400 µs per step (the step minus the NPU's" in text
    assert answer.get_attribute("data-fitted") == "true"  # a figure, not a note of none
    assert "unprof=0.9" in page.evaluate("location.hash")
    # No figure per site: no column of them.
    assert page.locator("[data-testid=row-unprofiled]").count() == 0
    # A step the profiler's overhead cannot make of a 1 ms one: no bound from it.
    page.fill("[data-testid=unprofiled-input]", "12")
    page.press("[data-testid=unprofiled-input]", "Enter")
    page.wait_for_function(
        "() => (document.querySelector('[data-testid=unprofiled-text]') || {}).textContent"
        "?.includes('12 ms per step')"
    )
    text = page.inner_text("[data-testid=unprofiled-text]")
    assert "longer than the profiled step" in text and "at most" not in text
    assert page.get_attribute("[data-testid=unprofiled-text]", "data-fitted") == "false"
    assert page_errors == []


def test_the_compare_view_and_the_occurrences_of_npu_runs_say_npu(
    npu_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors, width=1600, height=1000)
    # No baseline named: the run of the same name, in its own profile folder, is taken.
    page.goto(plugin_url(npu_board, f"#run={quote(NEW, safe='')}&view=compare"))
    summary = page.wait_for_selector("[data-testid=compare-summary]").inner_text()
    assert "NPU idle after syncs" in summary and "GPU" not in summary, summary
    # The run names wrap in their heads: the table fits its box (it hid a column at 1600 px).
    widths = page.eval_on_selector(
        "[data-testid=compare-summary]",
        "t => [t.parentElement.scrollWidth, t.parentElement.clientWidth]",
    )
    assert widths[0] <= widths[1], widths
    titles = page.eval_on_selector_all(
        "[data-testid=compare-sites] th[title]", "ths => ths.map(th => th.title)"
    )
    assert titles and not any("GPU" in t for t in titles), titles
    # A site of 4 occurrences: its orders say the NPU's idle.
    page.goto(plugin_url(npu_board, f"#run={quote(NEW, safe='')}"))
    page.locator("[data-testid=sites] tbody tr").first.click()
    order = page.wait_for_selector("[data-testid=occ-sort]")
    options = order.eval_on_selector_all("option", "os => os.map(o => o.textContent)")
    assert "longest NPU idle after" in options and not any("GPU" in o for o in options), options
    # A trace named as the PyTorch Profiler tab's loader takes workers: where to look there.
    page.wait_for_selector("[data-testid=perfetto-link]")
    assert "then pick Runs" in page.inner_text("[data-testid=profiler-link]")
    # torch_npu's own layout (RUN/W_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json) the
    # tab does not list: no "then pick Runs ..." to follow; the Perfetto trace stays.
    page.goto(plugin_url(npu_board, f"#run={ASCEND}"))
    page.locator("[data-testid=sites] tbody tr").first.click()
    page.wait_for_selector("[data-testid=perfetto-link]")
    assert page.locator("[data-testid=profiler-link]").count() == 0
    assert page_errors == []


def test_a_level0_runs_latent_syncs_are_said_to_sync_on_the_npu_with_no_cost_columns(
    npu_board: str, browser: Any, page_errors: list[str]
) -> None:
    """At torch_npu's default level the timeline said the print "would sync here on a GPU",
    and its occurrences were a table of dashes under "Waited in | Wait | Idle after"."""
    page = new_page(browser, page_errors, width=1600, height=1000)
    page.goto(plugin_url(npu_board, f"#run={LEVEL0}"))
    # What the list leaves out, as the terminal says under it: it read as every sync.
    left_out = page.wait_for_selector("[data-testid=not-listed]").inner_text()
    assert left_out.startswith("Not listed: copies to or from the host"), left_out
    page.locator("[data-testid=sites] tbody tr").first.click()
    table = page.wait_for_selector("[data-testid=occurrences]")
    heads = table.eval_on_selector_all("thead th", "ths => ths.map(th => th.textContent)")
    assert heads == ["Step", "Syncs in"], heads
    timeline = page.wait_for_selector("[data-testid=detail]").inner_text()
    assert "on a GPU" not in timeline, timeline
    assert "syncs here on the NPU" in page.content()
    assert page_errors == []
