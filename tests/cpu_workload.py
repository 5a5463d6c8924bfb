"""The small real-torch CPU workload the plugin tests profile: one ``.item()`` and one
``nonzero`` per step, written under a source root so the stack frames name it."""

from __future__ import annotations

import runpy
from pathlib import Path

WORKLOAD = """\
import torch


def train_step(x):
    y = x @ x
    keep = torch.nonzero(y > 0)
    return y.sum().item() + keep.shape[0]


def main(trace_path, steps=3):
    x = torch.randn(16, 16)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps),
        on_trace_ready=lambda prof: prof.export_chrome_trace(trace_path),
    ) as prof:
        for _ in range(steps + 1):
            train_step(x)
            prof.step()
"""
ITEM_LINE = 7
NONZERO_LINE = 6


def profile_workload(source: str, source_file: Path, trace_path: Path) -> None:
    """Profile ``source`` (written to ``source_file``) with real torch into ``trace_path``
    (the test is skipped where torch is not installed)."""
    import pytest

    pytest.importorskip("torch")
    source_file.parent.mkdir(parents=True, exist_ok=True)
    source_file.write_text(source)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    runpy.run_path(str(source_file))["main"](str(trace_path))
