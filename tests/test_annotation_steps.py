"""Runs profiled without ``prof.step()`` but with each step in a ``record_function``: the
spans of that name count as the steps when asked (``report --step-annotation``), and a
trace without markers says which name repeats and how to ask. Before, such a trace was one
step whatever it held: 6.0 reads "per step" for one read in each of six steps."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder import analyze
from tb_syncfinder.cli import main
from tb_syncfinder.engine import Options
from tb_syncfinder.summaries import options_fingerprint

torch = pytest.importorskip("torch")

_SCRIPT = textwrap.dedent(
    """\
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function


    def train_step(x, w):
        loss = (x @ w).relu().sum()
        return loss.item()


    def run(out, names):
        x, w = torch.randn(32, 32), torch.randn(32, 32)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
            for name in names:
                with record_function(name):
                    with record_function("forward"):  # nested: not a step
                        train_step(x, w)
        prof.export_chrome_trace(out)
    """
)


def _record(tmp_path: Path, names: list[str]) -> Path:
    script = tmp_path / "loop.py"
    script.write_text(_SCRIPT)
    scope: dict = {}
    exec(compile(_SCRIPT, str(script), "exec"), scope)
    out = tmp_path / "logs" / "run" / "host_1.1700000000000.pt.trace.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    scope["run"](str(out), names)
    return out


def test_record_function_spans_count_as_steps_when_asked_and_are_hinted_otherwise(tmp_path):
    trace = _record(tmp_path, ["train_step"] * 6)
    plain = analyze(str(trace), source_roots=[str(tmp_path)])
    info = plain.traces[0]
    assert info.step_markers is False and plain.summary.step_count == 1
    assert (info.step_annotation_hint, info.step_annotation_hint_count) == ("train_step", 6)
    assert plain.latent_sites[0].per_step == pytest.approx(6.0)
    assert "--step-annotation train_step" in plain.to_text()

    stepped = analyze(str(trace), source_roots=[str(tmp_path)], step_annotation="train_step")
    info = stepped.traces[0]
    assert info.step_markers is True and info.steps_from_annotation == "train_step"
    assert stepped.summary.step_count == 6 and info.step_annotation_hint is None
    assert stepped.latent_sites[0].per_step == pytest.approx(1.0)
    assert sorted({s.step for s in stepped.latent}) == [0, 1, 2, 3, 4, 5]
    text = stepped.to_text()
    assert "Steps: the spans of record_function('train_step')" in text
    assert "prof.step()" not in text


def test_a_pattern_takes_numbered_names_and_their_numbers(tmp_path):
    trace = _record(tmp_path, [f"step_{n}" for n in range(3, 8)])
    plain = analyze(str(trace), source_roots=[str(tmp_path)])
    assert plain.traces[0].step_annotation_hint == "step_*"
    stepped = analyze(str(trace), source_roots=[str(tmp_path)], step_annotation="step_*")
    assert sorted({s.step for s in stepped.latent}) == [3, 4, 5, 6, 7]
    # A name that matches nothing leaves the trace one step, and says how to ask.
    missed = analyze(str(trace), source_roots=[str(tmp_path)], step_annotation="train_step")
    assert missed.summary.step_count == 1 and missed.traces[0].steps_from_annotation is None
    assert missed.traces[0].step_annotation_hint == "step_*"


def test_profiler_step_markers_win_over_the_annotation(tmp_path):
    b = KinetoTraceBuilder()
    for n in range(4):
        with b.step(n), b.annotation("train_step"):
            item_sync(b)
    trace = b.write(tmp_path / "run" / "w.pt.trace.json")
    report = analyze(str(trace), step_annotation="train_step")
    assert report.summary.step_count == 4 and report.traces[0].steps_from_annotation is None


def test_the_cli_and_the_summaries_take_the_option(tmp_path, capsys):
    trace = _record(tmp_path, ["train_step"] * 4)
    out = tmp_path / "r.json"
    code = main(["report", str(trace), "--step-annotation", "train_step", "-o", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["summary"]["step_count"] == 4
    assert data["traces"][0]["steps_from_annotation"] == "train_step"
    # A summary written with it is not one written without it (and the default's is as
    # before: summaries kept on disk stay valid).
    assert "step_annotation" not in options_fingerprint(Options())
    assert options_fingerprint(Options(step_annotation="train_step"))["step_annotation"] == (
        "train_step"
    )


def test_the_hint_passes_over_torchs_own_annotations_and_an_unmatched_name_is_said(
    tmp_path, capsys
):
    """A loop over a DataLoader: its fetches (``enumerate(DataLoader)#...``) repeat once more
    than the steps, and were hinted as the steps (review)."""
    b = KinetoTraceBuilder()
    fetch = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    for _n in range(8):
        with b.annotation(fetch):
            b.advance(10)
        with b.annotation("train_step"), b.annotation("Optimizer.step#SGD.step"):
            item_sync(b)
    with b.annotation(fetch):
        b.advance(10)
    trace = b.write(tmp_path / "run" / "w.pt.trace.json")
    report = analyze(str(trace))
    assert report.traces[0].step_annotation_hint == "train_step"
    assert report.traces[0].step_annotation_hint_count == 8
    code = main(["report", str(trace), "--step-annotation", "train_stp", "--json"])
    assert code == 0
    err = capsys.readouterr().err
    assert "--step-annotation 'train_stp': no record_function span of that name" in err
    assert "(the names that repeat there: train_step)" in err


def test_a_pattern_matching_several_names_is_said_in_the_report_and_on_stderr(tmp_path, capsys):
    """``'Optimizer.*'`` takes each iteration's ``zero_grad`` and ``step`` spans: two "steps"
    an iteration, and before, not a word of it."""
    b = KinetoTraceBuilder()
    for _n in range(3):
        with b.annotation("Optimizer.zero_grad#SGD.zero_grad"):
            b.advance(5)
        item_sync(b)
        with b.annotation("Optimizer.step#SGD.step"):
            b.advance(5)
    trace = b.write(tmp_path / "run" / "w.pt.trace.json")
    report = analyze(str(trace), step_annotation="Optimizer.*")
    assert report.summary.step_count == 6
    assert report.traces[0].step_annotation_names == [
        "Optimizer.zero_grad#SGD.zero_grad",
        "Optimizer.step#SGD.step",
    ]
    text = " ".join(report.to_text().split())
    assert "it matched 2 names ('Optimizer.zero_grad#SGD.zero_grad'" in text
    one = analyze(str(trace), step_annotation="Optimizer.step*")
    assert one.traces[0].step_annotation_names == ["Optimizer.step#SGD.step"]
    assert "matched" not in one.to_text()

    code = main(["report", str(trace), "--step-annotation", "Optimizer.*", "--json"])
    assert code == 0
    err = capsys.readouterr().err
    assert "--step-annotation 'Optimizer.*' matched 2 record_function names" in err


def test_each_annotation_step_runs_to_the_next_span_so_the_loaders_reads_are_counted(tmp_path):
    """The loader's work between ``record_function("train_step")`` spans: a read there was
    in no step (one of its four calls counted), and its time in no step's."""
    b = KinetoTraceBuilder()
    for _n in range(4):
        with b.annotation("train_step"):
            b.advance(100)
        item_sync(b, stack=[("loader.py", 3, "next_batch")])  # between the spans
        b.advance(400)
    trace = b.write(tmp_path / "run" / "w.pt.trace.json")
    report = analyze(str(trace), step_annotation="train_step")
    assert report.summary.step_count == 4
    # The last span's own end closes the last step: its read after it is in none.
    syncs = report.latent + report.syncs
    assert sorted(s.step for s in syncs if s.step is not None) == [0, 1, 2]
    times = [st.step_time_us for st in sorted(report.steps, key=lambda st: st.step)]
    assert times[0] >= 500 > times[-1], times
