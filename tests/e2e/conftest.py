"""Fixtures of the browser tests (helpers they use are in ``helpers.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.helpers import CHROMIUM, CHROMIUM_ARGS, skip_without_browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium per test module."""
    sync_api = skip_without_browser()
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page_errors() -> list[str]:
    """Uncaught JavaScript errors of the test's pages (``new_page`` appends to it)."""
    return []
