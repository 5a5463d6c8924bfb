"""A summarised job in a real TensorBoard and Chromium (issue 18): the tab serves the traces
that have summaries and names those that have none, with the command that writes them."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from tb_syncfinder.cli import main as cli_main
from tests.e2e.helpers import new_page, plugin_url, rows, serve_tensorboard, skip_without_browser
from tests.kineto_builder import KinetoTraceBuilder, item_sync

skip_without_browser()


def test_a_summarised_job_is_served_and_its_traces_without_summary_are_named(
    tmp_path: Any, browser: Any, page_errors: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "train.py"
    source.write_text("import torch\n\n\ndef train_step(loss):\n    return loss.item()\n")
    job = tmp_path / "logs" / "job"
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b, stack=[(str(source), 4, "train_step")])
    first = b.write(job / "rank0.pt.trace.json")
    for rank in range(1, 5):
        shutil.copy(first, job / f"rank{rank}.pt.trace.json")
    for rank in range(3):  # summarised on "the cluster": ranks 3 and 4 are not
        assert (
            cli_main(
                [
                    "report",
                    str(job / f"rank{rank}.pt.trace.json"),
                    "--write-summaries",
                    "--json",
                    "-o",
                    os.devnull,
                    "--source-root",
                    str(tmp_path),
                ]
            )
            == 0
        )
    capsys.readouterr()

    with serve_tensorboard(tmp_path / "logs", cwd=tmp_path, expected_runs={"job"}) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base))
        texts = rows(page)
        assert any("train.py:5" in t for t in texts), texts
        banner = page.wait_for_selector("[data-testid=no-summary]")
        text = banner.inner_text()
        assert "2 trace files of this run have no summary yet" in text, text
        assert f"tb-syncfinder report --write-summaries {job}" in text, text
        assert "rank3.pt.trace.json" in text and "rank4.pt.trace.json" in text
        assert page.locator("[data-testid=file-errors]").count() == 0
    assert not page_errors
