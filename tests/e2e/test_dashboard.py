"""The Sync Advisor tab in a real headless Chromium against a real TensorBoard process.

TensorBoard runs with ``--path_prefix /tb`` (every dashboard URL must be relative) on a
logdir of CUDA-like traces (``fixture_traces``) whose source file lies in TensorBoard's
working directory. Screenshots of the main views go to docs/screenshots/ when
SYNC_ADVISOR_SCREENSHOTS=1 (so CI does not dirty the tree).
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.fixture_traces import (
    ITEM_LINE,
    NONZERO_LINE,
    REMOTE_FILE,
    RUNNING_LOOP_LINE,
    TRAIN_STEP_DEF,
    WINDOWS_FILE,
    XSS,
    write_fixture,
)
from tests.e2e.helpers import (
    REPO,
    TAKE_SCREENSHOTS,
    contrast,
    new_page,
    plugin_url,
    rows,
    serve_tensorboard,
    shot,
    skip_without_browser,
    wait_drawn,
)

skip_without_browser()

PREFIX = "/tb"
RUNS = {
    "baseline",
    "optimized",
    "html_names",
    "cpu_only",
    "cpu_only_fixed",
    "running_loop",
    "remote_paths",
    "windows_paths",
    "no_stacks",
    "clean",
    "distributed",
    "two_machines",
    "unreadable",
    "unrelated_ranks",
    "two_spans",
    "long_wait",
    "no_markers",
}


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A TensorBoard process on the fixture logdir; yields its base URL; always stopped."""
    root = tmp_path_factory.mktemp("dashboard")
    logdir = write_fixture(root)
    # cwd=root: the default source root is TensorBoard's working directory.
    with serve_tensorboard(logdir, cwd=root, expected_runs=RUNS, path_prefix=PREFIX) as base:
        yield base


def test_sync_advisor_tab_in_tensorboard_shows_the_hotspots_of_the_known_trace(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(f"{board}/#sync_advisor")
    handle = page.wait_for_selector("iframe", state="attached")
    frame = handle.content_frame()
    frame.wait_for_selector("[data-testid=sites] tbody tr")
    # The run selector lists every run; pick the baseline.
    frame.select_option("#sa-run", "baseline")
    frame.wait_for_function(
        "document.querySelectorAll('[data-testid=sites] tbody tr').length === 2"
    )
    texts = rows(frame)
    assert any(f"train.py:{ITEM_LINE}" in t and "scalar readback" in t for t in texts), texts
    assert any(f"train.py:{NONZERO_LINE}" in t and "dynamic shape" in t for t in texts), texts
    # Headline cards: 8 syncs over 4 steps.
    assert frame.inner_text("[data-testid=card-syncs] .value") == "2"
    assert "8 in 4 steps" in frame.inner_text("[data-testid=card-syncs]")
    # Largest predicted saving first by default: the replay gives the mask's site more
    # than the item's (whose host wait is the longer).
    assert f"train.py:{NONZERO_LINE}" in texts[0]
    assert "How obtained: predicted by replaying" in frame.inner_text("[data-testid=saving-how]")
    # Export links are relative to the plugin route (work under --path_prefix) and answer.
    hrefs = frame.eval_on_selector_all(
        ".sa-exports a", "els => els.map(a => a.getAttribute('href'))"
    )
    assert {h.split("format=")[1] for h in hrefs} == {"json", "csv", "sarif", "trace"}
    assert all(not h.startswith(("/", "http")) for h in hrefs), hrefs
    csv_url = frame.eval_on_selector(".sa-exports a[href*='format=csv']", "a => a.href")
    assert csv_url.startswith(f"{board}/data/plugin/sync_advisor/export?")
    response = page.request.get(csv_url)
    assert response.status == 200 and "train.py" in response.text()
    page.wait_for_timeout(300)
    shot(page, "hotspots-light.png")
    assert page_errors == []


def test_detail_highlights_the_source_line_and_shows_stack_timeline_and_advice(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=baseline"))
    page.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{ITEM_LINE}").click()
    hl = page.wait_for_selector("[data-testid=source] .ln.hl")
    assert hl.get_attribute("data-line") == str(ITEM_LINE)
    assert "total = loss.item()" in hl.inner_text()
    assert page.locator("[data-testid=source] .ln").count() >= 7  # a few lines around it
    chain = page.inner_text("[data-testid=chain]")
    assert "aten::item" in chain and "aten::_local_scalar_dense" in chain
    assert "cudaStreamSynchronize" in chain
    assert "train_step" in page.inner_text("[data-testid=user-frames]")
    assert page.locator("[data-testid=timeline] svg rect.ev-sync").count() >= 1
    assert page.locator("[data-testid=timeline] svg rect.bubble-band").count() == 1
    assert page.inner_text("[data-testid=advice]").strip() != ""
    # The view is in the URL: a reload shows the same detail.
    assert "site=" in page.evaluate("location.hash")
    page.reload()
    page.wait_for_selector("[data-testid=source] .ln.hl")
    if TAKE_SCREENSHOTS:  # tall enough for the whole detail, which scrolls on its own
        height = page.evaluate("document.querySelector('.sa-detail-slot').scrollHeight")
        page.set_viewport_size({"width": 1280, "height": height + 420})
        page.wait_for_timeout(300)
    shot(page, "detail.png")
    assert page_errors == []


def test_table_sorts_on_header_click_and_is_keyboard_navigable(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=baseline"))
    page.click("th button[data-sort=host_wait_us]")  # descending first: item waits longer
    page.wait_for_function("location.hash.includes('sort=host_wait_us')")
    first = rows(page)[0]
    assert f"train.py:{ITEM_LINE}" in first
    page.click("th button[data-sort=gpu_idle_us]")  # descending first: item idles longer
    page.click("th button[data-sort=gpu_idle_us]")  # flip: ascending
    page.wait_for_function("location.hash.includes('order=asc')")
    assert f"train.py:{NONZERO_LINE}" in rows(page)[0]
    th = page.locator("th", has=page.locator("button[data-sort=gpu_idle_us]"))
    assert th.get_attribute("aria-sort") == "ascending"
    # Keyboard: focus the first row, arrow down, Enter opens the second row's detail.
    page.locator("[data-testid=sites] tbody tr").first.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-testid=detail]")
    selected = page.locator("[data-testid=sites] tbody tr[aria-current=true]")
    assert f"train.py:{ITEM_LINE}" in selected.inner_text()
    # Filtering by text narrows the table.
    page.fill("#sa-q", "nonzero")
    page.wait_for_function("document.querySelectorAll('[data-testid=sites] tbody tr').length === 1")
    assert page_errors == []


@pytest.mark.parametrize(
    "inside", ["[data-testid=occurrences] tbody tr", "[data-testid=user-frames] button"]
)
def test_escape_inside_the_detail_closes_it_and_returns_to_the_sites_row(
    board: str, browser: Any, page_errors: list[str], inside: str
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, f"#run=baseline&{ITEM_SITE}"))
    page.wait_for_selector("[data-testid=source] .ln.hl")
    page.locator(inside).first.focus()
    page.keyboard.press("Escape")
    page.wait_for_function("!document.querySelector('[data-testid=detail]')")
    assert "site=" not in page.evaluate("location.hash")
    focused = page.evaluate("document.activeElement.dataset.site || document.activeElement.tagName")
    assert focused == f"train.py:{ITEM_LINE}:aten::item", focused
    # The row is the table's Tab stop now: Enter opens the detail again.
    assert page.evaluate("document.activeElement.getAttribute('tabindex')") == "0"
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-testid=detail]")
    assert page_errors == []


def test_clicking_a_step_in_the_chart_filters_to_that_step(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=baseline"))
    rows(page)
    page.click(".sa-chart g.step[data-step='3']")
    page.wait_for_selector("[data-testid=step-filter]")
    assert "step=3" in page.evaluate("location.hash")
    assert len(rows(page)) == 2
    assert page.get_attribute(".sa-chart g.step[data-step='3']", "aria-pressed") == "true"
    # The same from the keyboard: focus another step, Enter filters to it.
    page.focus(".sa-chart g.step[data-step='2']")
    page.keyboard.press("Enter")
    page.wait_for_function("location.hash.includes('step=2')")
    # Once the view is drawn for step 2: a click on a button that a render replaces
    # between mouse down and up reaches neither button.
    page.wait_for_selector("[data-testid=step-filter]:has-text('step 2')")
    # Enter on the selected bar (still focused) clears the filter; once more selects it.
    assert page.evaluate("document.activeElement.dataset.step") == "2"
    page.keyboard.press("Enter")
    page.wait_for_function("!location.hash.includes('step=')")
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-testid=step-filter]:has-text('step 2')")
    # The clear button removes the filter.
    page.click("[data-testid=step-filter] button")
    page.wait_for_function("!location.hash.includes('step=')")
    assert page_errors == []


