"""A script copied beside each run's traces and edited between runs, in a real TensorBoard
and a headless Chromium: each run's detail shows its own copy's code at its own line. The
source panel asked the server for the recorded path, which matches both copies: it could
show neither."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import new_page, plugin_url, serve_tensorboard, skip_without_browser

skip_without_browser()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kineto_builder import KinetoTraceBuilder, item_sync  # noqa: E402

SCRIPT = (
    "import torch\n\n\ndef train_step(model, x):\n    loss = model(x)\n"
    "{extra}    return loss.item()  # the {run} version\n"
)
LINES = {"run_a": 6, "run_b": 7}


@pytest.fixture(scope="module")
def copies_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logdir = tmp_path_factory.mktemp("copies_logdir")
    for run, line in LINES.items():
        (logdir / run).mkdir()
        extra = "    loss = loss * 2\n" if line == 7 else ""
        (logdir / run / "train.py").write_text(SCRIPT.format(extra=extra, run=run))
        b = KinetoTraceBuilder()
        frame = ("/cluster/job/train.py", 4, "train_step")
        with b.step(1), b.frame(frame):
            item_sync(b, stack=[frame])
        b.write(logdir / run / "worker0.pt.trace.json")
    with serve_tensorboard(logdir, cwd=logdir, expected_runs=set(LINES)) as base:
        yield base


@pytest.mark.parametrize("run", sorted(LINES))
def test_each_runs_detail_shows_its_own_copy_of_the_script(
    copies_board: str, browser: Any, page_errors: list[str], run: str
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(copies_board, f"#run={run}"))
    line = LINES[run]
    page.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{line}").click()
    hl = page.wait_for_selector("[data-testid=source] .ln.hl")
    assert hl.get_attribute("data-line") == str(line)
    assert f"return loss.item()  # the {run} version" in hl.inner_text()
    assert page_errors == []
