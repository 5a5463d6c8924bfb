"""A torch.compile'd function's reads in a real TensorBoard and Chromium: the detail's fix
says a read there is also a graph break (the torch.compile walk: the fixes said nothing of
compiled code)."""

from __future__ import annotations

from typing import Any

from tests.e2e.helpers import new_page, plugin_url, rows, serve_tensorboard, skip_without_browser
from tests.test_torch_cpu_shapes import COMPILED, _load

skip_without_browser()


def test_the_fix_of_a_read_in_compiled_code_says_it_breaks_the_graph(
    tmp_path: Any, browser: Any, page_errors: list[str]
) -> None:
    path = tmp_path / "compiled_e2e.py"
    path.write_text(COMPILED)
    _load(path, "compiled_e2e").main(str(tmp_path / "logs" / "run"))
    with serve_tensorboard(tmp_path / "logs", cwd=tmp_path, expected_runs={"run"}) as base:
        page = new_page(browser, page_errors)
        page.goto(plugin_url(base, "#run=run"))
        assert len(rows(page)) == 2
        page.locator("[data-testid=sites] tbody tr").first.click()
        note = page.wait_for_selector("[data-testid=detail] [data-testid=compiled-code]")
        assert note.inner_text() == (
            "In torch.compile'd code this read also breaks the graph: the fix joins the graphs "
            "around this line."
        )
    assert page_errors == []
