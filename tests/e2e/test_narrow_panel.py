"""The tab in a narrow panel (VS Code's "Launch TensorBoard" beside an editor, 500-1000 px),
in a real headless Chromium against a real TensorBoard process: long paths and function
names, wrapped source lines, the compare view and a job's tables stay inside the panel, and
a keyboard user's arrow presses on a picker do not fill the history (a review of the tab at
these widths)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.fixture_traces import ITEM_LINE, TRAIN_PY, write_run
from tests.e2e.helpers import new_page, plugin_url, serve_tensorboard, skip_without_browser

skip_without_browser()

JOB_DIR = Path(__file__).resolve().parents[1] / "gpu_job"
LONG_DIR = "experiments/segmentation_with_auxiliary_heads_and_mixed_precision_training"
LONG_FILE = f"{LONG_DIR}/distributed_data_parallel_training_loop_with_gradient_accumulation.py"
LONG_FUNC = "train_step_with_gradient_accumulation_and_mixed_precision_and_logging"
# The sync's line, indented and long enough to wrap in a narrow detail.
LONG_LINE = (
    "    total = loss.item()  # the running loss, read back every step for the progress "
    "bar and the logger, which is what this line is about"
)
RUNS = {"long_path", "baseline", "optimized", "gpu_job_baseline"}


@pytest.fixture(scope="module")
def narrow_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("narrow")
    logdir = root / "logdir"
    write_run(
        logdir,
        "long_path",
        item=True,
        nonzero=False,
        file_name=LONG_FILE,
        func_names=(LONG_FUNC, "select_foreground"),
    )
    write_run(logdir, "baseline", item=True, nonzero=True)
    write_run(logdir, "optimized", item=False, nonzero=True)
    shutil.copytree(JOB_DIR / "baseline", logdir / "gpu_job_baseline")
    lines = TRAIN_PY.replace("def train_step(", f"def {LONG_FUNC}(").splitlines()
    lines[ITEM_LINE - 1] = LONG_LINE
    (root / LONG_DIR).mkdir(parents=True)
    (root / LONG_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "train.py").write_text(TRAIN_PY, encoding="utf-8")
    for name in ("job_workload.py", "savings_workloads.py"):
        shutil.copy(JOB_DIR / name, root / name)
    with serve_tensorboard(logdir, cwd=root, expected_runs=RUNS) as base:
        yield base


PAGE_OVERFLOW = "document.documentElement.scrollWidth - document.documentElement.clientWidth"

SITES_SCROLL = """() => {
  const wrap = document.querySelector("[data-testid=sites]").closest(".sa-table-wrap");
  return wrap.scrollWidth - wrap.clientWidth;
}"""

# The rows of the highlighted source line's code after its indentation: each row's left
# edge, and the indentation's right edge and top.
WRAPPED_ROWS = """() => {
  const src = document.querySelector("[data-testid=source] .ln.hl .src");
  const ind = src.querySelector(".ind").getBoundingClientRect();
  const range = document.createRange();
  range.setStartAfter(src.querySelector(".ind"));
  range.setEnd(src, src.childNodes.length);
  const rows = new Map();
  for (const r of range.getClientRects()) {
    if (r.width === 0) continue;
    const top = Math.round(r.top);
    rows.set(top, Math.min(rows.get(top) ?? Infinity, r.left));
  }
  const sorted = [...rows.entries()].sort((a, b) => a[0] - b[0]);
  return {indentRight: ind.right, indentTop: Math.round(ind.top), rows: sorted};
}"""


@pytest.mark.parametrize("width", [500, 700, 1000])
def test_a_long_path_and_function_wrap_inside_the_panel_and_the_costs_stay_in_view(
    narrow_board: str, browser: Any, page_errors: list[str], width: int
) -> None:
    """A long file name kept on one line pushed Saves/step and Share out of the table, and a
    long function name in the detail's header widened the page."""
    page = new_page(browser, page_errors, width=width, height=900)
    page.goto(plugin_url(narrow_board, "#run=long_path"))
    page.wait_for_selector("[data-testid=sites] tbody tr")
    assert page.evaluate(SITES_SCROLL) <= 1  # no site open: every column shown
    page.locator("[data-testid=sites] tbody tr").first.click()
    page.wait_for_selector("[data-testid=source] .ln.hl")
    assert page.evaluate(PAGE_OVERFLOW) <= 1
    assert page.evaluate(SITES_SCROLL) <= 1
    assert page.evaluate("document.documentElement.lang") == "en"
    assert page_errors == []


