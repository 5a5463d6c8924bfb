"""A ``%``-format with several numeric conversions reads each value that is a tensor, with no
call frame: ``"%d + %d = %d" % (a[i], b[i], c[i])`` (minGPT's adder prints its mistakes so)
is three reads on one line. The model of the source had one read per ``%``, so the trace's
reads did not fit it, and every read of the function was left at a starred line."""

from __future__ import annotations

import runpy
import textwrap

import pytest

from tb_syncfinder import analyze

torch = pytest.importorskip("torch")

_SCRIPT = textwrap.dedent(
    """\
    import torch

    x = torch.randn(4, device="cpu")  # where a GPU run puts it
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for step in range(5):
        y = x * 2
        print("%d + %d (%s, 100%%)" % (y[0], y[1], "ok"))
        z = int(y[2])
        prof.step()
    prof.stop()
    """
)


def test_each_numeric_conversion_of_a_percent_format_is_a_read_on_its_line(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(_SCRIPT)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    assert sorted((s.line, s.line_exact, s.count) for s in report.latent_sites) == [
        (13, True, 6),
        (14, True, 3),
    ]
