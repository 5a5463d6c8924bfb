"""The H200 job of ``tests/gpu_job`` (two ranks, gloo over CUDA tensors, the all-reduce
waited for a step later) in a real headless Chromium against a real TensorBoard process: the
late rank's ``item()`` is the job's top site at its line, the view says which rank sets the
job's pace, and in the fixed run gloo's worker-thread syncs are listed apart, not ranked."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import new_page, plugin_url, serve_tensorboard, skip_without_browser

skip_without_browser()

JOB_DIR = Path(__file__).resolve().parents[1] / "gpu_job"
ITEM_LINE = 91


@pytest.fixture(scope="module")
def gpu_job_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("gpu_job_board")
    logdir = root / "logdir"
    for variant in ("baseline", "fixed"):
        shutil.copytree(JOB_DIR / variant, logdir / f"gpu_job_{variant}")
    # TensorBoard runs from a folder holding the workload's sources (the default source root).
    cwd = root / "sources"
    cwd.mkdir()
    for name in ("job_workload.py", "savings_workloads.py"):
        shutil.copy(JOB_DIR / name, cwd / name)
    with serve_tensorboard(
        logdir, cwd=cwd, expected_runs={"gpu_job_baseline", "gpu_job_fixed"}
    ) as base:
        yield base


def test_the_late_ranks_item_is_the_top_job_site_and_the_pace_is_said(
    gpu_job_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors, width=1400, height=1000)
    page.goto(plugin_url(gpu_job_board, "#run=gpu_job_baseline"))
    page.wait_for_selector("[data-testid=job]")
    first_site = page.locator("[data-testid=job-sites] tbody tr").first.inner_text()
    assert first_site.split()[0] == "1" and f"job_workload.py:{ITEM_LINE}" in first_site
    notes = page.locator("[data-testid=job-issue]").all_inner_texts()
    assert any("rank 1 sets the job's pace" in n and "waited for later" in n for n in notes), notes
    assert page.locator("[data-testid=apart-collective-worker]").count() == 1
    # A job's steps add up over its ranks, and the card says so.
    assert "steps of 2 ranks" in page.inner_text("[data-testid=card-syncs]")
    # The item's row opens its site's detail (it looked clickable and did nothing).
    page.locator("[data-testid=job-sites] tbody tr").first.click()
    page.wait_for_function("location.hash.includes('site=')")
    page.wait_for_selector("[data-testid=advice]")
    assert f"job_workload.py:{ITEM_LINE}" in page.inner_text(".sa-detail-slot")
    assert page_errors == []


def test_the_fixed_run_lists_gloos_worker_syncs_apart_and_ranks_none(
    gpu_job_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors, width=1400, height=1000)
    page.goto(plugin_url(gpu_job_board, "#run=gpu_job_fixed"))
    apart = page.wait_for_selector("[data-testid=apart-collective-worker]").inner_text()
    assert "gloo's worker thread" in apart and "16 syncs" in apart and "Work.wait" in apart
    assert page.locator("[data-testid=sites] tbody tr").count() == 0
    assert page_errors == []
