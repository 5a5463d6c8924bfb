"""Record a long CPU run with Python stacks: a real torch profile of a small training loop.

    python bench/record_long_stack_run.py STEPS OUT_DIR

Each step runs a linear layer, its backward, an SGD step and ``loss.item()``, profiled with
``with_stack=True`` for STEPS active steps (200 steps: 14 MB of JSON; 1,600: 115 MB). With
stacks, ``ProfilerStep#N`` begins inside the Python frames that enter it and outlives them:
the shape that made chain walks grow with the run (docs/performance.md, "Long runs recorded
with stacks"). Time a report of it with ``/usr/bin/time tb-syncfinder report TRACE``.
"""

from __future__ import annotations

import sys


def main(steps: int, out: str) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)

    def train_step() -> float:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
        on_trace_ready=tensorboard_trace_handler(out),
        with_stack=True,
    ) as prof:
        for _ in range(steps + 2):
            train_step()
            prof.step()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
