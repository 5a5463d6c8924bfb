"""The Sync Advisor tab while the logdir changes under an open page: runs removed and added
while TensorBoard runs. A TensorBoard of its own (the other modules' logdirs stay as they
are), polling the logdir every second; the page is asked to poll the plugin at once by a
window focus event, as when the user comes back from the terminal that changed the folder.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.fixture_traces import ITEM_LINE, TRAIN_PY, write_run
from tests.e2e.helpers import (
    get_json,
    new_page,
    plugin_url,
    rows,
    serve_tensorboard,
    skip_without_browser,
    wait_drawn,
)

skip_without_browser()

ITEM_SITE = f"site=train.py%3A{ITEM_LINE}%3Aaten%3A%3Aitem"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A TensorBoard on a logdir the tests change; yields its URL and the logdir."""
    root = tmp_path_factory.mktemp("live")
    (root / "train.py").write_text(TRAIN_PY, encoding="utf-8")
    logdir = root / "logs"
    for run in ("doomed", "kept", "run1", "run10"):
        write_run(logdir, run, item=True, nonzero=run != "kept", steps=2)
    expected = {"doomed", "kept", "run1", "run10"}
    with serve_tensorboard(logdir, cwd=root, expected_runs=expected) as base:
        yield base, logdir


def poll_until(page: Any, selector: str) -> Any:
    """Ask the page to poll the plugin (a focus event) until ``selector`` shows."""
    for _ in range(60):
        page.evaluate("window.dispatchEvent(new Event('focus'))")
        found = page.query_selector(selector)
        if found is not None:
            return found
        page.wait_for_timeout(500)
    raise AssertionError(f"{selector} never showed")


def test_deleting_the_shown_runs_folder_says_so_and_opens_nothing_of_it_in_another_run(
    live: tuple[str, Path], browser: Any, page_errors: list[str]
) -> None:
    base, logdir = live
    page = new_page(browser, page_errors)
    page.goto(plugin_url(base, f"#run=doomed&{ITEM_SITE}"))
    page.wait_for_selector("[data-testid=source] .ln.hl")
    # The polite live region the notice will be written into is in the page already, empty:
    # a screen reader reads the notice when it comes (not one inserted holding its text).
    region = page.wait_for_selector("[data-testid=notices][role=status]", state="attached")
    assert region.inner_text() == ""
    shutil.rmtree(logdir / "doomed")
    notice = poll_until(page, "[data-testid=missing-run]")
    assert 'Run "doomed" is not in the logdir any more' in notice.inner_text()
    assert region.evaluate("(region, notice) => region.contains(notice)", notice)
    shown = page.input_value("#sa-run")
    assert shown != "doomed"
    assert f'showing run "{shown}" instead' in notice.inner_text()
    # The deleted run's view, its detail with it, stays until the run shown now is drawn.
    wait_drawn(page)
    rows(page)
    # The same site key exists in the run shown now: its detail is not opened there.
    assert page.evaluate("location.hash") == f"#run={shown}"
    assert page.locator("[data-testid=detail]").count() == 0
    assert page_errors == []


def test_a_run_added_while_tensorboard_runs_is_listed_where_its_name_sorts(
    live: tuple[str, Path], browser: Any, page_errors: list[str]
) -> None:
    base, logdir = live
    page = new_page(browser, page_errors)
    page.goto(plugin_url(base, "#run=kept"))
    rows(page)
    write_run(logdir, "run2", item=True, nonzero=False, steps=2)
    poll_until(page, "#sa-run option[value=run2]:not([disabled])")
    options = page.eval_on_selector_all("#sa-run option", "os => os.map(o => o.value)")
    # As TensorBoard sorts runs: numbers in names by value ("doomed" may be gone already).
    assert [o for o in options if o != "doomed"] == ["kept", "run1", "run2", "run10"], options
    assert page_errors == []


def test_the_run_opened_by_default_stays_when_a_run_sorting_first_is_added(
    live: tuple[str, Path], browser: Any, page_errors: list[str]
) -> None:
    """Opened without a run, the dashboard picks one; a run added later whose name sorts
    first took the view over at the next poll (its site detail showing "unknown"), and a
    link copied before opened the other run."""
    base, logdir = live
    page = new_page(browser, page_errors)
    page.goto(plugin_url(base))
    rows(page)
    shown = page.input_value("#sa-run")
    page.wait_for_function(f"location.hash.includes('run={shown}')")
    page.locator("[data-testid=sites] tbody tr").first.click()
    page.wait_for_selector("[data-testid=detail] h2")
    write_run(logdir, "aaa_added", item=True, nonzero=True, steps=2)
    poll_until(page, "#sa-run option[value=aaa_added]:not([disabled])")
    page.evaluate("window.dispatchEvent(new Event('focus'))")
    page.wait_for_timeout(1000)
    assert page.input_value("#sa-run") == shown
    assert f"run={shown}" in page.evaluate("location.hash")
    assert "unknown" not in page.inner_text("[data-testid=detail] h2")
    assert page_errors == []


