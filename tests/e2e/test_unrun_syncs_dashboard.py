"""A CPU-only run whose loop holds ``torch.cuda.synchronize()`` under a device check, in a
real TensorBoard and Chromium: the tab's "No GPU activity" banner names the line, which
never ran on the CPU and waits on every step of a GPU run; the read logged just after it
says so in its row."""

from __future__ import annotations

from typing import Any

from tests.e2e.helpers import new_page, plugin_url, rows, serve_tensorboard, skip_without_browser
from tests.test_unrun_syncs import _record

skip_without_browser()


def test_the_no_gpu_banner_names_the_synchronize_that_did_not_run(
    tmp_path: Any, browser: Any, page_errors: list[str]
) -> None:
    _record(tmp_path)
    with serve_tensorboard(tmp_path / "logs", cwd=tmp_path, expected_runs={"run"}) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=run"))
        assert rows(page)
        said = page.inner_text("[data-testid=no-gpu] [data-testid=unrun-syncs]")
        assert "loop.py:21 torch.cuda.synchronize() (in train, under `if device_type" in said
        # The logged read just after it says the host waits at the synchronize first.
        after = page.inner_text("[data-testid=row-after-sync]")
        assert "after torch.cuda.synchronize() (line 21, not run here)" in after
    assert page_errors == []
