"""A Jupyter notebook's syncs in a real TensorBoard and Chromium: the sites table names the
notebook and the cell (``train.ipynb In[4]:5``), not ipykernel's file for the cell, and the
detail shows the cell's own lines, read from the notebook under the source roots."""

from __future__ import annotations

import json
import tempfile
from typing import Any

from tb_syncfinder.source import kernel_cell_hash
from tests.e2e.helpers import new_page, plugin_url, rows, serve_tensorboard, skip_without_browser
from tests.kineto_builder import KinetoTraceBuilder, item_sync

skip_without_browser()

CELL = (
    "def train_step(model, x):\n"
    "    out = model(x)\n"
    "    loss = out.mean()\n"
    "    loss.backward()\n"
    "    return loss.item()"
)
ITEM_LINE = 5  # of the cell
LOOP = "for x in batches:\n    train_step(model, x)"


def test_a_notebooks_sync_is_named_by_its_cell_and_shows_the_cells_lines(
    tmp_path: Any, browser: Any, page_errors: list[str]
) -> None:
    recorded = f"{tempfile.gettempdir()}/ipykernel_4242/{kernel_cell_hash(CELL)}.py"
    loop = f"{tempfile.gettempdir()}/ipykernel_4242/{kernel_cell_hash(LOOP)}.py"
    b = KinetoTraceBuilder()
    for n in range(2):
        with b.step(n):
            item_sync(b, stack=[(loop, 1, "<module>"), (recorded, 1, "train_step")])
    b.write(tmp_path / "logs" / "run" / "worker0.pt.trace.json")
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": 3,
                "id": "a",
                "metadata": {},
                "outputs": [],
                "source": ["import torch\n"],
            },
            {
                "cell_type": "code",
                "execution_count": 4,
                "id": "b",
                "metadata": {},
                "outputs": [],
                "source": CELL.splitlines(keepends=True),
            },
            {
                "cell_type": "code",
                "execution_count": 5,
                "id": "c",
                "metadata": {},
                "outputs": [],
                "source": LOOP.splitlines(keepends=True),
            },
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "train.ipynb").write_text(json.dumps(notebook, indent=1))

    with serve_tensorboard(tmp_path / "logs", cwd=tmp_path, expected_runs={"run"}) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base))
        shown = rows(page)
        assert any(f"train.ipynb In[4]:{ITEM_LINE}" in t for t in shown), shown
        assert not any("ipykernel_4242" in t for t in shown), shown
        page.locator("[data-testid=sites] tbody tr", has_text="train.ipynb In[4]").click()
        hl = page.wait_for_selector("[data-testid=source] .ln.hl")
        assert hl.get_attribute("data-line") == str(ITEM_LINE)
        assert "return loss.item()" in hl.inner_text()
        # The cell's lines, not the notebook's JSON.
        code = page.inner_text("[data-testid=source]")
        assert "out = model(x)" in code and '"cell_type"' not in code
        # The stack names each frame's cell, the loop's cell too.
        frames = page.inner_text("[data-testid=user-frames]")
        assert "train.ipynb In[5]:1" in frames and "train.ipynb In[4]:1" in frames, frames
        assert "ipykernel_4242" not in frames, frames
        # Copied (outside VS Code) as IPython names it, not as ipykernel's missing file.
        copied = page.get_attribute("[data-testid=user-frames] .sa-frame", "data-frame")
        assert copied == f"{tmp_path / 'train.ipynb'} In[4]:1", copied
        # Of the calls it waited in, the one its occurrence row names is marked.
        waited = page.inner_text("[data-testid=waited-in]")
        words = waited.replace(",", " ").split()
        assert words == ["cudaMemcpyAsync", "cudaStreamSynchronize", "longest"], waited
    assert not page_errors
