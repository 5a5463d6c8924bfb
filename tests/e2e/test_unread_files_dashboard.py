"""A run of one clean trace and broken ones, in a real TensorBoard and a headless Chromium:
the "no synchronization found" banner counts the files it checked, not the broken ones (it
said "Checked 5 steps in 6 trace files" with 5 of the 6 unreadable)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import new_page, plugin_url, serve_tensorboard, skip_without_browser

skip_without_browser()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kineto_builder import KinetoTraceBuilder  # noqa: E402


@pytest.fixture(scope="module")
def unread_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logdir = tmp_path_factory.mktemp("unread_logdir")
    b = KinetoTraceBuilder()
    for step in (1, 2):
        with b.step(step):
            b.kernel(dur=200.0)
    b.write(logdir / "mixed" / "worker0.pt.trace.json")
    (logdir / "mixed" / "worker1.pt.trace.json").write_text("not a trace", encoding="utf-8")
    (logdir / "mixed" / "worker2.pt.trace.json").write_text("", encoding="utf-8")
    with serve_tensorboard(logdir, cwd=logdir, expected_runs={"mixed"}) as base:
        yield base


def test_the_no_sync_banner_counts_the_files_it_checked(
    unread_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(unread_board, "#run=mixed"))
    banner = page.wait_for_selector("[data-testid=no-syncs]")
    text = banner.inner_text()
    assert "Checked 2 steps in 1 trace file for:" in text, text
    errors = page.wait_for_selector("[data-testid=file-errors]").inner_text()
    assert "2 trace files of this run could not be read" in errors
    assert page_errors == []
