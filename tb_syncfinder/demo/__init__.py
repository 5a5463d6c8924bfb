"""The ``tb-syncfinder demo`` workloads and their profiling driver.

Two classic cases, each as a baseline (with the host-device syncs a GPU user pays for) and
an optimized run (the same math with the syncs removed):

- ``cnn``: a small image classifier whose baseline reads ``loss.item()`` every step and
  loads batches with pageable memory and blocking copies;
- ``seg``: a small per-pixel segmentation model whose baseline loss uses ``torch.nonzero``,
  ``torch.unique`` and a boolean mask.

The workload files are installed with the package (``package_data``), so the source lines
that the Sync Advisor points at resolve for every user. Each line that syncs on a GPU carries
a ``# sync: <what>`` comment; the tests find the expected lines through these markers.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RUNS", "DemoRun", "run_demo"]


def __getattr__(name: str) -> Any:
    # The runner imports torch (seconds): only when asked for, so that the light
    # ``tb_syncfinder.demo.sources`` can be imported by the CLI and the plugin for free.
    if name in __all__:
        from tb_syncfinder.demo import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