def test_a_wrapped_source_line_keeps_its_indentation(
    narrow_board: str, browser: Any, page_errors: list[str]
) -> None:
    """In a narrow detail an indented line wrapped to a row of blanks, then its code at
    column 0: each row of its code now starts under the code, the first beside its
    indentation."""
    page = new_page(browser, page_errors, width=500, height=900)
    page.goto(plugin_url(narrow_board, "#run=long_path"))
    page.locator("[data-testid=sites] tbody tr").first.click()
    page.wait_for_selector("[data-testid=source] .ln.hl .ind")
    found = page.evaluate(WRAPPED_ROWS)
    rows = found["rows"]
    assert len(rows) >= 2, found  # it wraps at this width
    assert rows[0][0] == found["indentTop"], found  # the code starts beside its indentation
    for _top, left in rows:
        assert left >= found["indentRight"] - 1, found
    # The line is all there to copy, its indentation included.
    text = page.inner_text("[data-testid=source] .ln.hl .src")
    assert text.replace("\n", "") == LONG_LINE
    assert page_errors == []


def test_the_compare_view_fits_a_500_px_panel(
    narrow_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors, width=500, height=900)
    page.goto(plugin_url(narrow_board, "#run=optimized&view=compare&base=baseline"))
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    assert page.evaluate(PAGE_OVERFLOW) <= 1
    # The verdict's change is in view, not scrolled away behind the kind.
    change = page.locator("[data-testid=compare-sites] tbody tr td.col-change").first
    box = page.evaluate(
        "() => document.querySelector('[data-testid=compare-sites]')"
        ".closest('.sa-table-wrap').getBoundingClientRect().right"
    )
    assert change.bounding_box()["x"] + change.bounding_box()["width"] <= box + 1
    assert page_errors == []


def test_a_jobs_tables_scroll_in_boxes_of_their_own(
    narrow_board: str, browser: Any, page_errors: list[str]
) -> None:
    """The lateness grid and the rank table widened the page (724 px in a 700 px panel)."""
    page = new_page(browser, page_errors, width=500, height=900)
    page.goto(plugin_url(narrow_board, "#run=gpu_job_baseline"))
    page.wait_for_selector("[data-testid=job-grid]")
    for table in ("job-grid", "job-ranks", "job-sites"):
        assert page.locator(f".sa-table-wrap > [data-testid={table}]").count() == 1, table
    assert page.evaluate(PAGE_OVERFLOW) <= 1
    assert page_errors == []


def test_arrow_keys_on_the_run_picker_make_one_history_entry(
    narrow_board: str, browser: Any, page_errors: list[str]
) -> None:
    """On Windows and Linux a closed select changes at every arrow press: four runs loaded
    one after another, four history entries, and Back stepped through runs passed over."""
    page = new_page(browser, page_errors, width=700, height=900)
    page.goto(plugin_url(narrow_board, "#run=baseline"))
    page.wait_for_selector("[data-testid=sites] tbody tr")
    entries = page.evaluate("history.length")
    runs = page.eval_on_selector_all("#sa-run option", "options => options.map(o => o.value)")
    start = runs.index("baseline")
    page.focus("#sa-run")
    for _ in range(2):
        page.keyboard.press("ArrowDown")
        page.wait_for_timeout(150)  # a keyboard user's pace: the burst is under a second
    page.wait_for_function(f"location.hash.includes('run={runs[start + 2]}')")
    assert page.evaluate("history.length") == entries + 1
    page.go_back()
    page.wait_for_function("location.hash.includes('run=baseline')")
    assert page_errors == []


def test_a_link_to_a_site_opens_with_its_detail_in_view_and_a_row_opened_is_announced(
    narrow_board: str, browser: Any, page_errors: list[str]
) -> None:
    """In one column (a narrow panel) a shared link to a site opened at the page's top,
    its detail a screen below; Enter on a row opened a detail a screen reader heard nothing
    of."""
    page = new_page(browser, page_errors, width=600, height=700)
    page.goto(
        plugin_url(narrow_board, f"#run=baseline&site=train.py%3A{ITEM_LINE}%3Aaten%3A%3Aitem")
    )
    page.wait_for_selector("[data-testid=advice]")
    page.wait_for_function(
        "document.querySelector('.sa-detail-slot').getBoundingClientRect().top < innerHeight"
    )
    page.goto(plugin_url(narrow_board, "#run=optimized"))
    page.reload()
    page.locator("[data-testid=sites] tbody tr").first.focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-testid=advice]")
    page.wait_for_function(
        "document.querySelector('[data-testid=announce]').textContent.startsWith('Detail shown')"
    )
    assert page_errors == []


def test_the_count_of_sites_a_filter_leaves_is_announced(
    narrow_board: str, browser: Any, page_errors: list[str]
) -> None:
    """The count's chip is drawn anew at every keystroke, and a live region drawn anew is
    often not read: the count goes to the page's own region."""
    page = new_page(browser, page_errors, width=700, height=900)
    page.goto(plugin_url(narrow_board, "#run=baseline"))
    page.wait_for_selector("[data-testid=sites] tbody tr")
    page.fill("input[type=search]", "nonzero")
    page.wait_for_function(
        "document.querySelector('[data-testid=announce]').textContent"
        " === document.querySelector('[data-testid=site-count]').textContent"
    )
    assert page.get_attribute("[data-testid=announce]", "role") == "status"
    assert page_errors == []
