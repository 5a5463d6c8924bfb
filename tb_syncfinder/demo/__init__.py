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

from tb_syncfinder.demo.runner import RUNS, DemoRun, run_demo

__all__ = ["RUNS", "DemoRun", "run_demo"]