def test_a_step_bar_clicked_with_a_site_open_never_calls_the_site_missing(
    live: tuple[str, Path], browser: Any, page_errors: list[str]
) -> None:
    """The bar of step 1 selects its span, where the open site (span 2's) never synced: the
    detail closes, without the notice a link to a missing site gets (a review read "Site ...
    in step 1 is not in run", after its own click)."""
    base, logdir = live
    write_run(logdir, "mixed", item=True, nonzero=False, steps=2, worker="w", span="1")
    write_run(
        logdir, "mixed", item=False, nonzero=True, steps=2, first_step=3, worker="w", span="2"
    )
    page = new_page(browser, page_errors)
    page.goto(plugin_url(base, "#run=kept"))
    rows(page)
    poll_until(page, "#sa-run option[value=mixed]:not([disabled])")
    page.select_option("#sa-run", "mixed")
    page.locator("[data-testid=sites] tbody tr", has_text="nonzero").first.click()
    page.wait_for_selector("[data-testid=detail] h2")
    page.click(".sa-chart g.step[data-step='1']")
    page.wait_for_selector("[data-testid=step-filter]")
    page.wait_for_timeout(500)
    assert page.locator("[data-testid=missing-part]").count() == 0
    assert page.locator("[data-testid=detail]").count() == 0
    assert page.evaluate("location.hash") == "#run=mixed&worker=w&span=1&step=1"
    assert page_errors == []


def test_a_hidden_tab_asks_for_no_runs_until_it_is_shown_again(
    live: tuple[str, Path], browser: Any, page_errors: list[str]
) -> None:
    """The runs list is polled every 10 s; a tab left in the background asked all the same."""
    base, _ = live
    page = new_page(browser, page_errors)
    page.goto(plugin_url(base, "#run=kept"))
    rows(page)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/sync_advisor/runs" in r.url else None)
    seen_as = (
        "Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => '%s'})"
    )
    page.evaluate(seen_as % "hidden")
    page.wait_for_timeout(11_000)  # one idle poll's time and more
    assert asked == []
    page.evaluate(seen_as % "visible")
    # Shown again, it asks at once: waited for as a request (a fixed second was tight for
    # a loaded machine).
    with page.expect_request(lambda r: "/sync_advisor/runs" in r.url, timeout=15_000):
        page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    assert len(asked) >= 1
    assert page_errors == []


def test_a_run_whose_only_trace_is_still_loading_shows_only_the_loading_state(
    live: tuple[str, Path], browser: Any, page_errors: list[str]
) -> None:
    """The plugin's answers while run "kept"'s only trace is being analysed (an empty report
    and "loading"), as a big trace gives for minutes: no zero cards, "no GPU activity" or
    "no Python stacks" conclusions, only the loading state."""
    base, _ = live
    page = new_page(browser, page_errors)

    def loading_runs(route: Any) -> None:
        answer = route.fetch().json()
        answer["loading"] = True
        for run in answer["runs"]:
            if run["name"] == "kept":
                run["loading"] = True
        route.fulfill(json=answer)

    def empty_summary(route: Any) -> None:
        answer = route.fetch().json()
        if "run=kept" in route.request.url:
            answer.update(
                loading=True, traces=[], summary={}, has_gpu_activity=False, has_stacks=False
            )
            answer["device"] = "unknown"
        route.fulfill(json=answer)

    page.route("**/data/plugin/sync_advisor/runs*", loading_runs)
    page.route("**/data/plugin/sync_advisor/summary*", empty_summary)
    page.goto(plugin_url(base, "#run=kept"))
    page.wait_for_selector("[data-testid=run-first-loading]")
    banner = page.inner_text("[data-testid=loading]")
    assert "Analysing traces: kept. Runs appear as they finish." in banner
    for part in ("no-gpu", "no-stacks", "no-syncs", "run-loading", "sites"):
        assert page.locator(f"[data-testid={part}]").count() == 0, part
    assert page.locator("[data-testid^=card-]").count() == 0
    assert "Latent" not in page.inner_text("body")
    assert page_errors == []


def test_a_prediction_without_the_profiler_is_asked_again_once_its_trace_changed(
    live: tuple[str, Path], browser: Any, page_errors: list[str]
) -> None:
    """The tab keeps the ``unprofiled`` answers it got; one for a trace since replaced (the
    run's generation moved) is the old trace's, and is asked for again."""
    import time

    base, logdir = live
    write_run(logdir, "unprof_live", item=True, nonzero=True, steps=3)
    # Analysed before the page opens: a link naming a run not listed yet shows another run,
    # without the step time (it is the named run's).
    for _ in range(120):
        runs = get_json(f"{base}/data/plugin/sync_advisor/runs")["runs"]
        if any(r["name"] == "unprof_live" and not r["loading"] for r in runs):
            break
        time.sleep(0.25)
    else:
        raise AssertionError(f"unprof_live never analysed: {runs}")
    page = new_page(browser, page_errors)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/unprofiled?" in r.url else None)
    page.goto(plugin_url(base, "#run=unprof_live&unprof=2.5"))
    poll_until(page, "[data-testid=unprofiled-text], [data-testid=unprofiled-error]")
    assert len(asked) == 1, asked
    # The trace is written again (another recording, one sync fewer): a newer mtime.
    time.sleep(1.1)
    write_run(logdir, "unprof_live", item=True, nonzero=False, steps=3)
    for _ in range(60):
        page.evaluate("window.dispatchEvent(new Event('focus'))")
        if len(asked) > 1:
            break
        page.wait_for_timeout(500)
    assert len(asked) == 2, asked
    poll_until(page, "[data-testid=unprofiled-text], [data-testid=unprofiled-error]")
    assert page_errors == []
