"""The job view in a real headless Chromium against a real TensorBoard process: a logdir with
a real 3-rank gloo job recorded by the test (rank 2 late at a known line) and a single-process
run beside it. The job's run shows the rank x step lateness grid and the top job sites with
the late rank and its line; the other run shows no job view."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import (
    contrast,
    new_page,
    plugin_url,
    serve_tensorboard,
    skip_without_browser,
)

skip_without_browser()

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gloo_workload import SCRIPT, SLEEP_LINE, record_gloo_job  # noqa: E402
from kineto_builder import KinetoTraceBuilder, item_sync  # noqa: E402

LATE_RANK = 2
WORLD = 3
STEPS = 3


@pytest.fixture(scope="module")
def job_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo not available")
    logdir = tmp_path_factory.mktemp("job_logdir")
    traces = record_gloo_job(
        logdir / "gloo_job", world=WORLD, late_rank=LATE_RANK, delay_s=0.08, steps=STEPS
    )
    # Two jobs' traces in one folder: the job's, and the same a minute later.
    (logdir / "two_jobs").mkdir()
    for path in traces:
        doc = json.loads(path.read_text(encoding="utf-8"))
        (logdir / "two_jobs" / path.name).write_text(json.dumps(doc), encoding="utf-8")
        for event in doc["traceEvents"]:
            if "ts" in event:
                event["ts"] += 60e6
        (logdir / "two_jobs" / f"b_{path.name}").write_text(json.dumps(doc), encoding="utf-8")
    single = KinetoTraceBuilder()
    with single.step(1):
        item_sync(single, stack=[("train.py", 4, "train_step")])
    single.write(logdir / "single" / "worker0.pt.trace.json")
    # TensorBoard runs from the job folder: the default source root holds train_gloo.py.
    with serve_tensorboard(
        logdir, cwd=logdir / "gloo_job", expected_runs={"gloo_job", "single", "two_jobs"}
    ) as base:
        yield base


def test_job_run_shows_the_lateness_grid_and_the_late_ranks_line_as_top_job_site(
    job_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(job_board, "#run=gloo_job"))
    page.wait_for_selector("#sa-run")
    page.select_option("#sa-run", "gloo_job")
    section = page.wait_for_selector("[data-testid=job]")
    assert f"Job: {WORLD} of {WORLD} ranks" in section.inner_text()
    grid_rows = page.locator("[data-testid=job-grid] tbody tr")
    assert grid_rows.count() == WORLD
    late_row = page.locator(f"[data-testid=job-grid] tbody tr[data-rank='{LATE_RANK}']")
    assert late_row.locator("td.sa-job-late").count() == STEPS
    for rank in set(range(WORLD)) - {LATE_RANK}:
        waiting = page.locator(f"[data-testid=job-grid] tbody tr[data-rank='{rank}']")
        assert waiting.locator("td.sa-job-wait").count() == STEPS
    first_site = page.locator("[data-testid=job-sites] tbody tr").first.inner_text()
    assert first_site.split()[0] == str(LATE_RANK)
    assert f"{SCRIPT}:{SLEEP_LINE}" in first_site
    assert page.locator("[data-testid=job-ranks] tbody tr").count() == WORLD
    # Each rank's row names its trace (the worker), as the terminal's table does.
    header = page.locator("[data-testid=job-ranks] thead th").all_inner_texts()
    assert header[:2] == ["rank", "worker"]
    for rank in range(WORLD):
        row = page.locator(f"[data-testid=job-ranks] tbody tr[data-rank='{rank}']")
        worker = row.locator("td.sa-job-worker")
        assert worker.inner_text() == f"rank{rank}"
        assert (worker.get_attribute("title") or "").endswith(f"rank{rank}.pt.trace.json")
    # A sync's row opens its site's detail, by keyboard too; the late rank's sleep is no
    # sync, has no detail, and does not look clickable (it looked so, and did nothing).
    sleep_row = page.locator("[data-testid=job-sites] tbody tr").first
    assert sleep_row.get_attribute("tabindex") is None
    assert sleep_row.evaluate("r => getComputedStyle(r).cursor") == "default"
    sync_rows = page.locator("[data-testid=job-sites] tbody tr[tabindex='0']")
    if sync_rows.count():
        sync_rows.first.focus()
        page.keyboard.press("Enter")
        page.wait_for_function("location.hash.includes('site=')")
        page.wait_for_selector("[data-testid=advice]")
    assert page_errors == []


def test_the_lateness_grid_stays_readable_in_the_dark_theme(
    job_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors, dark=True)
    page.goto(plugin_url(job_board, "#run=gloo_job"))
    page.wait_for_selector("[data-testid=job-grid] td.sa-job-wait")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    for cls in ("sa-job-late", "sa-job-wait"):
        colour = page.eval_on_selector(f"td.{cls}", "el => getComputedStyle(el).color")
        # The theme's colours (light ones on the dark page), not the light theme's.
        assert contrast(colour, background) >= 4.5, (cls, colour, background)
    assert page_errors == []


def test_run_that_is_not_a_job_shows_no_job_view(
    job_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(job_board))
    page.wait_for_selector("#sa-run")
    page.select_option("#sa-run", "single")
    # The first run (the job) may render first: wait for the single run's own site row.
    page.wait_for_function(
        "[...document.querySelectorAll('[data-testid=sites] tbody tr')]"
        ".some(r => r.innerText.includes('train.py:'))"
    )
    assert page.locator("[data-testid=job]").count() == 0
    assert page_errors == []


def test_a_second_job_in_the_folder_gets_its_own_section(
    job_board: str, browser: Any, page_errors: list[str]
) -> None:
    """Two jobs' traces in one run: the second one's late rank and grid were in the JSON
    alone, behind one line naming the job by its epoch seconds."""
    page = new_page(browser, page_errors)
    page.goto(plugin_url(job_board, "#run=two_jobs"))
    page.wait_for_selector("[data-testid=job]")
    other = page.wait_for_selector("[data-testid=other-job]")
    text = other.inner_text()
    assert "Another job in this run, recorded from " in text and " UTC" in text
    assert f"Job: {WORLD} of {WORLD} ranks" in text
    late = other.query_selector_all(
        f"[data-testid=job-grid] tbody tr[data-rank='{LATE_RANK}'] td.sa-job-late"
    )
    assert len(late) == STEPS
    # The warning that another job's traces are here reads as one, not as a note.
    first = page.locator("[data-testid=job]").first
    warnings = first.locator("[data-testid=job-issue][data-severity=warning]")
    assert warnings.count() >= 1 and warnings.first.inner_text().startswith("Warning: ")
    assert any("recorded from" in text for text in warnings.all_inner_texts())
    note_border = page.eval_on_selector(
        "[data-testid=job-matched]", "el => getComputedStyle(el).borderLeftColor"
    )
    warning_border = warnings.first.evaluate("el => getComputedStyle(el).borderLeftColor")
    assert warning_border != note_border
    assert page_errors == []
