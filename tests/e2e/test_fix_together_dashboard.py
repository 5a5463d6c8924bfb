"""The dashboard on a run whose two read-backs wait for the same kernel (each alone saves
little, both together much: the site detail names the other site), recorded with so many
host events per step that the profiler's own overhead is a large share of the step (the
hotspots say so, beside how the saving was obtained, once)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.fixture_traces import TraceWriter
from tests.e2e.helpers import new_page, plugin_url, serve_tensorboard, skip_without_browser

skip_without_browser()

# The workload the trace claims to profile: the call lines are found in it.
METRICS_PY = """import torch


def read_predictions(logits):
    return logits.argmax(1).cpu()


def read_tops(logits):
    return logits[:4].max(1).values.tolist()
"""
CPU_DEF, CPU_LINE = 4, 5
TOLIST_DEF, TOLIST_LINE = 8, 9
HOST_OPS = 200  # small operators per step: 700 us of profiler overhead at 3.5 us each


def _write_run(logdir: Path) -> None:
    w = TraceWriter()
    t = 1000.0
    for step in range(1, 5):
        start = t
        frame = w.py("train.py(1): train", t, 0, None)
        for i in range(HOST_OPS):
            w.x("aten::add", "cpu_op", t + 2 * i, 1)
        t += 2 * HOST_OPS + 5
        w.kernel("volta_sgemm_128x64_nn", t, 2000)
        t += 20
        for def_line, func, method in (
            (CPU_DEF, "read_predictions", "cpu"),
            (TOLIST_DEF, "read_tops", "tolist"),
        ):
            caller = w.py(f"metrics.py({def_line}): {func}", t, 0, frame)
            # The copy runs once launched: after the kernel, or at once (the second).
            w.device_free_at = max(w.device_free_at, t + 6)
            t = w.readback(
                "aten::to",
                "aten::_to_copy",
                t + 1,
                caller,
                f"<built-in method {method} of Tensor object at 0x7f00>",
                idle_after=0,
            )
            w.close(caller, t + 1)
            t += 3
        t += 1500  # host work the kernel could have run beside
        w.close(frame, t)
        w.x(f"ProfilerStep#{step}", "user_annotation", start - 1, t - start + 2)
        t += 50
    run_dir = logdir / "together"
    run_dir.mkdir(parents=True)
    (run_dir / "worker0.1700000000000.pt.trace.json").write_text(json.dumps(w.to_json()))


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("together")
    (root / "metrics.py").write_text(METRICS_PY)
    _write_run(root / "logs")
    with serve_tensorboard(root / "logs", cwd=root, expected_runs={"together"}) as base:
        yield base


def test_the_site_detail_names_the_other_site_its_syncs_then_wait_for(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=together"))
    page.wait_for_function("document.querySelectorAll('[data-testid=sites] tbody tr').length === 2")
    page.locator("[data-testid=sites] tbody tr", has_text=f"metrics.py:{CPU_LINE}").click()
    note = page.wait_for_selector("[data-testid=detail-fix-with]").inner_text()
    assert note.startswith("Fixing this alone saves ")
    assert f"the .tolist() at line {TOLIST_LINE} then waits for the same GPU work." in note
    assert "Fixed together they save 1." in note and note.endswith(" ms per step.")
    stats = page.inner_text("[data-testid=site-stats]")
    assert "saves per step once the others are fixed" in stats  # a per-step figure, as beside it
    # The other site names this one.
    page.locator("[data-testid=sites] tbody tr", has_text=f"metrics.py:{TOLIST_LINE}").click()
    page.wait_for_function(
        "(document.querySelector('[data-testid=detail-fix-with]')?.innerText || '')"
        f".includes('the .cpu() at line {CPU_LINE}')"
    )
    assert page_errors == []


def test_the_hotspots_say_the_profilers_overhead_once_beside_the_saving(
    board: str, browser: Any, page_errors: list[str]
) -> None:
    page = new_page(browser, page_errors)
    page.goto(plugin_url(board, "#run=together"))
    note = page.wait_for_selector("[data-testid=profiler-note]").inner_text()
    assert note.startswith("The profiler's own overhead is about ")
    assert "host events per step" in note and "fixing every sync saves at most T - " in note
    how = page.inner_text("[data-testid=saving-how]")
    assert how.startswith("How obtained: predicted by replaying")
    assert "profiler's own overhead" not in how
    assert page_errors == []
