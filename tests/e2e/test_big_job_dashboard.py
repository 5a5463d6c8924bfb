"""The job view of a job of many ranks (40 NCCL-shaped rank traces from ``tests/nccl_job.py``,
ranks 13 and 20 late): the ranks that matter first and the rest folded, the Worker picker in
rank order, per-worker chart labels that do not collide, step headers over their values, and
the job's sites marked as the CLI marks them (an inexact line, the late peer waited for)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import new_page, plugin_url, serve_tensorboard, skip_without_browser

skip_without_browser()

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nccl_job import DEF_LINE, JobSpec, write_job  # noqa: E402

WORLD = 40
LATE = {(13, 1): 3000.0, (20, 2): 1500.0}


@pytest.fixture(scope="module")
def big_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("big_job")
    logdir = root / "logs"
    spec = JobSpec(world=WORLD, ranks_per_host=8, host_skew_us=(0.0,), steps=2, late=LATE)
    write_job(logdir / "job40", spec)
    (logdir / "job40" / "train.py").unlink()
    # No train.py anywhere: the .item() site keeps the line the trace records, train_step's
    # def line (inexact), as the CLI shows it with "*".
    with serve_tensorboard(logdir, cwd=root, expected_runs={"job40"}) as base:
        yield base


def test_many_ranks_show_the_ranks_that_matter_first_and_fold_the_rest(
    big_job: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(big_job, "#run=job40"))
    page.wait_for_selector("[data-testid=job-grid]")
    for table in ("job-grid", "job-ranks"):
        rows = page.locator(f"[data-testid={table}] tbody tr")
        visible = [r for r in rows.all() if r.is_visible()]
        assert rows.count() == WORLD, table
        assert 2 <= len(visible) <= 10, (table, len(visible))
        # Rank 13 was the latest: the others waited for it most.
        assert visible[0].get_attribute("data-rank") == "13", table
        shown = {r.get_attribute("data-rank") for r in visible}
        assert {"13", "20"} <= shown, table
        page.click(f"[data-testid={table}-all]")
        assert len([r for r in rows.all() if r.is_visible()]) == WORLD, table
    assert page_errors == []


def test_step_headers_sit_over_their_values(
    big_job: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(big_job, "#run=job40"))
    page.wait_for_selector("[data-testid=job-grid]")
    edges = page.evaluate(
        """() => {
          const t = document.querySelector('[data-testid=job-grid]');
          const heads = [...t.querySelectorAll('thead th')].slice(1);
          const cells = [...t.querySelector('tbody tr').querySelectorAll('td')];
          const right = (el) => {
            const r = document.createRange(); r.selectNodeContents(el);
            return r.getBoundingClientRect().right;
          };
          return heads.map((th, i) => [right(th), right(cells[i])]);
        }"""
    )
    assert edges
    for head, value in edges:
        assert abs(head - value) < 2, edges
    assert page_errors == []


def test_worker_picker_in_rank_order_and_per_worker_labels_do_not_collide(
    big_job: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors, width=1000)
    page.goto(plugin_url(big_job, "#run=job40"))
    page.wait_for_selector("[data-testid=step-chart] g.step")
    options = page.eval_on_selector_all("#sa-worker option", "os => os.map(o => o.value)")
    workers = [o for o in options if o]
    assert workers == sorted(workers, key=lambda w: int(w.removeprefix("rank"))), workers
    boxes = page.eval_on_selector_all(
        "[data-testid=step-chart] g.step text",
        "ts => ts.map(t => { const b = t.getBoundingClientRect(); return [b.left, b.right]; })",
    )
    assert 2 <= len(boxes) < WORLD, len(boxes)
    bars = page.eval_on_selector_all(
        "[data-testid=step-chart] g.step", "gs => gs.map(g => g.dataset.worker)"
    )
    assert bars == workers, bars  # the chart's workers in rank order too
    boxes.sort()
    for (_, right), (left, _) in zip(boxes, boxes[1:], strict=False):
        assert right <= left, boxes
    assert page_errors == []


def test_job_sites_say_the_wait_they_caused_the_inexact_line_and_the_peer_waited_for(
    big_job: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(big_job, "#run=job40"))
    page.wait_for_selector("[data-testid=job-sites]")
    heads = page.locator("[data-testid=job-sites] thead th")
    assert "wait it caused" in heads.all_inner_texts()
    assert "others waited" not in heads.all_inner_texts()
    caused = page.locator("[data-testid=job-sites] thead th", has_text="wait it caused")
    assert "explain" in (caused.get_attribute("title") or "")
    # The hotspots: the .item() frame's line is its def line, marked as the CLI marks it.
    page.wait_for_selector("[data-testid=sites] tbody tr")
    where = page.locator("[data-testid=sites] tbody tr .where").first
    assert where.inner_text().endswith(f"train.py:{DEF_LINE}*"), where.inner_text()
    title = page.locator("[data-testid=sites] tbody tr td.loc").first.get_attribute("title")
    # No source read and the frame not seen entered: the line may be the def or where a
    # running frame was, and the tooltip says so (it said "where the function is defined").
    assert "line the trace recorded for the function" in (title or "")
    waiting = page.locator("[data-testid=row-waiting-for]").all_inner_texts()
    assert any("waiting for rank 13" in w for w in waiting), waiting
    # The detail says it too.
    page.locator(
        "[data-testid=sites] tbody tr", has=page.locator("[data-testid=row-waiting-for]")
    ).first.click()
    detail = page.wait_for_selector("[data-testid=detail-waiting-for]")
    assert "waiting for rank" in detail.inner_text()
    assert page_errors == []