def test_a_step_filter_shows_the_steps_own_count_wait_and_idle_and_says_which_are_the_runs(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    from tests.e2e.helpers import get_json

    api = f"{board}/data/plugin/sync_advisor/sites?run=baseline&step=3"
    in_step = {site["key"]: site["in_step"] for site in get_json(api)["items"]}
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=baseline"))
    rows(page)
    page.click(".sa-chart g.step[data-step='3']")
    note = page.wait_for_selector("[data-testid=step-note]")
    assert note.get_attribute("data-in-step") == "true"
    assert "Sites that synced in step 3" in note.inner_text()
    # It names the marks under the headers, not columns (some hidden with the detail open).
    assert "under a “step 3” header are this step's" in note.inner_text()
    scopes = page.eval_on_selector_all(
        "[data-testid=sites] thead th.num",
        "ths => Object.fromEntries(ths.map(th => [th.querySelector('button').dataset.sort,"
        " th.querySelector('.sa-th-scope')?.textContent]))",
    )
    assert scopes == {
        "count": "step 3",
        "per_step": "whole run",
        "predicted_saving_us": "whole run",
        "host_wait_us": "step 3",
        "gpu_idle_us": "step 3",
        "share_of_step": "whole run",
    }, scopes
    # The step's label is small text: readable against its header (WCAG AA, 4.5:1).
    fg, bg = page.eval_on_selector(
        "[data-testid=sites] thead th .sa-th-scope.step",
        "el => [getComputedStyle(el).color, getComputedStyle(el.closest('th')).backgroundColor]",
    )
    assert contrast(fg, bg) >= 4.5, (fg, bg, contrast(fg, bg))
    # Each site synced once in step 3 (four times in the run): the cell is the step's.
    assert len(in_step) == 2  # the plugin sends the step's figures
    for key, figures in in_step.items():
        row = page.locator(f"[data-testid=sites] tbody tr[data-site='{key}']")
        count = row.locator("td.col-count")
        assert count.inner_text() == str(figures["count"]) == "1"
        assert count.get_attribute("title") == "whole run: 4"
        assert (row.locator("td.col-wait").get_attribute("title") or "").startswith("whole run: ")
    # The detail's figures are the whole run's, and say so.
    page.locator("[data-testid=sites] tbody tr").first.click()
    stats = page.wait_for_selector("[data-testid=site-stats]").inner_text()
    assert stats.startswith("whole run:") and "count 4" in stats, stats
    assert page_errors == []


def test_the_step_chart_is_one_tab_stop_with_arrow_keys_between_bars(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=baseline"))
    rows(page)
    stops = ".sa-chart g.step[tabindex='0']"
    assert page.locator(".sa-chart g.step").count() == 4
    assert page.locator(stops).count() == 1
    page.focus(stops)
    focused = "document.activeElement.dataset.step"
    assert page.evaluate(focused) == "1"
    page.keyboard.press("ArrowRight")
    assert page.evaluate(focused) == "2"
    page.keyboard.press("End")
    assert page.evaluate(focused) == "4"
    page.keyboard.press("ArrowLeft")
    page.keyboard.press(" ")
    page.wait_for_function("location.hash.includes('step=3')")
    page.wait_for_selector("[data-testid=step-filter]:has-text('step 3')")
    # After the redraw the selected step's bar is the chart's one Tab stop, and focused.
    assert page.locator(stops).count() == 1
    assert page.get_attribute(stops, "data-step") == "3"
    assert page.evaluate(focused) == "3"
    # Tab leaves the chart rather than walking its bars.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('.sa-chart') === null")
    assert page_errors == []


# The compared sites' figure headers: column, label, unit and the unit's words under the label.
COMPARE_HEADS = """() => [...document.querySelectorAll('[data-testid=compare-sites] thead th')]
  .filter(th => th.querySelector('.sa-th-scope'))
  .map(th => [th.dataset.col, th.firstChild.textContent,
    th.querySelector('.sa-th-scope').dataset.unit, th.querySelector('.sa-th-scope').textContent])"""


def test_compare_marks_the_removed_item_as_fixed_with_the_step_time_change(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=optimized&view=compare"))
    # The run named baseline is pre-selected; the run itself is never offered.
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    assert page.input_value("#sa-base") == "baseline"
    offered = page.eval_on_selector_all("#sa-base option", "os => os.map(o => o.value)")
    assert "optimized" not in offered and "baseline" in offered
    page.select_option("#sa-base", "baseline")
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    fixed = page.locator("[data-testid=compare-sites] tr[data-status=fixed]")
    assert fixed.count() == 1
    assert f"train.py:{ITEM_LINE}" in fixed.inner_text()
    # Its operators, as the CLI's row names them: two sites of one line are told apart.
    assert fixed.locator("[data-testid=compare-op]").inner_text().startswith("aten::item")
    # The saving is one statement across both runs' columns, not one figure under each.
    saving = page.locator("[data-testid=predicted-vs-measured] td")
    assert saving.count() == 1 and saving.get_attribute("colspan") == "2"
    assert "by the baseline's replay" in saving.inner_text()
    # One of the baseline's sites was fixed: the prediction is that site's, the all-syncs
    # figure beside it (alone, it read as a prediction the fix missed).
    assert "for what was fixed (1 site; its own prediction; every baseline sync: " in (
        saving.inner_text()
    )
    assert "measured" in saving.inner_text()
    # The site's cost that went away, and beside it (not instead) what the baseline's
    # replay predicted its fix saves: the cost overstates that where work fills the gap.
    assert "gone: was costing" in fixed.inner_text() and "/step" in fixed.inner_text()
    assert re.search(r"; saves [~≤][\d.]+ (µs|ms)/step \(predicted\)", fixed.inner_text())
    nonzero = page.locator("[data-testid=compare-sites] tbody tr", has_text="select_foreground")
    assert nonzero.get_attribute("data-status") in {"same", "better", "worse"}
    # 3.20 ms -> 3.06 ms per step (-4.4 %): beyond noise, good news.
    headline = page.locator("[data-testid=step-change]")
    assert "profiled steps faster by" in headline.inner_text()
    assert headline.get_attribute("data-tone") == "good"
    assert page.locator("[data-testid=step-change-note]").count() == 0
    assert page.locator("[data-testid=compare-note]").count() == 0  # both runs on a GPU
    caveat = page.inner_text("[data-testid=step-change-caveat]")
    assert "include the profiler's overhead" in caveat, caveat
    # Counts take their status colour only when non-zero.
    tones = {
        el.get_attribute("data-status-count"): (el.inner_text(), el.get_attribute("data-tone"))
        for el in page.locator("[data-status-count]").all()
    }
    assert tones["fixed"] == ("1 fixed", "good")
    assert tones["new"] == ("0 new", "neutral")
    assert tones["better"][1] == "neutral" and tones["same"][1] == "neutral"
    assert tones["worse"][1] == ("bad" if tones["worse"][0] != "0 worse" else "neutral")
    assert "base=baseline" in page.evaluate("location.hash")
    # The summary's rows under headings that give their unit: per step, then whole run.
    summary = "[data-testid=compare-summary]"
    groups = page.eval_on_selector_all(
        f"{summary} tbody",
        "bs => bs.map(b => [b.dataset.unit, b.querySelector('th[scope=rowgroup]').textContent,"
        " [...b.querySelectorAll('tr[data-row]')].map(r => r.dataset.row)])",
    )
    assert [(unit, title.split(" (")[0]) for unit, title, _ in groups] == [
        ("step", "Per step"),
        ("run", "Whole run"),
    ], groups
    assert {"step-time", "syncs"} <= set(groups[0][2]), groups
    assert {"steps", "host-wait", "gpu-idle"} <= set(groups[1][2]), groups
    assert page.inner_text(f"{summary} tr[data-row=steps] td") == "4"
    # The sites table's headers say each figure's unit in the same words: whole-run counts
    # beside per-step costs.
    assert page.evaluate(COMPARE_HEADS) == [
        ["count-before", "Syncs before", "run", "whole run"],
        ["count-after", "Syncs after", "run", "whole run"],
        ["cost-before", "Cost before", "step", "per step"],
        ["cost-after", "Cost after", "step", "per step"],
        ["change", "Change", "step", "per step"],
    ]
    shot(page, "compare.png")
    assert page_errors == []


# The compared sites' cost cells and change: [key, before, before title, after, change].
COMPARE_COSTS = """() => [...document.querySelectorAll('[data-testid=compare-sites] tbody tr')]
  .map(tr => [tr.dataset.key, ...[...tr.querySelectorAll('td.col-cost')]
    .flatMap(td => [td.textContent, td.title]), tr.querySelector('td.col-change').textContent])"""


@pytest.mark.parametrize("base_steps", [True, False])
def test_an_older_compare_answer_shows_costs_per_step_never_whole_run_totals(
    board: str, browser: Any, page_errors: list[str], base_steps: bool
) -> None:
    """An answer without ``cost_per_step_us`` (an older version's): the costs per step as
    compare.py computes them from the run's step count, else a dash that says why."""
    page = new_page(browser, page_errors)
    url = plugin_url(board, "#run=optimized&view=compare&base=baseline")
    page.goto(url)
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    current = page.evaluate(COMPARE_COSTS)
    older = new_page(browser, page_errors)

    def strip(route: Any) -> None:
        answer = route.fetch().json()
        for x in answer["sites"] + answer["latent_sites"]:
            for side in (x["before"], x["after"]):
                if side:
                    side.pop("cost_per_step_us")
        if not base_steps:
            answer["base"].pop("step_count")
        route.fulfill(json=answer)

    older.route(re.compile(r"/data/plugin/sync_advisor/compare\?"), strip)
    older.goto(url)
    older.wait_for_selector("[data-testid=compare-sites] tbody tr")
    shown = older.evaluate(COMPARE_COSTS)
    if base_steps:
        assert shown == current
    else:
        # The baseline's side: a dash saying why (not its totals); this run's as before.
        assert [r[0] for r in shown] == [r[0] for r in current]
        for row, was in zip(shown, current, strict=True):
            if was[1] == "–":  # no side in the baseline (a new site)
                assert row == was
                continue
            assert row[1] == "–" and row[2].startswith("The baseline predates per-step figures")
            assert row[3:5] == was[3:5] and row[5] == "–"
    assert page_errors == []


def test_the_compared_sites_are_one_tab_stop_with_arrow_keys_between_rows(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=optimized&view=compare&base=baseline"))
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    table = "[data-testid=compare-sites] tbody tr"
    stops = f"{table}[tabindex='0']"
    statuses = page.eval_on_selector_all(table, "rows => rows.map(r => r.dataset.status)")
    assert len(statuses) >= 2 and "fixed" in statuses, statuses
    # One Tab stop, the first row, not one per row: the others are reached by arrow keys.
    assert page.locator(stops).count() == 1
    assert page.locator(f"{table}[tabindex='-1']").count() == len(statuses) - 1
    page.focus(stops)
    focused = "document.activeElement.dataset.status"
    assert page.evaluate(focused) == statuses[0]
    page.keyboard.press("ArrowDown")
    assert page.evaluate(focused) == statuses[1]
    page.keyboard.press("End")
    assert page.evaluate(focused) == statuses[-1]
    page.keyboard.press("Home")
    assert page.evaluate(focused) == statuses[0]
    # The focused row is the Tab stop: Tab leaves the table, Shift+Tab comes back to it.
    page.keyboard.press("ArrowDown")
    assert page.get_attribute(stops, "data-status") == statuses[1]
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('[data-testid=compare-sites]')") is None
    page.keyboard.press("Shift+Tab")
    assert page.evaluate(focused) == statuses[1]
    # Enter or Space acts as a click: a fixed site (not in this run) opens nothing, another
    # opens in Hotspots.
    fixed = statuses.index("fixed")
    page.keyboard.press("Home")
    for _ in range(fixed):
        page.keyboard.press("ArrowDown")
    page.keyboard.press(" ")
    page.keyboard.press("Enter")
    assert page.evaluate("location.hash") == "#run=optimized&view=compare&base=baseline"
    # ...and says so, as no link: no pointer, no "Enter opens" promise.
    row = page.locator(f"{table}[data-status=fixed]")
    assert "nothing to open" in row.get_attribute("title")
    assert "nothing to open" in row.get_attribute("aria-description")
    assert row.evaluate("r => getComputedStyle(r).cursor") == "default"
    other = next(i for i, st in enumerate(statuses) if st != "fixed")
    page.keyboard.press("Home")
    for _ in range(other):
        page.keyboard.press("ArrowDown")
    page.keyboard.press(" ")
    page.wait_for_selector("[data-testid=detail]")
    assert "view=compare" not in page.evaluate("location.hash")
    # The focus lands on the opened site's row in Hotspots, not on the page's body.
    site = page.evaluate("new URLSearchParams(location.hash.slice(1)).get('site')")
    page.wait_for_function(
        "key => document.activeElement.dataset.focusKey === 'site-' + key", arg=site
    )
    assert page_errors == []


def test_compare_opened_on_a_baseline_offers_its_counterpart_against_it(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    # A newcomer opened Compare on the demo's gpu_cnn_baseline and got only "Pick a
    # baseline…": the run after the change is the one to compare, against this one.
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=baseline&view=compare"))
    empty = page.wait_for_selector("[data-testid=compare-empty]")
    assert "baseline is a baseline" in empty.inner_text()
    page.click("[data-testid=compare-counterpart]")
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    assert page.input_value("#sa-run") == "optimized"
    assert page.input_value("#sa-base") == "baseline"
    assert page.locator("[data-testid=compare-sites] tr[data-status=fixed]").count() == 1


def test_compare_of_cpu_only_runs_counts_latent_sites_and_does_not_judge_cpu_step_time(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=cpu_only_fixed&view=compare&base=cpu_only"))
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    assert page.locator("[data-testid=compare-latent]").count() == 1
    headline = page.locator("[data-testid=step-change]")
    assert headline.get_attribute("data-tone") == "neutral"
    text = headline.inner_text()
    assert "1 latent sync site fixed, 0 new" == text, text
    assert "faster" not in text and "slower" not in text
    note = page.inner_text("[data-testid=step-change-note]")
    assert "CPU step time does not measure these syncs" in note
    assert page.locator("[data-testid=compare-sites] tr[data-status=fixed]").count() == 1
    for status in ("worse", "new"):
        badge = page.locator(f"[data-status-count={status}]")
        assert badge.inner_text() == f"0 {status}"
        assert badge.get_attribute("data-tone") == "neutral"
        assert "s-neutral" in (badge.get_attribute("class") or "")
    assert page_errors == []


def test_compare_of_a_gpu_run_with_a_cpu_only_run_counts_sites_and_says_why(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=baseline&view=compare&base=cpu_only"))
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    note = page.inner_text("[data-testid=compare-note]")
    assert "One run is CPU-only" in note and "count per step" in note, note
    # The same two sites run once per step in both: same, not "fixed" plus "new".
    statuses = page.eval_on_selector_all(
        "[data-testid=compare-sites] tbody tr", "rows => rows.map(r => r.dataset.status)"
    )
    assert statuses == ["same", "same"], statuses
    # Both figures are syncs: one over the whole run, one per step, each header says which.
    assert page.evaluate(COMPARE_HEADS) == [
        ["count-before", "Syncs before", "run", "whole run"],
        ["count-after", "Syncs after", "run", "whole run"],
        ["cost-before", "Syncs before", "step", "per step"],
        ["cost-after", "Syncs after", "step", "per step"],
        ["change", "Change", "step", "per step"],
    ]
    assert "1 → 1 per step" in page.inner_text("[data-testid=compare-sites] tbody")
    # CPU and GPU step times measure different machines: no good/bad news from them.
    assert "step times do not compare" in page.inner_text("[data-testid=step-change-note]")
    assert page_errors == []


def test_inexact_line_notes_say_what_the_recorded_line_is_and_hint_only_when_unreadable(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    # A <module> frame already running when profiling started: its current line, readable.
    page.goto(plugin_url(board, "#run=running_loop"))
    page.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{RUNNING_LOOP_LINE}").click()
    note = page.wait_for_selector("[data-testid=line-note]").inner_text()
    assert f"Line {RUNNING_LOOP_LINE} is the line the frame was at when recorded" in note
    assert "is defined" not in note
    assert "--sync_advisor" not in note
    hl = page.wait_for_selector("[data-testid=source] .ln.hl")
    assert hl.get_attribute("data-line") == str(RUNNING_LOOP_LINE)
    # A file outside the source roots: the line the trace recorded, and the hint. The trace
    # does not show the frame entered while profiling ran, so it is not called a def line.
    page.goto(plugin_url(board, "#run=remote_paths"))
    page.reload()
    remote_row = f"remote_train.py:{TRAIN_STEP_DEF}"
    page.locator("[data-testid=sites] tbody tr", has_text=remote_row).click()
    note = page.wait_for_selector("[data-testid=line-note]").inner_text()
    assert f"Line {TRAIN_STEP_DEF} is the line the trace recorded for train_step()" in note
    assert "is defined" not in note and "could not be read" in note
    assert "--sync_advisor_source_root" in note and "--sync_advisor_path_map" in note
    source_note = page.inner_text("[data-testid=source-note]")
    assert REMOTE_FILE in source_note and "--sync_advisor" not in source_note
    assert page_errors == []


# A page nesting the plugin two frames deep, as VS Code's webview and Jupyter's
# %tensorboard (and any dashboard page framing TensorBoard) do.
VSCODE_HOST = """<!DOCTYPE html><html><body style="margin:0">
<script>
  window.__messages = [];
  addEventListener("message", (e) => __messages.push(e.data));
</script>
<iframe id="webview" style="width:100vw;height:100vh;border:0" srcdoc='
  <iframe style="width:100vw;height:100vh;border:0" src="PLUGIN_URL"></iframe>'></iframe>
</body></html>"""


def _nested_plugin(page: Any, url: str) -> Any:
    page.set_content(VSCODE_HOST.replace("PLUGIN_URL", url))
    plugin = None
    deadline = time.monotonic() + 20
    while plugin is None and time.monotonic() < deadline:
        plugin = next((f for f in page.frames if "plugin_entry.html" in f.url), None)
        time.sleep(0.1)
    assert plugin is not None
    rows(plugin)
    return plugin


def test_frame_click_inside_vscode_posts_filename_and_zero_based_line(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    # VS Code nests TensorBoard two frames deep: webview page > iframe > plugin iframe. It
    # is told by the webview's origin (vscode-webview://, which a test page cannot have:
    # state.test.js checks that part), here by the flag for hosts that cannot be told.
    page = new_page(browser, page_errors, width=1000)
    url = plugin_url(board, f"&vscode=1#run=baseline&site=train.py%3A{ITEM_LINE}%3Aaten%3A%3Aitem")
    plugin = _nested_plugin(page, url)
    # The frame's URL is internal to the webview there: no "Copy link" to hand out.
    assert plugin.locator("[data-testid=copy-link]").count() == 0
    plugin.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{ITEM_LINE}").click()
    plugin.wait_for_selector("[data-testid=detail] h2 button.sa-frame")
    plugin.click("[data-testid=detail] h2 button.sa-frame")
    page.wait_for_function("window.__messages.length > 0")
    message = page.evaluate("window.__messages[0]")
    assert message["filename"].endswith("train.py")
    assert message["line"] == ITEM_LINE - 1
    assert page_errors == []


def test_a_page_framing_tensorboard_is_not_taken_for_vscode(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    """Any frame two deep (Jupyter's %tensorboard, a dashboard page) was taken for VS Code:
    its frame buttons posted source paths to the page around it, with target "*", and
    copied nothing; "Copy link" was gone."""
    page = new_page(browser, page_errors, width=1000)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    url = plugin_url(board, f"#run=baseline&site=train.py%3A{ITEM_LINE}%3Aaten%3A%3Aitem")
    plugin = _nested_plugin(page, url)
    assert plugin.locator("[data-testid=copy-link]").count() == 1
    plugin.wait_for_selector("[data-testid=detail] h2 button.sa-frame")
    plugin.click("[data-testid=detail] h2 button.sa-frame")
    toast = plugin.wait_for_selector(".sa-toast.show")
    assert f"train.py:{ITEM_LINE}" in toast.inner_text() and "VS Code" not in toast.inner_text()
    time.sleep(0.3)
    assert page.evaluate("window.__messages") == []
    assert page_errors == []


@pytest.mark.parametrize(
    "named, notice",
    [
        ("site=nope.py%3A1%3Aaten%3A%3Aitem", 'Site "nope.py:1:aten::item" is not in run'),
        ("step=99", "Step 99 is not in run"),
    ],
)
def test_a_site_or_step_the_run_does_not_have_is_said_and_closed(
    board: str, browser: Any, page_errors: list[str], named: str, notice: str
) -> None:
    """A link from another run (or from before the run was profiled again) opened a detail
    of nothing ("unknown (no source line)", advice to record stacks) or an empty list under
    "step 99", without a word."""
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, f"#run=baseline&{named}"))
    said = page.wait_for_selector("[data-testid=missing-part]")
    assert notice in said.inner_text() and '"baseline"' in said.inner_text()
    rows(page)
    assert page.locator("[data-testid=detail]").count() == 0
    assert page.locator("[data-testid=step-filter]").count() == 0
    assert page.evaluate("location.hash") == "#run=baseline"
    assert page_errors == []


@pytest.mark.parametrize(
    "named, notice",
    [
        ("worker=nobody", 'Worker "nobody" is not in run "baseline"'),
        ("span=123", 'Span "123" is not in run "baseline"'),
    ],
)
def test_a_worker_or_span_the_run_does_not_have_is_said_and_dropped_from_the_link(
    board: str, browser: Any, page_errors: list[str], named: str, notice: str
) -> None:
    """A review: the whole run was shown with no word, and the name stayed in the address,
    which "Copy link" passed on."""
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, f"#run=baseline&{named}"))
    said = page.wait_for_selector("[data-testid=missing-part]")
    assert notice in said.inner_text() and "showing the whole run" in said.inner_text()
    rows(page)
    page.wait_for_function("location.hash === '#run=baseline'")
    assert page_errors == []


def test_a_sync_the_run_does_not_have_is_said_and_its_sites_first_shown(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    """A review: a link naming a sync id the run no longer has (profiled again) showed
    another occurrence of the site with no word, and kept the id in the address."""
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, f"#run=baseline&{ITEM_SITE}&sync=zzz"))
    said = page.wait_for_selector("[data-testid=missing-part]")
    assert 'Sync "zzz" is not in run "baseline"' in said.inner_text()
    assert "showing its site's first occurrence instead" in said.inner_text()
    page.wait_for_selector("[data-testid=detail]")
    page.wait_for_function("!location.hash.includes('sync=')")
    assert ITEM_SITE in page.evaluate("location.hash")
    assert page_errors == []


def test_a_sync_is_not_called_missing_while_its_run_is_still_loading(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    """A review: a trace still being analysed may hold the sync a link names (the plugin
    answers 404 for it until then): the link's sync was dropped from the address at once.
    Only once the run is read is it said to be missing."""
    page = new_page(browser, page_errors)

    def loading_runs(route: Any) -> None:
        answer = route.fetch().json()
        answer["loading"] = True
        for run in answer["runs"]:
            if run["name"] == "baseline":
                run["loading"] = True
        route.fulfill(json=answer)

    page.route("**/data/plugin/sync_advisor/runs*", loading_runs)
    page.goto(plugin_url(board, f"#run=baseline&{ITEM_SITE}&sync=zzz"))
    page.wait_for_selector("[data-testid=detail]")
    page.wait_for_timeout(500)
    assert page.locator("[data-testid=missing-part]").count() == 0
    assert "sync=zzz" in page.evaluate("location.hash")
    page.unroute("**/data/plugin/sync_advisor/runs*", loading_runs)
    for _ in range(40):  # the page polls the runs again on a focus event
        page.evaluate("window.dispatchEvent(new Event('focus'))")
        if page.locator("[data-testid=missing-part]").count():
            break
        page.wait_for_timeout(250)
    said = page.wait_for_selector("[data-testid=missing-part]")
    assert 'Sync "zzz" is not in run "baseline"' in said.inner_text()
    page.wait_for_function("!location.hash.includes('sync=')")
    assert page_errors == []


@pytest.mark.parametrize(
    "named", ["view=bogus", "order=sideways", "step=abc", "sort=bogus", "sort=bogus&order=asc"]
)
def test_a_view_order_step_or_column_no_view_has_is_dropped_from_the_link(
    board: str, browser: Any, page_errors: list[str], named: str
) -> None:
    """A review: the default view was shown and the address kept the value."""
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, f"#run=baseline&{named}"))
    rows(page)
    page.wait_for_function("location.hash === '#run=baseline'")
    assert page_errors == []


def test_frame_click_outside_vscode_copies_path_and_line(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=baseline"))
    page.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{ITEM_LINE}").click()
    page.click("[data-testid=detail] h2 button.sa-frame")
    toast = page.wait_for_selector(".sa-toast.show")
    assert f"train.py:{ITEM_LINE}" in toast.inner_text()
    assert page_errors == []


def test_back_in_tensorboard_returns_to_the_site_and_run_before(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    """Run and site changes replaced the address, so one Back left the tab for the one
    before it: each is now a history entry of TensorBoard's page (a sort is not)."""
    page = new_page(browser, page_errors)
    page.goto(f"{board}/#sync_advisor&p.sync_advisor.run=optimized")
    frame = page.wait_for_selector("iframe", state="attached").content_frame()
    rows(frame)
    frame.select_option("#sa-run", "baseline")
    frame.wait_for_function(
        "document.querySelectorAll('[data-testid=sites] tbody tr').length === 2"
    )
    frame.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{ITEM_LINE}").click()
    frame.wait_for_selector("[data-testid=detail] h2")
    # The default sort's column, clicked: its order flips (not a history entry).
    frame.click("[data-testid=sites] thead th button[data-sort=predicted_saving_us]")
    page.wait_for_function("location.hash.includes('p.sync_advisor.order=asc')")
    page.go_back()
    frame.wait_for_function("!document.querySelector('[data-testid=detail]')")
    assert "p.sync_advisor.run=baseline" in page.evaluate("location.hash")
    page.go_back()
    frame.wait_for_function("document.querySelector('#sa-run').value === 'optimized'")
    assert parse_tab(page.evaluate("location.hash")) == "sync_advisor"
    page.go_forward()
    frame.wait_for_function("document.querySelector('#sa-run').value === 'baseline'")
    assert page_errors == []


def test_back_from_the_first_run_picked_returns_to_the_run_opened_by_default(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    """Opened on TensorBoard's bare ``#sync_advisor`` (no run named) while the runs still
    load: a review's Back landed on that key-less entry, which was then given the new view,
    so Back changed nothing and the next one left TensorBoard."""
    page = new_page(browser, page_errors)

    def loading(route: Any) -> None:
        answer = route.fetch().json()
        answer["loading"] = True  # the default run is not pinned into the URL yet
        route.fulfill(json=answer)

    page.route("**/data/plugin/sync_advisor/runs*", loading)
    page.goto(f"{board}/#sync_advisor")
    frame = page.wait_for_selector("iframe", state="attached").content_frame()
    frame.wait_for_selector("[data-testid=sites] tbody tr")
    opened = frame.input_value("#sa-run")
    other = "optimized" if opened != "optimized" else "baseline"
    frame.select_option("#sa-run", other)
    page.wait_for_function(f"location.hash.includes('p.sync_advisor.run={other}')")
    page.go_back()
    frame.wait_for_function(f"document.querySelector('#sa-run').value === '{opened}'")
    assert f"p.sync_advisor.run={opened}" in page.evaluate("location.hash")
    assert page_errors == []


def test_back_on_the_plugins_own_page_returns_to_the_run_before(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=optimized"))
    rows(page)
    page.select_option("#sa-run", "baseline")
    page.wait_for_function("location.hash === '#run=baseline'")
    page.go_back()
    page.wait_for_function("document.querySelector('#sa-run').value === 'optimized'")
    assert page.evaluate("location.hash") == "#run=optimized"
    assert page_errors == []


def test_copy_link_in_tensorboard_is_its_address_and_opens_the_same_view_there(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"{board}/#sync_advisor")
    frame = page.wait_for_selector("iframe", state="attached").content_frame()
    frame.wait_for_selector("[data-testid=sites] tbody tr")
    frame.select_option("#sa-run", "baseline")
    frame.wait_for_function(
        "document.querySelectorAll('[data-testid=sites] tbody tr').length === 2"
    )
    frame.click("th button[data-sort=gpu_idle_us]")
    frame.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{ITEM_LINE}").click()
    frame.wait_for_selector("[data-testid=source] .ln.hl")
    # TensorBoard's address bar shows the view too, in the plugin's keys beside its tab.
    assert page.url.startswith(f"{board}/#sync_advisor&p.sync_advisor.run=baseline&"), page.url
    assert "p.sync_advisor.site=" in page.url
    frame.click("[data-testid=copy-link]")
    assert "Copied link to this view" in frame.wait_for_selector(".sa-toast.show").inner_text()
    link = frame.evaluate("navigator.clipboard.readText()")
    # TensorBoard's own address (under the path prefix): it opens inside TensorBoard.
    assert link == page.url, link
    # A colleague's browser: a fresh context, the link opened as a top-level page.
    shared = new_page(browser, page_errors)
    shared.goto(link)
    inner = shared.wait_for_selector("iframe", state="attached").content_frame()
    hl = inner.wait_for_selector("[data-testid=source] .ln.hl")
    assert hl.get_attribute("data-line") == str(ITEM_LINE)
    assert inner.input_value("#sa-run") == "baseline"
    current = inner.locator("[data-testid=sites] tbody tr[aria-current=true]")
    assert f"train.py:{ITEM_LINE}" in current.inner_text()
    sorted_by = inner.get_attribute("th:has(button[data-sort=gpu_idle_us])", "aria-sort")
    assert sorted_by == "descending"
    # Standalone (the frame's page opened by itself) the link is that page's own.
    alone = new_page(browser, page_errors)
    alone.context.grant_permissions(["clipboard-read", "clipboard-write"])
    alone.goto(plugin_url(board, "#run=baseline"))
    rows(alone)
    alone.click("[data-testid=copy-link]")
    alone.wait_for_selector(".sa-toast.show")
    own = alone.evaluate("navigator.clipboard.readText()")
    assert own == f"{board}/data/plugin_entry.html?name=sync_advisor#run=baseline", own
    assert page_errors == []


def test_reloading_tensorboard_keeps_the_view_and_back_and_forward_follow_its_address(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(f"{board}/#sync_advisor")
    frame = page.wait_for_selector("iframe", state="attached").content_frame()
    frame.wait_for_selector("[data-testid=sites] tbody tr")
    entries = page.evaluate("history.length")
    run_moves = frame.input_value("#sa-run") != "baseline"
    frame.select_option("#sa-run", "baseline")
    frame.wait_for_function(
        "document.querySelectorAll('[data-testid=sites] tbody tr').length === 2"
    )
    frame.click(".sa-chart g.step[data-step='3']")
    frame.wait_for_selector("[data-testid=step-filter]")
    frame.locator("#sa-q").press_sequentially("train")
    frame.fill("#sa-q", "")
    frame.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{ITEM_LINE}").click()
    frame.wait_for_selector("[data-testid=source] .ln.hl")
    before = page.url
    assert "p.sync_advisor.step=3" in before, before
    # The address follows the view with a history entry per move (the run, the step, the
    # site), none per keystroke of the filter: Back undoes a move, not a letter typed.
    assert page.evaluate("history.length") == entries + run_moves + 2
    # F5: TensorBoard's router keeps the plugin's keys, and the view comes back whole.
    page.reload()
    frame = page.wait_for_selector("iframe", state="attached").content_frame()
    hl = frame.wait_for_selector("[data-testid=source] .ln.hl")
    assert hl.get_attribute("data-line") == str(ITEM_LINE)
    assert frame.input_value("#sa-run") == "baseline"
    assert frame.locator("[data-testid=step-filter]:has-text('step 3')").count() == 1
    assert page.url == before
    # Another tab keeps them too; coming back shows the same view.
    page.evaluate("location.hash = location.hash.replace('#sync_advisor', '#scalars')")
    page.wait_for_function("location.hash.startsWith('#scalars&p.sync_advisor.run=baseline')")
    page.go_back()
    page.wait_for_function("location.hash.startsWith('#sync_advisor&')")
    assert page.url == before
    # An address edited by hand (or pasted) is followed without a reload.
    page.evaluate("location.hash = '#sync_advisor&p.sync_advisor.run=optimized'")
    frame.wait_for_function("document.querySelector('#sa-run').value === 'optimized'")
    frame.wait_for_function("!document.querySelector('[data-testid=detail]')")
    # Back returns to the view before it, detail and step included; Forward again.
    page.go_back()
    hl = frame.wait_for_selector("[data-testid=source] .ln.hl")
    assert hl.get_attribute("data-line") == str(ITEM_LINE)
    assert frame.input_value("#sa-run") == "baseline"
    assert frame.locator("[data-testid=step-filter]:has-text('step 3')").count() == 1
    assert page.url == before
    page.go_forward()
    frame.wait_for_function("document.querySelector('#sa-run').value === 'optimized'")
    frame.wait_for_function("!document.querySelector('[data-testid=detail]')")
    assert page_errors == []


def test_markup_in_trace_names_renders_as_text_and_runs_no_script(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=html_names"))
    texts = rows(page)
    assert any(XSS in t for t in texts), texts
    page.locator("[data-testid=sites] tbody tr").first.click()
    page.wait_for_selector("[data-testid=chain]")
    assert XSS in page.inner_text("[data-testid=detail]")
    page.wait_for_timeout(300)
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("window.__xss") is None
    assert page_errors == []


def test_dark_theme_follows_tensorboard_and_the_system(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors, dark=True)
    page.goto(plugin_url(board, "#run=baseline"))
    rows(page)
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(32, 33, 36)"
    shot(page, "hotspots-dark.png")
    page.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{ITEM_LINE}").click()
    page.wait_for_selector("[data-testid=source] .ln.hl")
    page.wait_for_timeout(300)
    shot(page, "detail-dark.png", full_page=False)
    # Inside TensorBoard, its own dark-mode class on the parent body decides.
    tb = new_page(browser, page_errors)
    tb.goto(f"{board}/#sync_advisor")
    frame = tb.wait_for_selector("iframe", state="attached").content_frame()
    frame.wait_for_selector("[data-testid=sites]")
    assert frame.evaluate("document.documentElement.dataset.theme") == "light"
    tb.evaluate("document.body.classList.add('dark-mode')")
    frame.wait_for_function("document.documentElement.dataset.theme === 'dark'")
    assert page_errors == []


# Every token class on a plain line and on the highlighted one (one of each added, as the
# fixture's lines hold no comment or string), with the line's and the code's background.
SOURCE_COLOURS = """() => {
  const lines = [document.querySelector("[data-testid=source] .ln.hl .src"),
                 document.querySelector("[data-testid=source] .ln:not(.hl) .src")];
  for (const line of lines)
    for (const cls of ["t-kw", "t-str", "t-num", "t-com", "t-call", "t-builtin"]) {
      const token = document.createElement("span");
      token.className = cls;
      token.textContent = "x";
      line.append(token);
    }
  const tokens = "[data-testid=source] .ln [class^=t-], [data-testid=source] .ln .no";
  return [...document.querySelectorAll(tokens)].map(el => [
    el.className, getComputedStyle(el).color,
    getComputedStyle(el.closest(".ln")).backgroundColor,
    getComputedStyle(el.closest("pre, .sa-code")).backgroundColor]);
}"""


@pytest.mark.parametrize("dark", [False, True])
def test_source_code_and_the_pressed_tab_are_readable_in_both_themes(
    board: str, browser: Any, page_errors: list[str], dark: bool
) -> None:
    """WCAG AA (4.5:1) for every token of the source, on its line's background (the
    highlighted line's included) and the Hotspots/Compare tab pressed: comments were at
    3.05:1 (2.73:1 on the dark highlight), calls 3.8:1, the pressed tab's white 3.79:1."""
    page = new_page(browser, page_errors, dark=dark)
    page.goto(plugin_url(board, f"#run=baseline&site=train.py%3A{ITEM_LINE}%3Aaten%3A%3Aitem"))
    page.wait_for_selector("[data-testid=source] .ln.hl")
    seen = set()
    for cls, colour, line_bg, code_bg in page.evaluate(SOURCE_COLOURS):
        background = line_bg if line_bg != "rgba(0, 0, 0, 0)" else code_bg
        seen.add(cls)
        assert contrast(colour, background) >= 4.5, (cls, colour, background)
    assert {"t-com", "t-call", "t-kw", "t-str", "t-num", "no"} <= seen, seen
    fg, bg = page.eval_on_selector(
        ".sa-tabs button[aria-pressed=true]",
        "el => [getComputedStyle(el).color, getComputedStyle(el).backgroundColor]",
    )
    assert contrast(fg, bg) >= 4.5, (fg, bg)
    assert page_errors == []


def parse_tab(hash_: str) -> str:
    return hash_.lstrip("#").split("&")[0]


CLIPPED = """() => {
  // Cells and code blocks whose content is wider than their box (cut or scrolled away), and
  // table cells that lie outside the visible part of their table's wrapper.
  const out = [];
  const wrap = document.querySelector("[data-testid=sites]").closest(".sa-table-wrap");
  const box = wrap.getBoundingClientRect();
  for (const cell of document.querySelectorAll("[data-testid=sites] .num")) {
    if (cell.offsetParent === null) continue;  // a column hidden at this width
    const r = cell.getBoundingClientRect();
    const text = cell.textContent;
    if (cell.scrollWidth > cell.clientWidth) out.push(`${text}: cut`);
    if (r.right > box.right + 0.5 || r.left < box.left - 0.5) out.push(`${text}: outside`);
  }
  if (wrap.scrollWidth > wrap.clientWidth) {
    out.push(`sites table scrolls: ${wrap.scrollWidth} > ${wrap.clientWidth}`);
  }
  const code = "[data-testid=source], [data-testid=advice] pre";
  for (const pre of document.querySelectorAll(code)) {
    if (pre.scrollWidth > pre.clientWidth) out.push(`code: ${pre.textContent.slice(0, 30)}`);
  }
  return out;
}"""

NUMERIC_SHOWN = """() => [...document.querySelectorAll("[data-testid=sites] thead th.num")]
  .filter(th => th.offsetParent !== null).map(th => th.querySelector("button").textContent)"""

ITEM_SITE = f"site=train.py%3A{ITEM_LINE}%3Aaten%3A%3Aitem"


@pytest.mark.parametrize("run", ["baseline", "no_stacks", "html_names", "two_machines"])
def test_with_a_detail_open_at_1280x800_no_cost_cell_or_code_is_cut(
    board: str, browser: Any, page_errors: list[str], run: str
) -> None:
    page = new_page(browser, page_errors, width=1280, height=800)
    page.goto(plugin_url(board, f"#run={run}"))
    page.locator("[data-testid=sites] tbody tr").first.click()
    page.wait_for_selector("[data-testid=advice]")
    page.wait_for_selector("[data-testid=source], [data-testid=source-note]")
    assert page.evaluate(CLIPPED) == []
    assert page.evaluate(NUMERIC_SHOWN) == ["Per step", "Saves/step", "Host wait", "Share"]
    # The detail scrolls on its own beside the table: no page-long blank under the table.
    slot = page.locator(".sa-detail-slot")
    assert slot.evaluate("el => el.getBoundingClientRect().height") <= 800
    assert slot.evaluate("el => getComputedStyle(el).overflowY") == "auto"
    # The page ends at most a screen below where the table starts (the detail's own height
    # no longer sets the page's).
    beyond = page.evaluate("""() => {
      const main = document.querySelector(".sa-main");
      const top = main.getBoundingClientRect().top + scrollY;
      const table = main.querySelector("section").getBoundingClientRect().height;
      return document.documentElement.scrollHeight - (top + Math.max(table, innerHeight));
    }""")
    assert beyond <= 48, beyond
    assert page_errors == []


def test_narrow_vscode_panel_has_no_horizontal_page_scroll_and_keeps_the_costs_whole(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors, width=500, height=900)
    page.goto(plugin_url(board, f"#run=baseline&{ITEM_SITE}"))
    page.wait_for_selector("[data-testid=source] .ln.hl")
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 1
    assert page.evaluate(CLIPPED) == []
    assert page.evaluate(NUMERIC_SHOWN) == ["Saves/step", "Share"]
    shot(page, "narrow-panel.png")
    # An operator name standing in for a missing line wraps rather than push costs away.
    page.goto(plugin_url(board, "#run=no_stacks"))
    page.reload()
    page.locator("[data-testid=sites] tbody tr").first.click()
    page.wait_for_selector("[data-testid=advice]")
    assert page.evaluate(CLIPPED) == []
    assert page_errors == []


def test_each_hotspot_row_says_its_fix_and_how_to_fix_shows_code_not_backticks(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    from tests.e2e.helpers import get_json

    sites = get_json(f"{board}/data/plugin/sync_advisor/sites?run=baseline")["items"]
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=baseline"))
    rows(page)
    for site in sites:
        row = page.locator(f"[data-testid=sites] tbody tr[data-site='{site['key']}']")
        fix = row.locator("[data-testid=row-fix]").inner_text()
        assert fix.replace("\u2192", "").strip() == site["advice"]["title"].replace("`", "")
    page.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{ITEM_LINE}").click()
    advice = page.wait_for_selector("[data-testid=advice]")
    assert "`" not in advice.inner_text()
    assert page.locator("[data-testid=advice] p code").count() >= 2  # `.item()`, `float(t)`
    assert page_errors == []


BAND_LABELS = """() => {
  const svg = document.querySelector("[data-testid=timeline] svg");
  const width = svg.viewBox.baseVal.width;
  const boxes = [...svg.querySelectorAll("text.band-label")].map(t => {
    const b = t.getBBox();
    return {text: t.textContent, l: b.x, r: b.x + b.width, t: b.y, b: b.y + b.height};
  });
  const bars = [...svg.querySelectorAll("text.ev-label")].map(t => t.textContent);
  return {width, boxes, bars};
}"""


@pytest.mark.parametrize("line", [ITEM_LINE, NONZERO_LINE])
def test_timeline_labels_never_overlap_and_name_operators_readably(
    board: str, browser: Any, page_errors: list[str], line: int
) -> None:
    page = new_page(browser, page_errors, width=1280, height=800)
    page.goto(plugin_url(board, "#run=baseline"))
    page.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{line}").click()
    page.wait_for_selector("[data-testid=timeline] svg text.band-label")
    found = page.evaluate(BAND_LABELS)
    boxes = found["boxes"]
    assert [b["text"].split()[0] for b in boxes] == ["wait", "GPU"]
    for box in boxes:
        assert box["l"] >= 0 and box["r"] <= found["width"] + 0.5, box
    first, second = boxes
    apart = first["r"] <= second["l"] or second["r"] <= first["l"]
    assert apart or first["b"] <= second["t"] or second["b"] <= first["t"], boxes
    # Names are shortened by their namespace, never to a stub like "aten:…".
    stubs = [text for text in found["bars"] if re.fullmatch(r"\w{1,4}:*…", text)]
    assert stubs == [], found["bars"]
    assert page_errors == []


def test_python_stack_says_which_line_is_a_def_line_and_which_is_the_call(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, f"#run=baseline&{ITEM_SITE}"))
    page.wait_for_selector("[data-testid=source] .ln.hl")
    assert f"defined at line {TRAIN_STEP_DEF}" in page.inner_text("[data-testid=where]")
    frame = page.locator("[data-testid=user-frames] li", has_text="train_step")
    text = frame.inner_text()
    assert f"train.py:{TRAIN_STEP_DEF}" in text and "def" in text
    assert f"sync at line {ITEM_LINE}" in text
    assert "where each function is defined" in page.inner_text("[data-testid=stack-note]")
    assert page_errors == []


def test_steps_of_two_machines_are_drawn_per_worker_and_a_click_picks_its_worker(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=two_machines"))
    chart = page.wait_for_selector("[data-testid=step-chart]")
    assert chart.get_attribute("data-groups") == "2"
    labels = page.eval_on_selector_all(
        ".sa-chart text.group-label", "ts => ts.map(t => t.textContent)"
    )
    assert labels == ["hostA_101", "hostB_202"]
    steps = page.eval_on_selector_all(
        ".sa-chart g.step", "gs => gs.map(g => [g.dataset.worker, g.dataset.step])"
    )
    assert steps == [
        ["hostA_101", "1"],
        ["hostA_101", "2"],
        ["hostA_101", "3"],
        ["hostB_202", "550"],
        ["hostB_202", "551"],
    ]
    # On one axis 1 2 3 550 551 would read as one worker's steps; a step belongs to a worker.
    page.click(".sa-chart g.step[data-worker=hostB_202][data-step='550']")
    page.wait_for_function("location.hash.includes('step=550')")
    assert "worker=hostB_202" in page.evaluate("location.hash")
    assert page.input_value("#sa-worker") == "hostB_202"
    wait_drawn(page)  # else the whole run's table, which holds hostB's rows too
    assert any(f"train.py:{NONZERO_LINE}" in t for t in rows(page))  # hostB's nonzero
    assert page_errors == []


def test_a_chart_without_any_cost_says_so_instead_of_a_zero_scale(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=clean"))
    chart = page.wait_for_selector("[data-testid=step-chart]")
    assert page.locator(".sa-chart text.empty").count() == 1
    assert "0 µs" not in chart.inner_text()
    assert page_errors == []


def test_the_detail_opens_the_pytorch_profiler_tab_and_says_where_the_sync_is(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"{board}/#sync_advisor")
    frame = page.wait_for_selector("iframe", state="attached").content_frame()
    frame.wait_for_selector("[data-testid=sites] tbody tr")
    frame.select_option("#sa-run", "baseline")
    frame.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{ITEM_LINE}").click()
    link = frame.wait_for_selector("[data-testid=profiler-link]")
    text = link.inner_text()
    assert "then pick Runs baseline" in text and "Workers worker0" in text and "Views Trace" in text
    assert re.search(r"into ProfilerStep#1", text), text
    perfetto = frame.locator("[data-testid=perfetto-link] a[download]")
    assert "format=trace" in perfetto.get_attribute("href")
    assert "worker=worker0" in perfetto.get_attribute("href")
    frame.click("[data-testid=profiler-link] button")
    # As TensorBoard's tab bar does: the tab changes, the other keys (this view's) stay.
    page.wait_for_function(
        "location.hash.startsWith('#pytorch_profiler&p.sync_advisor.run=baseline')"
    )
    # The operator to search for in its Trace view is on the clipboard (read from the top
    # page: the plugin's frame is hidden now).
    assert page.evaluate("navigator.clipboard.readText()") == "aten::item"
    # The PyTorch Profiler tab loads Google Charts from gstatic.com; offline its own page
    # fails with "google is not defined" whenever it gets that far before the test ends.
    assert [e for e in page_errors if "google is not defined" not in e] == []


def test_cpu_only_trace_shows_latent_findings_and_says_they_sync_on_a_gpu(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=cpu_only"))
    banner = page.wait_for_selector("[data-testid=no-gpu]")
    assert "would synchronize" in banner.inner_text()
    # What the list cannot hold, as the terminal says it (the copies a GPU run would make).
    assert "Not listed on a CPU-only trace" in banner.inner_text()
    texts = rows(page)
    assert any(f"train.py:{ITEM_LINE}" in t for t in texts), texts
    assert any(f"train.py:{NONZERO_LINE}" in t for t in texts), texts
    assert page.locator("[data-testid=sites] .sa-badge.latent").count() == 2
    page.locator("[data-testid=sites] tbody tr", has_text=f"train.py:{NONZERO_LINE}").click()
    hl = page.wait_for_selector("[data-testid=source] .ln.hl")
    assert "torch.nonzero(labels)" in hl.inner_text()
    shot(page, "latent-cpu.png")
    assert page_errors == []


def test_trace_without_stacks_teaches_with_stack_true(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=no_stacks"))
    banner = page.wait_for_selector("[data-testid=no-stacks]")
    assert "with_stack=True" in banner.inner_text()
    # Without a stack the site is named by its operator, marked as having no source.
    assert "aten::item" in rows(page)[0]
    assert page.locator("[data-testid=sites] .loc .nosrc").count() == 1
    assert page_errors == []


def test_trace_without_syncs_says_so_and_what_was_checked(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=clean"))
    banner = page.wait_for_selector("[data-testid=no-syncs]")
    text = banner.inner_text()
    assert "No host-device synchronization found" in text
    assert "Checked 2 steps" in text
    assert "cudaStreamSynchronize" in text  # from summary.checked
    assert page.locator("[data-testid=sites]").count() == 0
    assert page_errors == []


def test_unreadable_trace_file_is_listed_with_its_reason_and_the_run_still_shows(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=optimized"))
    errors = page.wait_for_selector("[data-testid=file-errors]")
    errors.click()  # expand the <details>
    text = errors.inner_text()
    assert "worker1.1700000000001.pt.trace.json" in text
    assert "JSON" in text
    assert "the others are analysed" in text
    assert errors.get_attribute("data-all") == "false"
    assert any(f"train.py:{NONZERO_LINE}" in t for t in rows(page))
    assert page_errors == []


def test_a_run_the_link_names_that_is_not_in_the_logdir_is_said_and_none_of_its_view_opened(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    # The site key exists in the run shown instead (baseline): it must not open there.
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, f"#run=no_such_run&step=2&{ITEM_SITE}"))
    notice = page.wait_for_selector("[data-testid=missing-run]")
    assert 'Run "no_such_run" is not in the logdir' in notice.inner_text()
    shown = page.input_value("#sa-run")
    assert shown == "baseline"
    assert 'showing run "baseline" instead' in notice.inner_text()
    rows(page)
    # The URL (what "Copy link" and a reload use) names the run shown, and nothing else of
    # the missing run's view.
    assert page.evaluate("location.hash") == "#run=baseline"
    assert page.locator("[data-testid=detail]").count() == 0
    assert page.locator("[data-testid=sites] tbody tr[aria-current=true]").count() == 0
    assert page.locator("[data-testid=step-filter]").count() == 0
    # Picking a run puts the notice away.
    page.select_option("#sa-run", "optimized")
    page.wait_for_function("location.hash.includes('run=optimized')")
    assert page.locator("[data-testid=missing-run]").count() == 0
    assert page_errors == []


def test_a_run_none_of_whose_traces_can_be_read_says_so_and_concludes_nothing(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=unreadable"))
    page.wait_for_selector("[data-testid=nothing-read]")
    # Open without a click: the reasons are all there is to see.
    errors = page.wait_for_selector("[data-testid=file-errors][open]")
    text = errors.inner_text()
    assert "No trace of this run could be read" in text, text
    assert "the others" not in text, text
    assert "worker0.1700000000000.pt.trace.json.gz: truncated" in text, text
    # No conclusion drawn from an empty report: no GPU, stacks or syncs banner, no cards
    # of zeros, no table, no chart.
    for testid in (
        "no-gpu",
        "no-stacks",
        "no-syncs",
        "card-latent",
        "card-steps",
        "sites",
        "step-chart",
    ):
        assert page.locator(f"[data-testid={testid}]").count() == 0, testid
    assert "No GPU activity" not in page.inner_text("body")
    # Nothing to export but the JSON that names the file and why (no Trace+track: 400).
    hrefs = page.eval_on_selector_all(
        ".sa-exports a", "els => els.map(a => a.getAttribute('href'))"
    )
    assert [h.split("format=")[1] for h in hrefs] == ["json"], hrefs
    assert page.inner_text("#sa-run option:checked") == "unreadable (unreadable)"
    assert page_errors == []


def test_a_baseline_the_link_names_that_is_not_in_the_logdir_is_said_and_the_url_names_the_one_used(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=optimized&view=compare&base=no_such_base"))
    notice = page.wait_for_selector("[data-testid=missing-base]")
    text = notice.inner_text()
    assert 'Baseline run "no_such_base" is not in the logdir' in text, text
    assert 'comparing with run "baseline" instead' in text, text
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    assert page.input_value("#sa-base") == "baseline"
    # The URL ("Copy link", a reload) names the baseline compared, not the missing one.
    assert page.evaluate("location.hash") == "#run=optimized&view=compare&base=baseline"
    # Dismissed, the notice hands the focus to the baseline picker, not to the page.
    notice.query_selector("button").click()
    page.wait_for_function("!document.querySelector('[data-testid=missing-base]')")
    assert page.evaluate("document.activeElement.id") == "sa-base"
    assert page_errors == []


def test_the_notice_of_a_run_not_in_the_logdir_is_written_into_a_status_region_there_before(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    """A screen reader reads a notice written into a live region already in the page, not
    one inserted holding its text: the region is there, empty, before the runs answer."""
    page = new_page(browser, page_errors)
    runs_route = re.compile(r"/data/plugin/sync_advisor/runs(\?|$)")
    held: list[Any] = []

    def hold(route: Any) -> None:
        if held and held[0] is None:  # released: later polls go through
            route.continue_()
        else:
            held.append(route)

    page.route(runs_route, hold)
    page.goto(plugin_url(board, "#run=no_such_run"))
    region = page.wait_for_selector("[data-testid=notices]", state="attached")
    assert region.get_attribute("role") == "status"
    assert region.get_attribute("aria-live") == "polite"
    for _ in range(100):
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the page never asked for the runs"
    assert region.inner_text() == ""
    waiting = list(held)
    held[:] = [None]
    for route in waiting:
        route.continue_()
    notice = page.wait_for_selector("[data-testid=missing-run]")
    assert 'Run "no_such_run" is not in the logdir' in notice.inner_text()
    # Written into that same region, and not a live region of its own inserted with its text.
    assert region.evaluate("(region, notice) => region.contains(notice)", notice)
    assert notice.get_attribute("role") is None
    # A redraw (a sort, a filter) does not write it again, so it is not read out again.
    rows(page)
    page.click("th button[data-sort=gpu_idle_us]")
    page.wait_for_function("location.hash.includes('sort=gpu_idle_us')")
    page.fill("#sa-q", "train")
    page.wait_for_function("location.hash.includes('q=train')")
    assert notice.evaluate("n => n.isConnected")
    assert region.evaluate("r => r.isConnected")
    assert page_errors == []


def test_a_run_picked_as_its_own_baseline_is_said_and_the_address_names_no_baseline_unused(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    # In TensorBoard: its address keeps the view in the plugin's keys.
    page = new_page(browser, page_errors)
    keys = "p.sync_advisor.run=optimized&p.sync_advisor.view=compare&p.sync_advisor.base=baseline"
    page.goto(f"{board}/#sync_advisor&{keys}")
    frame = page.wait_for_selector("iframe", state="attached").content_frame()
    frame.wait_for_selector("[data-testid=compare-sites] tbody tr")
    # The baseline picked as the run: it is never compared with itself, and the user is told.
    frame.select_option("#sa-run", "baseline")
    notice = frame.wait_for_selector("[data-testid=self-base]")
    text = notice.inner_text()
    assert (
        'Run "baseline" cannot be its own baseline: a run compared with itself shows nothing. '
        "Pick another run as baseline." in text
    ), text
    assert frame.locator("[data-testid=notices] [data-testid=self-base]").count() == 1
    frame.wait_for_selector("[data-testid=compare-empty]")
    assert frame.input_value("#sa-base") == ""
    assert frame.locator("[data-testid=compare-sites]").count() == 0
    # Neither address claims the baseline that is not used.
    assert frame.evaluate("location.hash") == "#run=baseline&view=compare"
    page.wait_for_function("!location.hash.includes('p.sync_advisor.base=')")
    assert page.url.endswith(
        "#sync_advisor&p.sync_advisor.run=baseline&p.sync_advisor.view=compare"
    ), page.url
    # Picking another baseline puts the notice away.
    frame.select_option("#sa-base", "optimized")
    frame.wait_for_selector("[data-testid=compare-sites] tbody tr")
    assert frame.locator("[data-testid=self-base]").count() == 0
    assert "p.sync_advisor.base=optimized" in page.url
    # A link naming a run as its own baseline: the default compared instead, and said so.
    alone = new_page(browser, page_errors)
    alone.goto(plugin_url(board, "#run=optimized&view=compare&base=optimized"))
    text = alone.wait_for_selector("[data-testid=self-base]").inner_text()
    assert 'Run "optimized" cannot be its own baseline' in text, text
    assert 'Comparing with run "baseline" instead' in text, text
    alone.wait_for_selector("[data-testid=compare-sites] tbody tr")
    assert alone.input_value("#sa-base") == "baseline"
    assert alone.evaluate("location.hash") == "#run=optimized&view=compare&base=baseline"
    assert page_errors == []


@pytest.mark.parametrize(
    ("hash_", "said"),
    [
        ("#run=baseline&view=compare&base=unreadable", 'No trace of baseline run "unreadable"'),
        ("#run=unreadable&view=compare&base=baseline", 'No trace of run "unreadable"'),
    ],
)
def test_compare_with_a_run_none_of_whose_traces_can_be_read_says_so_and_compares_nothing(
    board: str, browser: Any, page_errors: list[str], hash_: str, said: str
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, hash_))
    text = page.wait_for_selector("[data-testid=compare-unreadable]").inner_text()
    assert f"{said} could be read" in text, text
    # The reasons: here for the baseline, in the open banner above for the run itself.
    where = text if "baseline run" in said else page.inner_text("[data-testid=file-errors][open]")
    assert "worker0.1700000000000.pt.trace.json.gz: truncated" in where, where
    # Not an empty report compared: no verdict, no counts, no rows of fixed or new sites.
    for testid in ("compare-sites", "step-change", "compare"):
        assert page.locator(f"[data-testid={testid}]").count() == 0, testid
    assert page.locator("[data-status-count]").count() == 0
    if "baseline run" in said:
        assert page.inner_text("#sa-base option:checked") == "unreadable (unreadable)"
    assert page_errors == []


def test_the_default_baseline_picked_as_the_run_is_said_as_a_named_one_is(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    # No baseline named: the default ("baseline") is compared.
    page.goto(plugin_url(board, "#run=optimized&view=compare"))
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    assert page.input_value("#sa-base") == "baseline"
    page.select_option("#sa-run", "baseline")
    text = page.wait_for_selector("[data-testid=self-base]").inner_text()
    assert 'Run "baseline" cannot be its own baseline' in text, text
    assert "Pick another run as baseline." in text, text
    page.wait_for_selector("[data-testid=compare-empty]")
    assert page.evaluate("location.hash") == "#run=baseline&view=compare"
    assert page_errors == []


def test_compare_with_a_baseline_of_which_a_trace_cannot_be_read_says_it_is_left_out(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=baseline&view=compare&base=optimized"))
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    note = page.inner_text("[data-testid=base-unreadable] summary")
    assert note == (
        '1 trace file of baseline run "optimized" could not be read: compared without it'
    ), note
    assert page.inner_text("#sa-base option:checked") == "optimized (1 unreadable)"
    assert page_errors == []


def test_trace_read_with_repairs_gets_a_quiet_notice_naming_the_file_and_the_repair(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=windows_paths"))
    notice = page.wait_for_selector("[data-testid=file-repairs]")
    text = notice.inner_text()
    assert (
        "worker0.1700000000000.pt.trace.json: read with repairs: "
        "escaped backslashes in Windows paths"
    ) in text, text
    assert "could be missing" in text
    # A notice, not an error: the trace was analysed and its finding is listed.
    assert "sa-note" in (notice.get_attribute("class") or "")
    assert page.locator("[data-testid=file-errors]").count() == 0
    # The file is not on this machine: the site is at the function's definition line.
    assert any(f"win_train.py:{TRAIN_STEP_DEF}" in t for t in rows(page)), rows(page)
    # Another run read cleanly: no notice there.
    page.select_option("#sa-run", "baseline")
    page.wait_for_function("location.hash.includes('run=baseline')")
    page.wait_for_selector("[data-testid=sites] tbody tr")
    assert page.locator("[data-testid=file-repairs]").count() == 0
    assert page_errors == []


def test_a_kind_the_dashboard_never_heard_of_shows_with_the_catalogues_label_and_colour(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    """collective_wait was added to tb_syncfinder/catalogue.py only: the badge's words,
    tooltip and colour come from the plugin's catalogue route, with no frontend edit."""
    from tb_syncfinder import catalogue

    kind = catalogue.kind(catalogue.COLLECTIVE_WAIT)
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=distributed"))
    badge = page.locator("[data-testid=sites] tbody tr .sa-badge").first
    badge.wait_for()
    assert badge.inner_text() == kind.label
    assert badge.get_attribute("title") == kind.description
    red, green, blue = (int(kind.colour[i : i + 2], 16) for i in (1, 3, 5))
    colour = badge.evaluate("el => getComputedStyle(el).backgroundColor")
    assert colour == f"rgb({red}, {green}, {blue})", colour
    assert page_errors == []


# The real H100 trace bundled with the demo (frames recorded as tb_syncfinder/demo/seg.py,
# which the plugin resolves to the installed workload file by itself).
GPU_SEG_RUN = "gpu_seg_baseline"
SEG_SOURCE = REPO / "tb_syncfinder" / "demo" / "seg.py"
SEG_TRACE = REPO / "tb_syncfinder" / "demo" / "traces" / "seg_baseline.pt.trace.json.gz"


def seg_mark(name: str) -> int:
    """The 1-based line of seg.py marked ``# sync: <name>`` (read from the file, never
    written here)."""
    lines = SEG_SOURCE.read_text(encoding="utf-8").splitlines()
    found = [
        number
        for number, text in enumerate(lines, start=1)
        if re.search(rf"#\s*sync:\s*{name}\b", text)
    ]
    assert len(found) == 1, (name, found)
    return found[0]


CNN_TRACES = {
    f"gpu_cnn_{side}": REPO / "tb_syncfinder" / "demo" / "traces" / f"cnn_{side}.pt.trace.json.gz"
    for side in ("baseline", "optimized")
}


@pytest.fixture(scope="module")
def gpu_seg_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A TensorBoard on a logdir holding the bundled GPU traces of the seg demo's baseline
    and of the cnn demo's baseline and optimized runs."""
    root = tmp_path_factory.mktemp("gpu_seg")
    for run, trace in {GPU_SEG_RUN: SEG_TRACE, **CNN_TRACES}.items():
        run_dir = root / "logs" / run
        run_dir.mkdir(parents=True)
        shutil.copy(trace, run_dir / "gpu.pt.trace.json.gz")
    runs = {GPU_SEG_RUN, *CNN_TRACES}
    with serve_tensorboard(root / "logs", cwd=root, expected_runs=runs) as base:
        yield base


def test_a_compared_row_of_two_lines_names_both_and_its_figure_is_a_cost_not_a_saving(
    gpu_seg_board: str, browser: Any, page_errors: list[str]
) -> None:
    from tests.e2e.helpers import get_json

    api = (
        f"{gpu_seg_board}/data/plugin/sync_advisor/compare"
        "?run=gpu_cnn_optimized&base=gpu_cnn_baseline"
    )
    merged = [s for s in get_json(api)["sites"] if len((s["before"] or s["after"])["lines"]) > 1]
    assert merged, "the demo's two host-to-device copies are one row of two lines"
    page = new_page(browser, page_errors)
    page.goto(
        plugin_url(gpu_seg_board, "#run=gpu_cnn_optimized&view=compare&base=gpu_cnn_baseline")
    )
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    for site in merged:
        row = page.locator(f"[data-testid=compare-sites] tbody tr[data-key='{site['key']}']")
        lines = ",".join(str(n) for n in (site["before"] or site["after"])["lines"])
        assert f"cnn.py:{lines}" in row.locator("td.loc").inner_text()
        assert "gone: was costing" in row.inner_text() and "/step" in row.inner_text()
    assert "include the profiler's overhead" in page.inner_text("[data-testid=step-change-caveat]")
    assert page_errors == []


def test_backward_sync_shows_its_forward_calls_stack_and_the_line_that_ran_it(
    gpu_seg_board: str, browser: Any, page_errors: list[str]
) -> None:
    # IndexBackward0 syncs in autograd's backward thread, which records no Python stack on a
    # GPU: the detail shows the stack of its forward aten::index, says so, and names the
    # loss.backward() line that ran it, never "No Python stack recorded".
    mask = seg_mark("mask")
    backward_line = seg_mark("mask_backward")  # loss.backward()
    page = new_page(browser, page_errors, width=1600, height=1000)
    page.goto(plugin_url(gpu_seg_board, f"#run={GPU_SEG_RUN}"))
    rows(page)
    row = (
        page.locator("[data-testid=sites] tbody tr")
        .filter(has_text=f"seg.py:{mask}")
        .filter(has_text="IndexBackward0")
    )
    assert row.count() == 1, rows(page)
    row.click()
    page.wait_for_selector("[data-testid=source] .ln.hl")
    assert "IndexBackward0" in page.inner_text("[data-testid=chain]")
    frames = page.locator("[data-testid=user-frames]")
    assert frames.get_attribute("data-stack") == "forward"
    heading = page.locator("[data-testid=detail] h3", has_text="Python stack of the forward call")
    assert heading.count() == 1
    note = page.inner_text("[data-testid=forward-stack-note]")
    assert "IndexBackward0" in note and "aten::index" in note, note
    assert "without a Python stack" in note, note
    own = frames.locator("li", has_text="baseline_loss")
    assert f"forward call at line {mask}" in own.inner_text()
    assert "baseline_step" in frames.inner_text()
    run_by = page.inner_text("[data-testid=run-by]")
    assert f"run by tb_syncfinder/demo/seg.py:{backward_line}" in run_by, run_by
    assert "baseline_step()" in run_by, run_by
    assert page.locator("[data-testid=run-by] button[data-frame]").count() == 1
    assert "No Python stack" not in page.inner_text("[data-testid=detail]")
    assert page.locator("[data-testid=no-stack]").count() == 0
    page.locator("[data-testid=run-by]").scroll_into_view_if_needed()
    assert page_errors == []


def test_forward_sync_on_the_same_line_keeps_its_own_stack(
    gpu_seg_board: str, browser: Any, page_errors: list[str]
) -> None:
    mask = seg_mark("mask")
    page = new_page(browser, page_errors, width=1600, height=1000)
    page.goto(plugin_url(gpu_seg_board, f"#run={GPU_SEG_RUN}"))
    rows(page)
    row = (
        page.locator("[data-testid=sites] tbody tr")
        .filter(has_text=f"seg.py:{mask}")
        .filter(has_not_text="IndexBackward0")
    )
    assert row.count() == 1, rows(page)
    row.click()
    page.wait_for_selector("[data-testid=source] .ln.hl")
    frames = page.locator("[data-testid=user-frames]")
    assert frames.get_attribute("data-stack") == "own"
    assert f"sync at line {mask}" in frames.inner_text()
    assert page.locator("[data-testid=forward-stack-note]").count() == 0
    assert page.locator("[data-testid=run-by]").count() == 0
    assert page_errors == []


def test_the_idle_card_says_the_gpu_idle_is_after_the_syncs_not_caused_by_them(
    gpu_seg_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(gpu_seg_board, f"#run={GPU_SEG_RUN}"))
    card = page.wait_for_selector("[data-testid=card-idle]")
    assert card.query_selector(".label").inner_text() == "GPU idle after syncs"
    assert re.search(r"[1-9]", card.query_selector(".value").inner_text())
    title = card.get_attribute("title") or ""
    assert "after" in title and "caused" not in title, title
    assert "caused" not in page.inner_text("[data-testid=card-idle]")
    assert page_errors == []


IN_VIEW = """(testid) => {
  // The header cells of a table that are shown and lie inside its wrapper's visible part.
  const table = document.querySelector(`[data-testid=${testid}]`);
  const wrap = table.closest(".sa-table-wrap");
  const box = wrap.getBoundingClientRect();
  return {
    scrolls: wrap.scrollWidth > wrap.clientWidth,
    shown: [...table.querySelectorAll("thead th")]
      .filter(th => th.offsetParent !== null && th.getBoundingClientRect().right <= box.right + 0.5)
      .map(th => (th.querySelector("button") || th).textContent),
  };
}"""


def test_at_800_px_the_costs_and_the_compare_verdict_stay_in_view(
    gpu_seg_board: str, browser: Any, page_errors: list[str]
) -> None:
    # The demo's operator chains are long (autograd::engine::evaluate_function: ...).
    page = new_page(browser, page_errors, width=800, height=900)
    page.goto(plugin_url(gpu_seg_board, f"#run={GPU_SEG_RUN}"))
    rows(page)
    found = page.evaluate(IN_VIEW, "sites")
    assert not found["scrolls"], found
    for column in ("Location", "Count", "Saves/step", "Host wait", "GPU idle", "Share"):
        assert column in found["shown"], found
    page.goto(
        plugin_url(gpu_seg_board, "#run=gpu_cnn_optimized&view=compare&base=gpu_cnn_baseline")
    )
    page.reload()
    page.wait_for_selector("[data-testid=compare-sites] tbody tr")
    found = page.evaluate(IN_VIEW, "compare-sites")
    assert not found["scrolls"], found
    # Each figure's header with its unit (a line under the label).
    for column in (
        "Status",
        "Location",
        "Cost before per step",
        "Cost after per step",
        "Change per step",
    ):
        assert column in found["shown"], found
    # The change is read whole, not squeezed to a word a line.
    change = page.locator("[data-testid=compare-sites] tbody tr td.col-change").first
    assert change.evaluate("td => td.getBoundingClientRect().width") >= 150
    assert page_errors == []


def test_traces_of_unrelated_jobs_say_so_in_one_line_without_contradictory_counts(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=unrelated_ranks"))
    section = page.wait_for_selector("[data-testid=job]")
    text = section.inner_text()
    assert "come from 2 different jobs" in text and "nothing to compare across ranks" in text, text
    # No "Job: 1 of 2 ranks" beside "missing 0", no empty grid, no rows of zeros.
    assert "1 of 2" not in text and "missing" not in text, text
    for testid in ("job-grid", "job-sites", "job-ranks", "job-missing", "job-issue"):
        assert page.locator(f"[data-testid={testid}]").count() == 0, testid
    rows(page)  # the hotspots of the traces are below, as for any run
    assert page_errors == []


def test_the_span_selector_names_epoch_millisecond_spans_as_date_times(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=two_spans&worker=host_1"))
    page.wait_for_selector("#sa-span")
    options = page.eval_on_selector_all(
        "#sa-span option[value]:not([value=''])",
        "os => os.map(o => [o.value, o.textContent, o.title])",
    )
    assert [value for value, _, _ in options] == ["1700000000000", "1700000100000"], options
    for value, text, title in options:
        # The local date-time, as the page's own clock reads the epoch milliseconds.
        local = page.evaluate(
            """ms => { const d = new Date(ms), p = n => String(n).padStart(2, "0");
              return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} `
                + `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`; }""",
            int(value),
        )
        assert text == local and title == value, (value, text, title)
    # Picking one still selects it by its value.
    page.select_option("#sa-span", "1700000100000")
    page.wait_for_function("location.hash.includes('span=1700000100000')")
    assert page_errors == []


LOCAL_DATE = """ms => { const d = new Date(ms), p = n => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} `
    + `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`; }"""


@pytest.mark.parametrize("view", ["hotspots", "compare"])
def test_an_unreadable_span_is_named_by_its_date_time_as_the_span_selector_names_it(
    board: str, browser: Any, page_errors: list[str], view: str
) -> None:
    page = new_page(browser, page_errors)
    span = "1700000000000"
    compare = "&view=compare&base=baseline" if view == "compare" else ""
    page.goto(plugin_url(board, f"#run=unreadable&worker=worker0&span={span}{compare}"))
    testid = "compare-unreadable" if view == "compare" else "nothing-read"
    said = page.wait_for_selector(f"[data-testid={testid}] h2").inner_text()
    date = page.evaluate(LOCAL_DATE, int(span))
    assert said == f"No trace of span {date} of worker worker0 could be read", said
    assert page.inner_text("#sa-span option:checked") == date
    # The epoch milliseconds stay only in the file's own name, listed with why.
    assert f"worker0.{span}.pt.trace.json.gz: truncated" in page.inner_text("body")
    assert page_errors == []


BUBBLE = """() => {
  const svg = document.querySelector("[data-testid=timeline] svg");
  const band = svg.querySelector("rect.bubble-band");
  const label = [...svg.querySelectorAll("text.band-label.idle")].map(t => t.getBBox())[0];
  const leader = svg.querySelector("line.band-leader");
  return {
    band: band && {x: +band.getAttribute("x"), w: +band.getAttribute("width")},
    label: label && {l: label.x, r: label.x + label.width},
    leader: leader && {x1: +leader.getAttribute("x1"), x2: +leader.getAttribute("x2")},
    width: svg.viewBox.baseVal.width,
  };
}"""


def test_a_short_gpu_bubble_after_a_long_wait_is_drawn_where_its_label_points(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, f"#run=long_wait&{ITEM_SITE}"))
    page.wait_for_selector("[data-testid=timeline] svg text.band-label.idle")
    found = page.evaluate(BUBBLE)
    band, label, leader = found["band"], found["label"], found["leader"]
    # 120 µs beside 150 ms is under a pixel: drawn wide enough to see, inside the drawing.
    assert band["w"] >= 3 and band["x"] + band["w"] <= found["width"], found
    # The label is tied to it by a leader that starts under the label and ends on the band.
    assert leader is not None, found
    assert band["x"] <= leader["x2"] <= band["x"] + band["w"], found
    assert label["l"] - 0.5 <= leader["x1"] <= label["r"] + 0.5, found
    assert page_errors == []


def test_a_malformed_occurrences_page_in_tensorboards_address_is_dropped_from_it(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    keys = f"p.sync_advisor.run=baseline&p.sync_advisor.{ITEM_SITE}"
    page.goto(f"{board}/#sync_advisor&{keys}&p.sync_advisor.occ=abc")
    frame = page.wait_for_selector("iframe", state="attached").content_frame()
    frame.wait_for_selector("[data-testid=occurrences][data-offset='0']")
    # Read as the first page, and neither address keeps the malformed value.
    page.wait_for_function("!location.hash.includes('occ=')")
    assert page.url.endswith(f"#sync_advisor&{keys}"), page.url
    assert "occ=" not in frame.evaluate("location.hash")
    assert page_errors == []


def test_a_missing_source_file_is_said_in_words_without_a_failed_request_in_the_console(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    console_errors: list[str] = []
    page.on(
        "console",
        lambda m: (
            console_errors.append(f"{m.text} {m.location.get('url')}")
            if m.type == "error"
            else None
        ),
    )
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    # The trace names a file (a Windows path) that is not under the source roots.
    page.goto(plugin_url(board, "#run=windows_paths"))
    page.locator("[data-testid=sites] tbody tr").first.click()
    note = page.wait_for_selector("[data-testid=source-note]").inner_text()
    assert f"Cannot show {WINDOWS_FILE}:{TRAIN_STEP_DEF}" in note, note
    assert "not found under the source roots" in note, note
    assert page.locator("[data-testid=source]").count() == 0
    page.wait_for_timeout(300)  # events of the page still on their way
    # Answered, not failed: nothing for the browser to log (a favicon's 404 is not ours).
    assert [f for f in failed if "/source?" in f] == [], failed
    assert [e for e in console_errors if "/source?" in e] == [], console_errors
    assert page_errors == []


def test_the_table_says_which_figures_are_totals_and_what_the_page_cannot_show_per_step(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    """A review read the table's 43 ms "Host wait" beside an 8.9 ms per-step card as a
    contradiction, missed the CLI's warning for a trace without steps, and was told only
    that files "in other runs" could not be read."""
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=baseline"))
    rows(page)
    scopes = page.eval_on_selector_all(
        "[data-testid=sites] thead th",
        "ths => Object.fromEntries(ths.map(th => [th.querySelector('button').dataset.sort,"
        " th.querySelector('.sa-th-scope')?.textContent ?? null]))",
    )
    assert {k for k, v in scopes.items() if v} == {"count", "host_wait_us", "gpu_idle_us"}
    assert set(scopes.values()) == {None, "whole run"}
    titles = page.eval_on_selector_all(
        "[data-testid=sites] thead th button", "bs => bs.map(b => b.title)"
    )
    assert all(titles), titles
    assert page.locator("[data-testid=no-step-markers]").count() == 0
    other = page.inner_text("[data-testid=other-errors]")
    assert '"optimized"' in other and '"unreadable"' in other, other
    page.goto(plugin_url(board, "#run=no_markers"))
    banner = page.wait_for_selector("[data-testid=no-step-markers]")
    assert "counted as one step" in banner.inner_text()
    assert "prof.step()" in banner.inner_text()
    assert page_errors == []


def test_a_row_clicked_on_a_narrow_page_brings_its_detail_into_view(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    """At 900 px the detail is drawn below the table, off the screen: the click seemed to
    do nothing."""
    page = new_page(browser, page_errors, width=900, height=700)
    page.goto(plugin_url(board, "#run=baseline"))
    rows(page)
    page.locator("[data-testid=sites] tbody tr").first.click()
    page.wait_for_selector("[data-testid=advice]")
    page.wait_for_function(
        "document.querySelector('.sa-detail-slot').getBoundingClientRect().top < innerHeight / 2"
    )
    assert page_errors == []


def test_a_switched_run_is_marked_stale_until_its_answers_come(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    """A review switched runs while answers were slow: for seconds the page showed the
    previous run's figures under the new run's name, with nothing saying so."""
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=baseline"))
    rows(page)
    assert page.locator("main.sa-view.sa-stale").count() == 0
    held: list[Any] = []
    page.route("**/sync_advisor/s*run=optimized*", lambda route: held.append(route))
    page.select_option("#sa-run", "optimized")
    page.wait_for_function("document.querySelector('main.sa-view').classList.contains('sa-stale')")
    assert page.get_attribute("main.sa-view", "aria-busy") == "true"
    assert held  # the new run's answers, held meanwhile
    release = list(held)
    page.route("**/sync_advisor/s*run=optimized*", lambda route: route.continue_())
    for route in release:
        route.continue_()
    page.wait_for_function("!document.querySelector('main.sa-view').classList.contains('sa-stale')")
    assert page.get_attribute("main.sa-view", "aria-busy") is None
    assert page_errors == []


def test_compare_of_a_run_with_itself_or_another_gpu_says_what_the_step_times_mean(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    """The compare answer's runs_note (same trace files, or different GPUs) is shown."""
    import json as _json
    import urllib.request

    url = f"{board}/data/plugin/sync_advisor/compare?run=two_spans&base=two_spans"
    with urllib.request.urlopen(url, timeout=30) as response:
        assert "same trace files" in _json.load(response)["runs_note"]
    with urllib.request.urlopen(
        f"{board}/data/plugin/sync_advisor/compare?run=optimized&base=baseline", timeout=30
    ) as response:
        assert _json.load(response)["runs_note"] is None
    assert page_errors == []
