"""Lightning's profiler writes its training and validation traces into one folder: one run
of two workers whose steps are different loops. In a real TensorBoard and Chromium the
tab's figures per step averaged both loops' steps without a word (0.7 reads per step for a
read of every training step); the tab now says so and picks either worker on a click."""

from __future__ import annotations

from typing import Any

from tests.e2e.helpers import new_page, plugin_url, rows, serve_tensorboard, skip_without_browser
from tests.kineto_builder import KinetoTraceBuilder, item_sync

skip_without_browser()

_TRAIN = "fit-demo-[Strategy]SingleDeviceStrategy.training_step"
_VAL = "fit-demo-[Strategy]SingleDeviceStrategy.validation_step"


def _write(path: Any, steps: int, reads: bool) -> None:
    builder = KinetoTraceBuilder()
    for n in range(steps):
        with builder.step(n):
            if reads:
                item_sync(builder, stack=[("model.py", 12, "training_step")])
            builder.kernel(dur=200)
    builder.write(path)


def test_a_lightning_folders_two_loops_are_said_averaged_and_each_picked_on_a_click(
    tmp_path: Any, browser: Any, page_errors: list[str]
) -> None:
    prof = tmp_path / "logs" / "prof"
    _write(prof / f"{_TRAIN}.1795878232849391401.pt.trace.json", steps=10, reads=True)
    _write(prof / f"{_VAL}.1795878233945858423.pt.trace.json", steps=5, reads=False)
    with serve_tensorboard(tmp_path / "logs", cwd=tmp_path, expected_runs={"prof"}) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=prof"))
        assert rows(page)
        banner = page.wait_for_selector("[data-testid=steps-note]").inner_text()
        assert "15 steps of Lightning's training_step and validation_step loops" in banner
        assert f"{_TRAIN} (10 steps)" in banner and f"{_VAL} (5 steps)" in banner
        # Averaged: 10 reads over 15 steps.
        assert "0.67" in page.inner_text("[data-testid=card-syncs]")
        page.click(f"[data-testid=steps-note-worker][data-worker='{_TRAIN}']")
        page.wait_for_function("location.hash.includes('worker=')")
        page.wait_for_selector("[data-testid=steps-note]", state="detached")
        card = page.inner_text("[data-testid=card-syncs]")
        assert "10 in 10 steps" in card, card
    assert page_errors == []
