"""A run whose one call (``trainer.train()``) runs several of a library's reads, and a trace
written under a name of the user's beside it, in a real TensorBoard and Chromium: each read
is a row of its own naming the library code that read and its fix, and the passed-over file
is named with why (accelerate's ``profile_0.json`` was passed over without a word)."""

from __future__ import annotations

import shutil
from typing import Any

from tests.e2e.helpers import new_page, plugin_url, rows, serve_tensorboard, skip_without_browser
from tests.kineto_builder import KinetoTraceBuilder, item_sync

skip_without_browser()

TRAIN = ("train.py", 36, "<module>")
LOOP = ("transformers/trainer.py", 1827, "_run_epoch")


def test_a_librarys_reads_under_one_call_are_rows_naming_their_code_and_fix(
    tmp_path: Any, browser: Any, page_errors: list[str]
) -> None:
    builder = KinetoTraceBuilder()
    for n in range(3):
        with builder.step(n):
            item_sync(
                builder,
                stack=[TRAIN, LOOP, ("transformers/trainer.py", 2240, "_maybe_log_save_evaluate")],
            )
            item_sync(
                builder,
                stack=[
                    TRAIN,
                    LOOP,
                    ("transformers/masking_utils.py", 332, "_ignore_bidirectional_mask_sdpa"),
                ],
            )
    trace = tmp_path / "logs" / "trainer" / "worker0.pt.trace.json"
    builder.write(trace)
    unnamed = tmp_path / "logs" / "accel" / "profile_0.json"
    unnamed.parent.mkdir(parents=True)
    shutil.copy(trace, unnamed)
    with serve_tensorboard(tmp_path / "logs", cwd=tmp_path, expected_runs={"trainer"}) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=trainer"))
        table = rows(page)
        assert len(table) == 2, table
        notes = page.eval_on_selector_all(
            "[data-testid=sites] [data-testid=row-library]", "e => e.map(n => n.textContent)"
        )
        assert sorted(notes) == [
            "synced in transformers/masking_utils.py:332* (_ignore_bidirectional_mask_sdpa)",
            "synced in transformers/trainer.py:2240* (_maybe_log_save_evaluate)",
        ], notes
        text = page.inner_text("[data-testid=sites]")
        assert "Log less often: raise logging_steps" in text
        assert "Pass attention_mask=None when no sequence is padded" in text
        # The detail says it too, under the user's line.
        page.locator("[data-testid=sites] tbody tr", has_text="masking_utils").first.click()
        note = page.wait_for_selector("[data-testid=detail] [data-testid=detail-library]")
        assert "masking_utils.py:332*" in note.inner_text()
        # The file under another name: named, with why, not "could not be read".
        errors = page.wait_for_selector("[data-testid=file-errors]")
        assert "1 path of the logdir not read as traces" in errors.inner_text()
        errors.click()
        listed = page.inner_text("[data-testid=file-errors]")
        assert str(unnamed) in listed and "NAME.pt.trace.json" in listed, listed
    assert page_errors == []


def test_a_fix_in_a_librarys_own_code_says_so_in_the_detail(
    tmp_path: Any, browser: Any, page_errors: list[str]
) -> None:
    """A YOLO walk: ultralytics' reads under ``model.train()`` got fixes written for the
    user's own code, with nothing saying they are edits of ultralytics. The detail's fix
    says so now; a library with a fix of its own (transformers' ``logging_steps``) needs
    no such word."""
    builder = KinetoTraceBuilder()
    for n in range(3):
        with builder.step(n):
            item_sync(builder, stack=[TRAIN, ("ultralytics/utils/tal.py", 564, "make_anchors")])
            item_sync(
                builder,
                stack=[TRAIN, LOOP, ("transformers/trainer.py", 2240, "_maybe_log_save_evaluate")],
            )
    builder.write(tmp_path / "logs" / "yolo" / "worker0.pt.trace.json")
    with serve_tensorboard(tmp_path / "logs", cwd=tmp_path, expected_runs={"yolo"}) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=yolo"))
        assert len(rows(page)) == 2
        page.locator("[data-testid=sites] tbody tr", has_text="tal.py").first.click()
        note = page.wait_for_selector("[data-testid=detail] [data-testid=library-code]")
        assert note.inner_text() == (
            "An edit of ultralytics' own code: no setting of it is known to avoid this."
        )
        page.locator("[data-testid=sites] tbody tr", has_text="trainer.py").first.click()
        page.wait_for_selector("[data-testid=detail] [data-testid=advice]")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=detail] [data-testid=advice]')"
            ".textContent.includes('logging_steps')"
        )
        assert page.locator("[data-testid=detail] [data-testid=library-code]").count() == 0
    assert page_errors == []
