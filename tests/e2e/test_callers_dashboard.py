"""A helper's read called from several lines, in a real TensorBoard and Chromium: the tab's
row names the lines that called it, with their counts, as the CLI does."""

from __future__ import annotations

import runpy
from typing import Any

from tests.e2e.helpers import new_page, plugin_url, rows, serve_tensorboard, skip_without_browser
from tests.test_callers import _METER_SCRIPT, _SCRIPT

skip_without_browser()


def test_the_row_of_a_helpers_read_names_the_lines_that_called_it(
    tmp_path: Any, browser: Any, page_errors: list[str]
) -> None:
    script = tmp_path / "w.py"
    script.write_text(_SCRIPT)
    logdir = tmp_path / "logs" / "run"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    with serve_tensorboard(tmp_path / "logs", cwd=tmp_path, expected_runs={"run"}) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=run"))
        assert rows(page)
        said = page.inner_text("[data-testid=row-callers]")
        assert (
            said == "called from line 23 (4), line 24 (4), line 26 (2, under `if step % 2 == 0:`)"
        )
    assert page_errors == []


def test_the_detail_of_a_read_two_calls_below_a_periodic_test_says_so(
    tmp_path: Any, browser: Any, page_errors: list[str]
) -> None:
    """imagenet's ``AverageMeter.__str__`` under ``progress.display(i)``: the detail says the
    reads are already every N steps, and which line's test makes them so."""
    script = tmp_path / "w.py"
    script.write_text(_METER_SCRIPT)
    logdir = tmp_path / "logs" / "run"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    with serve_tensorboard(tmp_path / "logs", cwd=tmp_path, expected_runs={"run"}) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=run"))
        assert rows(page)
        page.locator("[data-testid=sites] tbody tr").first.click()
        said = page.wait_for_selector("[data-testid=site-spread]").inner_text()
        assert said == (
            "in 2 of 4 steps, up to 2 in one: already every N steps (under if step % 2 == 0:, "
            "around the call at line 28 that leads here)"
        )
    assert page_errors == []
