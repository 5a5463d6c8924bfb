"""A run profiled without ``prof.step()``, each step in a ``record_function("train_step")``,
in a real TensorBoard and Chromium: the tab names the span and the flag that counts it as
the steps, and with ``--sync_advisor_step_annotation`` its figures are per step."""

from __future__ import annotations

from typing import Any

from tests.e2e.helpers import new_page, plugin_url, rows, serve_tensorboard, skip_without_browser
from tests.kineto_builder import KinetoTraceBuilder, item_sync

skip_without_browser()


def _write(path: Any) -> None:
    builder = KinetoTraceBuilder()
    for _n in range(4):
        with builder.annotation("train_step"):
            item_sync(builder, stack=[("train.py", 8, "train_step")])
            builder.kernel(dur=200)
    builder.write(path)


def test_record_function_steps_are_hinted_and_counted_with_the_flag(
    tmp_path: Any, browser: Any, page_errors: list[str]
) -> None:
    _write(tmp_path / "logs" / "plain" / "worker0.pt.trace.json")
    with serve_tensorboard(tmp_path / "logs", cwd=tmp_path, expected_runs={"plain"}) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=plain"))
        assert rows(page)
        hint = page.wait_for_selector("[data-testid=step-annotation-hint]").inner_text()
        assert 'Or count its 4 record_function("train_step") spans as the steps' in hint
        assert "--sync_advisor_step_annotation 'train_step'" in hint
        assert "Syncs per trace" in page.inner_text("[data-testid=card-syncs]")
    flag = ["--sync_advisor_step_annotation", "train_step"]
    with serve_tensorboard(
        tmp_path / "logs", cwd=tmp_path, expected_runs={"plain"}, extra_args=flag
    ) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=plain"))
        assert rows(page)
        card = page.inner_text("[data-testid=card-syncs]")
        assert "Syncs per step" in card and "4 in 4 steps" in card, card
        assert page.locator("[data-testid=no-step-markers]").count() == 0
        said = page.inner_text("[data-testid=steps-from-annotation]")
        assert 'Steps: the spans of record_function("train_step")' in said, said
        assert "matched" not in said
    # A pattern that takes two names: each span of each a step, and said.
    flag = ["--sync_advisor_step_annotation", "*_step"]
    _write_two_names(tmp_path / "logs2" / "plain" / "worker0.pt.trace.json")
    with serve_tensorboard(
        tmp_path / "logs2", cwd=tmp_path, expected_runs={"plain"}, extra_args=flag
    ) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=plain"))
        assert rows(page)
        said = page.inner_text("[data-testid=steps-from-annotation]")
        assert "It matched 2 names (train_step, eval_step)" in said, said
    assert page_errors == []


def _write_two_names(path: Any) -> None:
    builder = KinetoTraceBuilder()
    for _n in range(3):
        with builder.annotation("train_step"):
            item_sync(builder, stack=[("train.py", 8, "train_step")])
            builder.kernel(dur=200)
        with builder.annotation("eval_step"):
            builder.advance(50)
    builder.write(path)
