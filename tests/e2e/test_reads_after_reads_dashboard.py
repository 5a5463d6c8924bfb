"""Reads right after other reads in a real TensorBoard and Chromium: the tab's rows say
what the CLI says, that on a GPU only the first of them waits."""

from __future__ import annotations

import runpy
from typing import Any

from tests.e2e.helpers import new_page, plugin_url, rows, serve_tensorboard, skip_without_browser
from tests.test_reads_after_reads import _SCRIPT

skip_without_browser()


def test_the_rows_of_reads_after_reads_say_only_the_first_waits(
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
        said = sorted(page.locator("[data-testid=row-after-read]").all_inner_texts())
        assert said == [
            "8 of these 12 reads come right after another read, nothing queued between: "
            "on a GPU only the first read of each such run waits",
            "right after the read at line 14, nothing queued between: on a GPU the host "
            "waits there first, so this read costs little until that one goes",
        ]
    assert page_errors == []
