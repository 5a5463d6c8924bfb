"""The real H100 recordings of a library's first call (tests/gpu_first_calls/) in the Sync
Advisor tab, in a real headless Chromium against a real TensorBoard process: the sites of
cuBLAS's and cuDNN's set-up say so in the table and in the detail, with the line of the
user's call and what a warm-up step removes, and an allocation alone keeps the allocator's
fix. The recording script lies in TensorBoard's working directory (the default source
root), as a user's training script would.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import (
    get_json,
    new_page,
    plugin_url,
    rows,
    serve_tensorboard,
    skip_without_browser,
)

skip_without_browser()

RECORDINGS = Path(__file__).resolve().parents[1] / "gpu_first_calls"
SCRIPT = "record_first_calls.py"
RUNS = {"first_matmul", "first_conv", "first_lstm"}
CUBLAS = "cuBLAS setting itself up in its first matrix multiply"
CUDNN = "cuDNN setting itself up on its first call"
ALLOCATOR = "Let the caching allocator reuse memory; keep shapes stable"
REMOVES = "Removes: the set-up from the profiled steps (it still runs once, before them)"


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("first_calls")
    for run in RUNS:
        (root / "logs" / run).mkdir(parents=True)
        shutil.copy(RECORDINGS / f"{run}.pt.trace.json.gz", root / "logs" / run)
    shutil.copy(RECORDINGS / SCRIPT, root / SCRIPT)
    with serve_tensorboard(root / "logs", cwd=root, expected_runs=RUNS) as base:
        yield base


def _script_line(text: str) -> int:
    lines = (RECORDINGS / SCRIPT).read_text(encoding="utf-8").splitlines()
    return next(n for n, line in enumerate(lines, start=1) if line.strip().startswith(text))


@pytest.mark.parametrize(
    ("run", "line_text", "title"),
    [
        ("first_matmul", "y = linear(x)", CUBLAS),
        ("first_conv", "y = conv(x)", CUDNN),
        ("first_lstm", "lstm = torch.nn.LSTM(", CUDNN),
        # The LSTM's forward allocates its output while cuDNN sets up: an allocation alone.
        ("first_lstm", "out, _state = lstm(x)", ALLOCATOR),
    ],
)
def test_a_librarys_first_call_says_so_in_the_table_and_the_detail(
    board: str, browser: Any, page_errors: list[str], run: str, line_text: str, title: str
) -> None:
    line = _script_line(line_text)
    sites = get_json(f"{board}/data/plugin/sync_advisor/sites?run={run}")["items"]
    # The convolution's forward and backward: two sites at the line, each its own row (the
    # LSTM's constructor also allocates its parameters there: the allocator's).
    found = [s for s in sites if s["line"] == line and s["advice"]["title"] == title]
    assert len(found) == (2 if run == "first_conv" else 1)
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, f"#run={run}"))
    rows(page)
    for site in found:
        row = page.locator(f"[data-testid=sites] tbody tr[data-site='{site['key']}']")
        assert f"{SCRIPT}:{line}" in row.inner_text()
        fix = row.locator("[data-testid=row-fix]").inner_text()
        assert fix.replace("\u2192", "").strip() == title
    row = page.locator(f"[data-testid=sites] tbody tr[data-site='{found[0]['key']}']")
    row.click()
    highlighted = page.wait_for_selector("[data-testid=source] .ln.hl")
    assert highlighted.get_attribute("data-line") == str(line)
    assert line_text in highlighted.inner_text()
    advice = page.inner_text("[data-testid=advice]")
    assert title in advice
    assert (REMOVES in advice) == (title != ALLOCATOR)
    assert page_errors == []
