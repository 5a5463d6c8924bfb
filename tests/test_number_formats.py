"""The CLI's figures read as the dashboard's: one table of cases (format_cases.json) that
this test and the dashboard's (frontend/test/format_cases.test.js) both hold to. Before,
a 23,250 us wait read 23.2 ms in the terminal and 23.3 ms in the browser (a tie rounded to
even against JavaScript's toFixed), and a 0.019 % share 0.0% against <0.1 %."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tb_syncfinder.outputs.text import format_share, format_us

CASES = json.loads((Path(__file__).parent / "format_cases.json").read_text(encoding="utf-8"))


def _as_dashboard_writes(text: str) -> str:
    return text.replace(" us", " µs").replace("%", " %").replace("-", "\u2212")


@pytest.mark.parametrize(("us", "shown"), CASES["us"])
def test_durations_read_as_the_dashboard_shows_them(us, shown):
    assert _as_dashboard_writes(format_us(us)) == shown


@pytest.mark.parametrize(("share", "shown"), CASES["share"])
def test_shares_read_as_the_dashboard_shows_them(share, shown):
    assert _as_dashboard_writes(format_share(share)) == shown


def test_a_tie_rounds_up_and_a_tiny_share_is_never_nothing():
    assert format_us(23_250) == "23.3 ms"
    assert format_us(0.46) == "0.46 us"
    assert format_share(0.00019) == "<0.1%"
    assert format_share(0.741) == "74%"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_figure_that_is_no_number_reads_as_a_dash_as_in_the_dashboard(value):
    """A report JSON may hold NaN (Python's json reads it): compare of one crashed."""
    assert format_us(value) == "-" and format_share(value) == "-"
