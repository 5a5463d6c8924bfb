"""The code edited while TensorBoard runs, in a real TensorBoard and Chromium: the tab finds
the lines again once the user comes back to it, without a reload."""

from __future__ import annotations

import os
import time
from typing import Any

from tests.e2e.helpers import (
    get_json,
    new_page,
    plugin_url,
    rows,
    serve_tensorboard,
    skip_without_browser,
)
from tests.kineto_builder import KinetoTraceBuilder, item_sync

skip_without_browser()


def _run_entry(base: str) -> dict[str, Any]:
    [run] = get_json(f"{base}/data/plugin/sync_advisor/runs")["runs"]
    return run


def test_an_edit_to_the_code_shows_in_the_tab_when_the_user_comes_back_to_it(
    tmp_path: Any, browser: Any, page_errors: list[str]
) -> None:
    source = tmp_path / "train.py"
    source.write_text("import torch\n\n\ndef train_step(loss):\n    return loss.item()\n")
    b = KinetoTraceBuilder()
    for n in range(2):
        with b.step(n):
            item_sync(b, stack=[(str(source), 4, "train_step")])
    b.write(tmp_path / "logs" / "run" / "worker0.pt.trace.json")

    with serve_tensorboard(tmp_path / "logs", cwd=tmp_path, expected_runs={"run"}) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base))
        assert any("train.py:5" in t for t in rows(page)), rows(page)
        generation = _run_entry(base)["generation"]

        # Two imports added above train_step: line 5 is now a blank line.
        source.write_text(
            "import torch\nimport math\nimport os\n\n\ndef train_step(loss):\n"
            "    return loss.item()\n"
        )
        stat = source.stat()
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # coarse clocks
        deadline = time.monotonic() + 60
        while True:  # the plugin polls every second here (--sync_advisor_reload_interval)
            run = _run_entry(base)
            if run["generation"] != generation and not run["loading"]:
                break
            assert time.monotonic() < deadline, run
            time.sleep(0.2)

        # Back from the editor: the tab asks for the runs at once (its own poll is 10 s
        # apart when idle), sees the run changed and draws the sites again. A focus that
        # comes while the page's own poll is in flight asks nothing (that poll may carry
        # the old generation): focus again until the new line shows, for less than the
        # idle poll's 10 s, so that the focus, not that poll, is what shows it.
        shows_new_line = (
            "[...document.querySelectorAll('[data-testid=sites] tbody tr')]"
            ".some(tr => tr.innerText.includes('train.py:6'))"
        )
        for _ in range(16):
            page.evaluate("window.dispatchEvent(new Event('focus'))")
            page.wait_for_timeout(500)
            if page.evaluate(shows_new_line):
                break
        else:
            raise AssertionError(f"train.py:6 never showed: {rows(page)}")
        assert not any("train.py:5" in t for t in rows(page)), rows(page)
    assert not page_errors
