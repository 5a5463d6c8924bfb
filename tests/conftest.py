"""Shared fixtures. Keep this small; announce additions to the other engineers."""

from __future__ import annotations

from pathlib import Path

import pytest

# ../shared next to the repository (real traces, notes); absent in CI: tests using it skip.
SHARED_DIR = Path(__file__).resolve().parents[1].parent / "shared"
REAL_TRACES_DIR = SHARED_DIR / "traces" / "real"


@pytest.fixture
def real_traces_dir() -> Path:
    """The folder of real Kineto traces; skips the test when ../shared is not there."""
    if not REAL_TRACES_DIR.is_dir():
        pytest.skip(f"real traces not available at {REAL_TRACES_DIR}")
    return REAL_TRACES_DIR
