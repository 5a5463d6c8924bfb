"""A library function that reads several tensors, each at its own line (Stable-Baselines3's
``PPO.train`` reads four losses with ``.item()`` at ppo.py:230, 231, 245, 254 and 292): one
user call (``model.learn()``) makes them one site, which named only the first line, exact,
for all of them (65 of the site's 85 reads were elsewhere)."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tb_syncfinder import analyze
from tb_syncfinder.outputs.csv import to_csv
from tb_syncfinder.outputs.text import render_report

torch = pytest.importorskip("torch")


def _record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    packages = tmp_path / "site-packages"
    (packages / "readlib").mkdir(parents=True)
    (packages / "readlib" / "__init__.py").write_text("")
    (packages / "readlib" / "algo.py").write_text(
        textwrap.dedent(
            """\
            def train(model, x):
                loss = model(x).sum()
                a = loss.item()
                b = (loss * 2).item()
                for _ in range(2):
                    c = (loss * 3).item()
                return a + b + c
            """
        )
    )
    (tmp_path / "learn.py").write_text(
        textwrap.dedent(
            """\
            import torch
            from readlib import algo


            def run(out):
                model = torch.nn.Linear(4, 2)
                x = torch.randn(8, 4)
                with torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CPU],
                    with_stack=True,
                    schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                    on_trace_ready=lambda p: p.export_chrome_trace(out),
                ) as prof:
                    for step in range(5):
                        algo.train(model, x)
                        prof.step()
            """
        )
    )
    out = tmp_path / "host_1.1700000000000.pt.trace.json"
    # In a process of its own: torch shortens a frame's path by the ``sys.path`` its
    # profiler first saw in a process (an earlier test's), as a user's run does.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(packages)])}
    subprocess.run(
        [sys.executable, "-c", f"import learn; learn.run({str(out)!r})"],
        env=env,
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    # Where the report runs, ``readlib`` is installed: a library.
    monkeypatch.syspath_prepend(str(packages))
    return out


def test_a_librarys_reads_at_several_lines_are_each_named_with_their_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _record(tmp_path, monkeypatch)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [site] = report.latent_sites
    assert (site.file.rsplit("/", 1)[-1], site.line, site.count) == ("learn.py", 15, 12)
    assert site.library is not None and site.library.func == "train"
    assert [(entry.line, entry.count) for entry in site.library_lines] == [(3, 3), (4, 3), (6, 6)]
    text = render_report(report.to_json(), width=200)
    assert "synced in readlib/algo.py (train) at lines 3 (3), 4 (3), 6 (6)" in text
    [row] = csv.DictReader(io.StringIO(to_csv(report.to_json())))
    assert row["library_lines"] == "3:3 4:3 6:6"
    assert row["library_line"] == "readlib/algo.py:3"


def test_a_package_not_installed_where_the_report_runs_is_said_to_be_maybe_a_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same trace read where ``readlib`` is not installed (a CI job with tb-syncfinder
    alone): its files are taken for the user's, at their recorded lines, and the footnote
    of those lines says what to do if the package is a library."""
    out = _record(tmp_path, monkeypatch)
    monkeypatch.undo()  # readlib off sys.path: not importable here
    report = analyze(str(out), source_roots=[str(tmp_path)])
    assert {s.file for s in report.latent_sites} == {"readlib/algo.py"}
    text = " ".join(render_report(report.to_json(), width=400).split())
    assert "if its package is a library (installed where the trace was recorded, not here)" in text
