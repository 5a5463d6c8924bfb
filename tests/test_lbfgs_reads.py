"""``torch.optim.LBFGS.step`` decides on the host in every inner iteration whether to go
on (``float(loss)``, ``if ys > 1e-10:``...): pytorch/examples' time_sequence_prediction had
16,835 of its 16,940 latent reads there, each told to "keep the value on the device" or "not
branch on a GPU tensor", which a caller of ``optimizer.step(closure)`` cannot do."""

from __future__ import annotations

import runpy
import textwrap
from pathlib import Path

import pytest

from tb_syncfinder import analyze

torch = pytest.importorskip("torch")

_SCRIPT = textwrap.dedent(
    """\
    import torch

    model = torch.nn.Linear(4, 1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)


    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        print("loss:", loss.item())
        loss.backward()
        return loss


    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for step in range(5):
        optimizer.step(closure)
        prof.step()
    prof.stop()
    """
)


def test_lbfgs_own_reads_are_told_its_iterations_not_the_callers_code(tmp_path: Path) -> None:
    script = tmp_path / "w.py"
    script.write_text(_SCRIPT)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    inside = [s for s in report.latent_sites if s.library and s.library.file.endswith("lbfgs.py")]
    assert inside and all(s.line == 24 for s in inside)
    assert {s.advice["title"] for s in inside} == {
        "LBFGS reads on the host every iteration: run fewer, or on the CPU"
    }
    # The closure's own read, which LBFGS calls, keeps the advice for a user's read.
    [own] = [s for s in report.latent_sites if s.line == 11]
    assert own.advice["title"] == "Keep the value on the device; read it every N steps"
