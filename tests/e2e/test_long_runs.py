"""Runs of thousands of steps in a real TensorBoard and Chromium: the step chart draws bins of
steps (a few hundred bars whatever the step count) from which any one step can still be
reached, the view's interactions do not draw the chart again, and the detail's occurrences
list pages through every occurrence, one Tab stop with arrow keys between its rows.

The DOM sizes asserted here were, before: 30,175 elements for the 6,000-step run (a <g> and
three rects per step, all rebuilt by every sort, filter, step pick or detail opened)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import (
    contrast,
    get_json,
    new_page,
    plugin_url,
    rows,
    serve_tensorboard,
    skip_without_browser,
    wait_drawn,
)
from tests.kineto_builder import KinetoTraceBuilder, item_sync, mask_index_sync

skip_without_browser()

STEPS = 6000
SPIKE = 4321  # the one step whose .item() waits 50 ms
GROUPED_STEPS = 2600  # per worker, two workers
ITEM_KEY = "train.py:4:aten::item"
ITEM_SITE = "site=" + urllib.parse.quote(ITEM_KEY, safe="")
# Elements in the whole page of the 6,000-step run, detail open (200 occurrence rows): was
# 30,175 before the chart drew bins.
MAX_ELEMENTS = 4000
# Bars the chart draws at most (1280 px page: a plot of about 1,100 px, bars of 4 px or more).
MAX_BARS = 400
COUNT_ELEMENTS = "document.getElementsByTagName('*').length"
CHART = "[data-testid=step-chart]"


def write_long_run(path: Path, steps: int, spike: int | None = None) -> Path:
    """One worker's trace of ``steps`` steps: an ``.item()`` in every step (waiting for a
    kernel of varying length, 50 ms in step ``spike``) and a boolean-mask index in every
    third."""
    b = KinetoTraceBuilder()
    for n in range(1, steps + 1):
        with b.step(n):
            kernel = 50_000.0 if n == spike else 200.0 + (n * 37) % 400
            item_sync(b, stack=[("train.py", 4, "train_step")], kernel_us=kernel)
            if n % 3 == 0:
                b.kernel(dur=100.0 + (n * 13) % 700)
                mask_index_sync(b, n, stack=[("train.py", 13, "select_foreground")])
            b.advance(50)
    return b.write(path)


@pytest.fixture(scope="module")
def long_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("long_runs")
    logdir = root / "logs"
    write_long_run(logdir / "long" / "worker0.pt.trace.json", STEPS, spike=SPIKE)
    for worker in ("hostA_1", "hostB_2"):
        path = logdir / "grouped" / f"{worker}.1700000000000.pt.trace.json"
        write_long_run(path, GROUPED_STEPS, spike=100 if worker == "hostB_2" else None)
    with serve_tensorboard(logdir, cwd=root, expected_runs={"long", "grouped"}) as base:
        yield base


def _count_created_elements(page: Any) -> None:
    """Count the elements the page creates from now on (HTML and SVG apart)."""
    page.evaluate(
        """() => {
          window.__created = { html: 0, svg: 0 };
          if (window.__counting) return;
          window.__counting = true;
          const ce = document.createElement.bind(document);
          const cens = document.createElementNS.bind(document);
          document.createElement = (...a) => { window.__created.html++; return ce(...a); };
          document.createElementNS = (...a) => { window.__created.svg++; return cens(...a); };
        }"""
    )


def _settle(page: Any) -> None:
    """Let a render that is under way finish (its fetches are cached answers)."""
    page.wait_for_timeout(300)
    page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


@pytest.mark.parametrize(
    ("run", "steps", "groups"), [("long", STEPS, 1), ("grouped", 2 * GROUPED_STEPS, 2)]
)
def test_a_long_runs_chart_draws_a_bounded_number_of_bins(
    long_board: str, browser: Any, page_errors: list[str], run: str, steps: int, groups: int
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, f"#run={run}"))
    rows(page)
    chart = page.wait_for_selector(CHART)
    per_bar = int(chart.get_attribute("data-steps-per-bar"))
    assert per_bar > 1
    assert f"{steps:,} steps, {per_bar} per bar" in page.inner_text("[data-testid=steps-per-bar]")
    bars = page.locator(f"{CHART} g.step")
    assert 100 <= bars.count() <= MAX_BARS, bars.count()
    elements = page.evaluate(COUNT_ELEMENTS)
    assert elements < MAX_ELEMENTS - 1000, elements  # no detail open yet
    # Each bar holds consecutive steps of one worker, and together they hold every step.
    spans = page.eval_on_selector_all(
        f"{CHART} g.step",
        "gs => gs.map(g => [g.dataset.worker || '', +g.dataset.first, +g.dataset.last])",
    )
    covered = 0
    for worker in sorted({w for w, _, _ in spans}):
        mine = [(a, b) for w, a, b in spans if w == worker]
        assert mine[0][0] == 1
        assert all(b + 1 == a2 for (_, b), (a2, _) in zip(mine, mine[1:], strict=False))
        covered += mine[-1][1]
    assert covered == steps
    assert int(chart.get_attribute("data-groups")) == groups
    # The bars say what their height is: the costliest step's, and the bin's mean.
    label = bars.first.get_attribute("aria-label")
    assert "costliest step" in label and "mean per step" in label, label
    assert page_errors == []


def test_a_bin_selects_its_costliest_step_and_go_to_step_reaches_any_step(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, "#run=long"))
    rows(page)
    spike = page.locator(f"{CHART} g.step[data-step='{SPIKE}']")
    assert int(spike.get_attribute("data-first")) <= SPIKE <= int(spike.get_attribute("data-last"))
    # The spike keeps its full height in its bin: the tallest bar of the chart.
    tallest = page.eval_on_selector_all(
        f"{CHART} g.step",
        "gs => gs.reduce((m, g) => (+g.querySelector('.bar-wait').getAttribute('height') >"
        " +m.querySelector('.bar-wait').getAttribute('height') ? g : m)).dataset.step",
    )
    assert tallest == str(SPIKE)
    spike.click()
    page.wait_for_selector(f"[data-testid=step-filter]:has-text('step {SPIKE}')")
    assert f"step={SPIKE}" in page.evaluate("location.hash")
    assert spike.get_attribute("aria-pressed") == "true"
    # From the keyboard: the chart is one Tab stop (the selected bin), arrow keys move
    # between bins, Enter selects the bin's costliest step.
    stops = f"{CHART} g.step[tabindex='0']"
    assert page.locator(stops).count() == 1
    assert page.get_attribute(stops, "data-step") == str(SPIKE)
    page.focus(stops)
    page.keyboard.press("Home")
    page.keyboard.press("ArrowRight")
    second = page.evaluate("document.activeElement.dataset")
    page.keyboard.press("Enter")
    page.wait_for_function(f"location.hash.includes('step={second['step']}')")
    assert int(second["first"]) <= int(second["step"]) <= int(second["last"])
    page.wait_for_selector(f"[data-testid=step-filter]:has-text('step {second['step']}')")
    assert page.evaluate("document.activeElement.dataset.step") == second["step"]
    # Any one step by its number: Go to step, with Enter in the box.
    page.fill("[data-testid=goto-step]", "17")
    page.press("[data-testid=goto-step]", "Enter")
    page.wait_for_selector("[data-testid=step-filter]:has-text('step 17')")
    assert "step=17" in page.evaluate("location.hash")
    held = page.locator(f"{CHART} g.step[aria-pressed=true]")
    assert held.count() == 1
    assert int(held.get_attribute("data-first")) <= 17 <= int(held.get_attribute("data-last"))
    page.fill("[data-testid=goto-step]", "99999")
    page.press("[data-testid=goto-step]", "Enter")
    page.wait_for_selector("[data-testid=goto-note]:has-text('No step 99999')")
    assert "step=17" in page.evaluate("location.hash")
    assert page_errors == []


def test_a_bin_of_a_worker_selects_that_workers_step(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, "#run=grouped"))
    rows(page)
    # Each worker counts its own steps from 1: with all workers shown, Go to step picks the
    # first worker's, and selects that worker as a click on its bar does.
    page.fill("[data-testid=goto-step]", "2000")
    page.press("[data-testid=goto-step]", "Enter")
    page.wait_for_function("location.hash.includes('step=2000')")
    assert "worker=hostA_1" in page.evaluate("location.hash")
    page.select_option("#sa-worker", "")
    page.wait_for_function("!location.hash.includes('worker=')")
    wait_drawn(page)  # a click on the chart being replaced would reach neither chart
    # The second worker's bin holding its spike selects that step of that worker.
    page.click(f"{CHART} g.step[data-worker=hostB_2][data-step='100']")
    page.wait_for_function("location.hash.includes('step=100')")
    assert "worker=hostB_2" in page.evaluate("location.hash")
    pressed = page.wait_for_selector(f"{CHART} g.step[aria-pressed=true]")
    assert (
        int(pressed.get_attribute("data-first")) <= 100 <= int(pressed.get_attribute("data-last"))
    )
    assert page_errors == []


def test_sort_filter_step_and_detail_do_not_draw_the_step_chart_again(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, "#run=long"))
    rows(page)
    page.evaluate(f"window.__chart = document.querySelector('{CHART}')")
    same_chart = f"document.querySelector('{CHART}') === window.__chart"

    def interaction(action: Any, done: str) -> dict[str, int]:
        _count_created_elements(page)
        action()
        page.wait_for_function(done)
        _settle(page)
        created = page.evaluate("window.__created")
        assert page.evaluate(same_chart), "the step chart was drawn again"
        elements = page.evaluate(COUNT_ELEMENTS)
        assert elements < MAX_ELEMENTS, elements
        return created

    # Sorting, filtering and picking a step draw no SVG at all; the tables are small.
    sort = interaction(
        lambda: page.click("th button[data-sort=count]"), "location.hash.includes('sort=count')"
    )
    assert sort["svg"] == 0 and sort["html"] < 500, sort
    typed = interaction(
        lambda: page.fill("#sa-q", "item"),
        "document.querySelectorAll('[data-testid=sites] tbody tr').length === 1",
    )
    assert typed["svg"] == 0 and typed["html"] < 500, typed
    step = interaction(
        lambda: page.click(f"{CHART} g.step[data-step='{SPIKE}']"),
        f"location.hash.includes('step={SPIKE}')",
    )
    assert step["svg"] == 0 and step["html"] < 500, step
    page.fill("#sa-q", "")
    page.click("[data-testid=step-filter] button")
    page.wait_for_function("!location.hash.includes('step=')")
    # Opening a detail draws its own timeline and its 200 occurrence rows, not the chart.
    detail = interaction(
        lambda: page.locator("[data-testid=sites] tbody tr").first.click(),
        "!!document.querySelector('[data-testid=occurrences]')",
    )
    assert detail["svg"] < 300 and detail["html"] < 2500, detail
    # Another occurrence: the same.
    other = interaction(
        lambda: page.locator("[data-testid=occurrences] tbody tr").nth(3).click(),
        "document.querySelector('[data-testid=occurrences] tr[aria-current=true]')"
        " === document.querySelectorAll('[data-testid=occurrences] tbody tr')[3]",
    )
    assert other["svg"] < 300 and other["html"] < 2500, other
    assert page_errors == []


def test_the_occurrences_list_pages_through_every_occurrence(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, f"#run=long&sort=count&order=asc&{ITEM_SITE}"))
    page.wait_for_selector("[data-testid=occurrences]")
    order = rows(page)
    occ = "[data-testid=occurrences] tbody tr"
    assert page.inner_text("[data-testid=detail] h3:has-text('Occurrences')") in (
        "Occurrences (6,000)",
        "OCCURRENCES (6,000)",
    )
    assert page.locator(occ).count() == 200
    assert page.inner_text("[data-testid=occ-range]").startswith("1–200 of 6,000")
    assert page.locator("[data-testid=occ-prev]").is_disabled()
    page.click("[data-testid=occ-next]")
    page.wait_for_selector("[data-testid=occurrences][data-offset='200']")
    assert page.locator(occ).first.locator("td").first.inner_text() == "201"
    assert "occ=200" in page.evaluate("location.hash")
    # The pressed button keeps the focus: Enter again goes on.
    assert page.evaluate("document.activeElement.dataset.testid") == "occ-next"
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-testid=occurrences][data-offset='400']")
    page.click("[data-testid=occ-last]")
    page.wait_for_selector("[data-testid=occurrences][data-offset='5800']")
    assert page.inner_text("[data-testid=occ-range]").startswith("5,801–6,000 of 6,000")
    assert page.locator("[data-testid=occ-next]").is_disabled()
    assert page.locator(occ).last.locator("td").first.inner_text() == "6000"
    # The sites table kept its sort.
    assert rows(page) == order
    assert "sort=count&order=asc" in page.evaluate("location.hash")
    # Picking an occurrence on the last page shows it, and a link to it opens it again.
    page.locator(occ).nth(150).click()
    page.wait_for_selector(f"{occ}:nth-child(151)[aria-current=true]")
    assert "5951" in page.inner_text("[data-testid=chain]")
    link = page.evaluate("location.href")
    assert "occ=5800" in link
    again = new_page(browser, page_errors)
    again.goto(link)
    last_page = "[data-testid=occurrences][data-offset='5800']"
    again.wait_for_selector(f"{last_page} tbody tr[aria-current=true]")
    assert "5951" in again.inner_text("[data-testid=chain]")
    # Going back to the first page keeps the occurrence shown in the detail above.
    again.click("[data-testid=occ-first]")
    again.wait_for_selector("[data-testid=occurrences][data-offset='0']")
    assert "5951" in again.inner_text("[data-testid=chain]")
    assert again.locator(f"{occ}[aria-current=true]").count() == 0
    assert page_errors == []


def test_the_occurrences_are_one_tab_stop_with_arrow_keys_between_rows(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, f"#run=long&{ITEM_SITE}"))
    page.wait_for_selector("[data-testid=occurrences]")
    occ = "[data-testid=occurrences] tbody tr"
    stops = f"{occ}[tabindex='0']"
    assert page.locator(stops).count() == 1
    page.focus(stops)
    first = page.evaluate("document.activeElement.dataset.sync")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    third = page.evaluate("document.activeElement.dataset.sync")
    assert third != first
    assert page.locator(occ).nth(2).get_attribute("data-sync") == third
    page.keyboard.press("Enter")
    page.wait_for_function(f"location.hash.includes('sync={third}')")
    page.wait_for_selector(f"{occ}[data-sync='{third}'][aria-current=true]")
    # After the redraw the row shown is the list's one Tab stop, and focused.
    page.wait_for_function(f"document.activeElement.dataset.sync === '{third}'")
    assert page.locator(stops).count() == 1
    page.keyboard.press("End")
    assert page.evaluate("document.activeElement.dataset.sync") == page.locator(
        occ
    ).last.get_attribute("data-sync")
    page.keyboard.press(" ")
    page.wait_for_function("document.activeElement.closest('tr[aria-current=true]') !== null")
    # Tab leaves the list rather than walking its rows.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('[data-testid=occurrences]') === null")
    # Escape still closes the detail.
    page.focus(stops)
    page.keyboard.press("Escape")
    page.wait_for_function("!document.querySelector('[data-testid=detail]')")
    assert page_errors == []


def test_each_workers_axis_labels_count_from_its_own_first_step(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, "#run=grouped"))
    rows(page)
    # Both groups' first bar is labelled 1, and every label is its bar's first step.
    labels = page.eval_on_selector_all(
        f"{CHART} g.step",
        "gs => gs.filter(g => g.querySelector('text')).map(g => [g.dataset.worker,"
        " g.querySelector('text').textContent, g.dataset.first])",
    )
    for worker in ("hostA_1", "hostB_2"):
        mine = [(label, first) for w, label, first in labels if w == worker]
        assert mine[0] == ("1", "1"), (worker, mine[:3])
        assert all(label == first for label, first in mine), mine
    assert page_errors == []


def test_enter_on_a_workers_bin_keeps_the_focus_on_the_bar_holding_the_step(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, "#run=grouped"))
    rows(page)
    # Enter on a bin of the second worker: the chart is drawn again for that worker alone,
    # in other bins, and the focus is on the bar holding the selected step.
    page.focus(f"{CHART} g.step[tabindex='0']")
    page.keyboard.press("End")
    page.keyboard.press("ArrowLeft")
    step = page.evaluate("document.activeElement.dataset.step")
    page.keyboard.press("Enter")
    page.wait_for_function(f"location.hash.includes('step={step}')")
    assert "worker=hostB_2" in page.evaluate("location.hash")
    wait_drawn(page)  # the whole run's chart, no bar pressed, stays until then
    _settle(page)
    held = page.evaluate(
        "(() => { const g = document.activeElement.closest('g.step');"
        " return g && [g.getAttribute('aria-pressed'), +g.dataset.first, +g.dataset.last]; })()"
    )
    assert held and held[0] == "true" and held[1] <= int(step) <= held[2], held
    page.keyboard.press("ArrowRight")
    assert page.evaluate("+document.activeElement.dataset.first") == held[2] + 1
    assert page_errors == []


def test_the_selected_bins_label_says_enter_clears_the_step_filter(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, f"#run=long&step={SPIKE}"))
    rows(page)
    selected = page.locator(f"{CHART} g.step[aria-pressed=true]")
    label = selected.get_attribute("aria-label")
    assert "Enter clears the step filter" in label and "Enter selects" not in label, label
    title = selected.locator("title").text_content()
    assert "click clears the step filter" in title and "click selects" not in title, title
    # Cleared: the bar offers its step again.
    page.click("[data-focus-key=clear-step]")
    page.wait_for_function("!location.hash.includes('step=')")
    _settle(page)
    # The chart is drawn again after the hash changes: wait for the bar's new label (a CI
    # run under load read the old one once) rather than read it at once.
    bar = f"{CHART} g.step[data-step='{SPIKE}']"
    try:
        page.wait_for_function(
            "([sel, want]) => (document.querySelector(sel)?.getAttribute('aria-label') || '')"
            ".includes(want)",
            arg=[bar, f"Enter selects step {SPIKE}"],
            timeout=10_000,
        )
    except Exception:  # noqa: BLE001 - the label it had, in the failure
        raise AssertionError(page.get_attribute(bar, "aria-label")) from None
    assert page_errors == []


@pytest.mark.parametrize("dark", [False, True])
def test_the_selected_bin_is_marked_in_a_colour_that_stands_out(
    long_board: str, browser: Any, page_errors: list[str], dark: bool
) -> None:
    page = new_page(browser, page_errors, dark=dark)
    page.goto(plugin_url(long_board, f"#run=long&step={SPIKE}"))
    rows(page)
    pressed = page.locator(f"{CHART} g.step[aria-pressed=true] rect.band")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    # The band's outline stands out against the background (3:1, non-text contrast)...
    stroke = pressed.evaluate("b => getComputedStyle(b).stroke")
    assert stroke != "none" and contrast(stroke, background) >= 3, (stroke, background)
    # ...and so does a mark under the axis, centred under the selected bar.
    mark = page.wait_for_selector(f"{CHART} [data-testid=selected-mark]:not([display])")
    fill = mark.evaluate("m => getComputedStyle(m).fill")
    assert contrast(fill, background) >= 3, (fill, background)
    band = pressed.bounding_box()
    box = mark.bounding_box()
    assert box and band and box["width"] >= 4 and box["height"] >= 3
    assert abs((box["x"] + box["width"] / 2) - (band["x"] + band["width"] / 2)) < 1
    assert page_errors == []


def test_go_to_steps_note_and_number_clear_when_another_step_is_selected(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, f"#run=long&step={SPIKE}"))
    rows(page)
    page.fill("[data-testid=goto-step]", "99999")
    page.press("[data-testid=goto-step]", "Enter")
    page.wait_for_selector("[data-testid=goto-note]:has-text('No step 99999')")
    page.click(f"{CHART} g.step:not([aria-pressed=true]) >> nth=3")
    page.wait_for_function(f"!location.hash.includes('step={SPIKE}')")
    _settle(page)
    assert page.inner_text("[data-testid=goto-note]") == ""
    assert page.input_value("[data-testid=goto-step]") == ""
    # A step reached by Go to step keeps its number in the box.
    page.fill("[data-testid=goto-step]", "17")
    page.press("[data-testid=goto-step]", "Enter")
    page.wait_for_function("location.hash.includes('step=17')")
    _settle(page)
    assert page.input_value("[data-testid=goto-step]") == "17"
    assert page_errors == []


def test_the_step_chips_clear_button_leaves_the_focus_in_the_chart(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, f"#run=long&step={SPIKE}"))
    rows(page)
    page.focus("[data-focus-key=clear-step]")
    page.keyboard.press("Enter")
    page.wait_for_function("!location.hash.includes('step=')")
    _settle(page)
    assert page.evaluate("document.activeElement.dataset.step") == str(SPIKE)
    assert page.locator(f"{CHART} [data-testid=selected-mark][display=none]").count() == 1
    assert page_errors == []


@pytest.mark.parametrize(
    ("occ", "shown"),
    [("abc", None), ("-5", None), ("250", "200"), ("999999", "5800"), ("99999999999", "5800")],
)
def test_a_malformed_occurrences_page_in_the_url_is_put_right_in_the_url_too(
    long_board: str, browser: Any, page_errors: list[str], occ: str, shown: str | None
) -> None:
    # Not a number, negative, inside a page, past the end: the list shows a page that is
    # there, and the URL names that page (none for the first), not what the link said.
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, f"#run=long&{ITEM_SITE}&occ={occ}"))
    page.wait_for_selector(f"[data-testid=occurrences][data-offset='{shown or 0}']")
    want = f"#run=long&{ITEM_SITE}" + (f"&occ={shown}" if shown else "")
    page.wait_for_function("want => location.hash === want", arg=want)
    assert page_errors == []


IN_LIST = """() => {
  const list = document.querySelector('.sa-occ');
  const row = list.querySelector('tbody tr[aria-current=true]');
  const head = list.querySelector('thead').getBoundingClientRect();
  const box = list.getBoundingClientRect();
  const r = row.getBoundingClientRect();
  return {
    inView: r.top >= head.bottom - 0.5 && r.bottom <= box.bottom + 0.5,
    listScrolled: list.scrollTop > 0,
    pageScroll: [scrollX, scrollY],
    panelScroll: document.querySelector('.sa-detail-slot').scrollTop,
    focus: document.activeElement === document.body,
  };
}"""


def test_a_link_naming_an_occurrence_opens_with_its_row_in_view_in_the_list(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    # The 151st occurrence of the last page, far below the list's 180 px.
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, f"#run=long&{ITEM_SITE}&occ=5800"))
    page.wait_for_selector("[data-testid=occurrences][data-offset='5800']")
    sync = page.locator("[data-testid=occurrences] tbody tr").nth(150).get_attribute("data-sync")
    shared = new_page(browser, page_errors)
    shared.goto(plugin_url(long_board, f"#run=long&{ITEM_SITE}&sync={sync}&occ=5800"))
    shared.wait_for_selector(f"[data-testid=occurrences] tr[data-sync='{sync}'][aria-current=true]")
    _settle(shared)
    found = shared.evaluate(IN_LIST)
    # The list scrolled to the row (below its sticky header), and nothing else moved: not
    # the page, not the detail panel, not the focus.
    assert found["inView"] and found["listScrolled"], found
    assert found["pageScroll"] == [0, 0] and found["panelScroll"] == 0, found
    assert found["focus"], found
    # The row is the list's Tab stop: Tab into the list lands on it.
    assert shared.get_attribute(f"tr[data-sync='{sync}']", "tabindex") == "0"
    assert page_errors == []


def _host_waits(base: str, run: str, site: str) -> dict[str, float]:
    """Every occurrence of a site and its host wait, as the plugin lists them (in pages)."""
    waits: dict[str, float] = {}
    offset = 0
    while True:
        query = urllib.parse.urlencode({"run": run, "site": site, "offset": offset, "limit": 500})
        page = get_json(f"{base}/data/plugin/sync_advisor/syncs?{query}")
        waits.update((s["id"], s["host_wait_us"]) for s in page["items"])
        offset += 500
        if offset >= page["total"]:
            return waits


def test_the_occurrences_list_in_the_order_of_the_longest_host_wait_and_a_link_to_it(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, f"#run=long&{ITEM_SITE}&occ=400"))
    page.wait_for_selector("[data-testid=occurrences][data-offset='400']")
    occ = "[data-testid=occurrences] tbody tr"
    # None named: the detail shows the first occurrence of the page listed.
    shown_id = page.get_attribute(f"{occ}[aria-current=true]", "data-sync")
    # A labelled select, as they ran until another order is picked.
    order = page.get_by_role("combobox", name="Order of the occurrences")
    assert order.input_value() == ""
    assert order.locator("option").all_inner_texts() == [
        "as they ran",
        "largest saving",
        "longest host wait",
        "longest GPU idle after",
    ]
    # From the keyboard: two down from "as they ran" (each a change: the last one listed).
    order.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    # Another order starts at the first page, and the URL says both.
    page.wait_for_selector("[data-testid=occurrences][data-order=host_wait_us][data-offset='0']")
    # The detail still shows the occurrence it showed (the first as they ran), now named.
    page.wait_for_function(
        "want => location.hash === want",
        arg=f"#run=long&{ITEM_SITE}&sync={shown_id}&osort=host_wait_us",
    )
    assert page.evaluate("document.activeElement.id") == "sa-osort"
    assert page.inner_text("[data-testid=occ-range]") == ("1–200 of 6,000, longest host wait first")
    # The first page is the 200 longest waits of all 6,000, longest first: the spike first.
    waits = _host_waits(long_board, "long", ITEM_KEY)
    assert len(waits) == STEPS
    first = page.eval_on_selector_all(occ, "rows => rows.map(r => r.dataset.sync)")
    shown = [waits[i] for i in first]
    assert len(shown) == 200 and shown == sorted(waits.values(), reverse=True)[:200]
    assert page.locator(occ).first.locator("td").first.inner_text() == str(SPIKE)
    assert page.get_attribute("[data-testid=occurrences] th[aria-sort]", "title") == "host wait"
    # The next page goes on in that order.
    page.click("[data-testid=occ-next]")
    page.wait_for_selector("[data-testid=occurrences][data-order=host_wait_us][data-offset='200']")
    second = page.eval_on_selector_all(occ, "rows => rows.map(r => r.dataset.sync)")
    assert [waits[i] for i in second] == sorted(waits.values(), reverse=True)[200:400]
    assert "osort=host_wait_us&occ=200" in page.evaluate("location.hash")
    # An occurrence picked on it: a link (and a reload) opens the same order, page and
    # occurrence, its row in view in the list.
    page.locator(occ).nth(150).click()
    picked = second[150]
    page.wait_for_function(f"location.hash.includes('sync={picked}')")
    link = page.evaluate("location.href")
    assert "osort=host_wait_us" in link and "occ=200" in link
    again = new_page(browser, page_errors)
    for opened in (again, page):
        if opened is again:
            again.goto(link)
        else:
            page.reload()
        opened.wait_for_selector(
            "[data-testid=occurrences][data-order=host_wait_us][data-offset='200']"
            f" tr[data-sync='{picked}'][aria-current=true]"
        )
        assert opened.evaluate("location.href") == link
        assert opened.get_by_role("combobox", name="Order of the occurrences").input_value() == (
            "host_wait_us"
        )
        assert opened.eval_on_selector_all(occ, "rows => rows.map(r => r.dataset.sync)") == second
        _settle(opened)
        found = opened.evaluate(IN_LIST)
        assert found["inView"] and found["listScrolled"], found
        assert opened.get_attribute(f"tr[data-sync='{picked}']", "tabindex") == "0"
    # As they ran again: the first page in the order they ran, no osort in the URL.
    page.get_by_role("combobox", name="Order of the occurrences").select_option("")
    page.wait_for_selector("[data-testid=occurrences]:not([data-order])[data-offset='0']")
    assert page.locator(occ).first.locator("td").first.inner_text() == "1"
    assert "osort=" not in page.evaluate("location.hash")
    assert "occ=" not in page.evaluate("location.hash")
    assert page_errors == []


def test_paging_or_ordering_the_occurrences_keeps_the_one_shown_and_names_it_in_the_url(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    """With no occurrence named, a reload shows the first one listed: another page or order
    keeps the detail on the one shown and names it in the URL, so that a reload shows it."""
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, f"#run=long&{ITEM_SITE}"))
    occ = "[data-testid=occurrences] tbody tr"
    page.wait_for_selector("[data-testid=occurrences][data-offset='0'] tr[aria-current=true]")
    shown = page.get_attribute(f"{occ}[aria-current=true]", "data-sync")
    chain = page.inner_text("[data-testid=chain]")
    assert "sync=" not in page.evaluate("location.hash")
    page.click("[data-testid=occ-next]")
    page.wait_for_selector("[data-testid=occurrences][data-offset='200']")
    assert page.evaluate("location.hash") == f"#run=long&{ITEM_SITE}&sync={shown}&occ=200"
    assert page.evaluate("document.activeElement.dataset.testid") == "occ-next"
    assert page.locator("[data-testid=occurrences] tbody tr[tabindex='0']").count() == 1
    for step in ("page", "order"):
        if step == "order":
            page.get_by_role("combobox", name="Order of the occurrences").select_option(
                "host_wait_us"
            )
            page.wait_for_selector(
                "[data-testid=occurrences][data-order=host_wait_us][data-offset='0']"
            )
            assert page.evaluate("location.hash") == (
                f"#run=long&{ITEM_SITE}&sync={shown}&osort=host_wait_us"
            )
        assert page.inner_text("[data-testid=chain]") == chain
        link = page.evaluate("location.href")
        page.reload()
        page.wait_for_selector("[data-testid=occurrences]")
        page.wait_for_function("want => location.href === want", arg=link)
        assert page.inner_text("[data-testid=chain]") == chain
    assert page_errors == []


def test_an_unknown_occurrences_order_in_the_url_is_dropped_from_it(
    long_board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(long_board, f"#run=long&{ITEM_SITE}&osort=bogus&occ=200"))
    page.wait_for_selector("[data-testid=occurrences]:not([data-order])[data-offset='200']")
    page.wait_for_function("want => location.hash === want", arg=f"#run=long&{ITEM_SITE}&occ=200")
    assert page.locator("[data-testid=occ-sort]").input_value() == ""
    assert page_errors == []
