"""``tb-syncfinder compare`` on the H100 baseline / fix pairs in ``tests/gpu_pairs`` (real
traces with stacks, and the version of ``savings_workloads.py`` each ran beside them): what
a user reads after fixing some or all of a program's syncs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tb_syncfinder.cli import main

PAIRS_DIR = Path(__file__).resolve().parent / "gpu_pairs"


def _trace(name: str) -> str:
    return str(PAIRS_DIR / f"{name}.pt.trace.json.gz")


def _compare(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    status = main(["compare", *argv, "--source-root", str(PAIRS_DIR)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _saving_line(text: str) -> str:
    """The Summary's "saving" entry, its wrapped lines joined."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("saving"))
    joined = [lines[start].strip()]
    for line in lines[start + 1 :]:
        if not line.startswith(" " * 10) or not line.strip():
            break
        joined.append(line.strip())
    return " ".join(" ".join(joined).split())


def test_a_fix_of_one_site_of_two_is_held_to_that_sites_prediction(capsys):
    """copy_and_item: the pageable copies fixed, the item() kept. The saving line gave the
    baseline's all-syncs figure (4.58 ms) beside the measured change, as if the fix had
    missed its prediction; it now gives the fixed site's own (~20 us), the all-syncs one
    beside it, and the median steps' change where one slow profiled step moves the mean."""
    status, out, _ = _compare(
        capsys, _trace("copy_and_item_baseline"), _trace("copy_and_item_fix_copy"), "--json"
    )
    assert status == 0
    result = json.loads(out)
    assert result["counts"]["fixed"] == 1 and not result["every_site_fixed"]
    (fixed,) = [row for row in result["sites"] if row["status"] == "fixed"]
    assert result["predicted_saving_of_fixed_us"] == pytest.approx(
        fixed["before"]["predicted_saving_per_step_us"]
    )
    assert result["predicted_saving_of_fixed_us"] < 100 < 4000 < result["predicted_saving_us"]
    _, text, _ = _compare(
        capsys, _trace("copy_and_item_baseline"), _trace("copy_and_item_fix_copy")
    )
    saving = _saving_line(text)
    assert saving.startswith(
        "saving predicted ~20 us per step for what was fixed (1 site; its own prediction;"
    )
    assert "every baseline sync: ~4.58 ms" in saving
    # The baseline's profiled steps: 43, 15.7, 36.2, 16.3, 24 ms: mean and median disagree.
    assert "from their median steps" in saving


def test_every_site_fixed_is_held_to_the_all_syncs_prediction_and_none_fixed_says_so(capsys):
    _, text, _ = _compare(capsys, _trace("copy_and_item_baseline"), _trace("copy_and_item_fixed"))
    assert _saving_line(text).startswith(
        "saving predicted ~4.58 ms per step (every baseline site fixed)"
    )
    _, text, _ = _compare(
        capsys, _trace("copy_and_item_baseline"), _trace("copy_and_item_baseline")
    )
    assert _saving_line(text).startswith(
        "saving no site fixed (every baseline sync fixed: predicted ~4.58 ms per step), "
        "measured 0 us"
    )


def test_a_compared_row_marks_an_inexact_line_as_the_report_does(capsys, tmp_path):
    """Without its source the compare table printed the function's line as if it were the
    call's; the report marks it "*" with a footnote."""
    for name in ("copy_and_item_baseline", "copy_and_item_fixed"):
        shutil.copy(_trace(name), tmp_path / f"{name}.pt.trace.json.gz")
    status = main(
        [
            "compare",
            str(tmp_path / "copy_and_item_baseline.pt.trace.json.gz"),
            str(tmp_path / "copy_and_item_fixed.pt.trace.json.gz"),
            "--source-root",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert status == 0
    assert "savings_workloads.py:286*" in out
    assert "* not the line of the syncing call" in out
    _, found, _ = _compare(
        capsys, _trace("copy_and_item_baseline"), _trace("copy_and_item_fixed"), "--json"
    )
    rows = json.loads(found)["sites"]
    assert {(row["line"], row["line_exact"]) for row in rows} == {(277, True), (283, True)}


def test_a_partly_fixed_row_names_the_lines_it_had_before(capsys):
    """readback_metrics: of the .cpu() at 199 and the .tolist() at 204 (one row: one
    function, operator and kind), the fix removed 199; the row named 204 alone."""
    _, out, _ = _compare(
        capsys, _trace("readback_metrics_baseline"), _trace("readback_metrics_fix_cpu")
    )
    assert "savings_workloads.py:204 (before: 199,204)" in out


def test_a_report_json_of_several_runs_is_refused_as_a_side(capsys, tmp_path):
    """Its top-level figures merge every run: the other run's site read as fixed, this
    run's per-step figures as worse, and --fail-on-regression failed on a real fix."""
    for run, name in (("a", "copy_and_item_baseline"), ("b", "readback_metrics_baseline")):
        (tmp_path / run).mkdir()
        shutil.copy(_trace(name), tmp_path / run / f"{name}.pt.trace.json.gz")
    both = tmp_path / "both.json"
    runs = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert main(["report", *runs, "--json", "-o", str(both)]) == 0
    capsys.readouterr()
    status = main(["compare", str(both), _trace("copy_and_item_fix_item"), "--fail-on-regression"])
    err = capsys.readouterr().err
    assert status == 2
    assert f"{both} is a report of 2 runs (a, b): compare one run with one run" in err
    one = tmp_path / "a.json"
    assert main(["report", str(tmp_path / "a"), "--json", "-o", str(one)]) == 0
    assert main(["compare", str(one), _trace("copy_and_item_fixed")]) == 0


def test_the_traces_left_out_are_named_in_the_written_comparison(capsys, tmp_path):
    """A reviewer reads the -o file, not stderr: it said "1 fixed" with 1 of 2 new traces
    unreadable."""
    new = tmp_path / "new"
    new.mkdir()
    shutil.copy(_trace("copy_and_item_fixed"), new / "w0.pt.trace.json.gz")
    broken = new / "w1.pt.trace.json.gz"
    broken.write_bytes(Path(_trace("copy_and_item_fix_item")).read_bytes()[:3000])
    out = tmp_path / "cmp.txt"
    assert main(["compare", _trace("copy_and_item_baseline"), str(new), "-o", str(out)]) == 0
    capsys.readouterr()
    text = " ".join(out.read_text(encoding="utf-8").split())  # unwrapped
    assert "1 trace file could not be read and was left out of the comparison:" in text
    assert f"new run: {broken}: truncated gzip data" in text


def test_a_cpu_only_run_against_a_gpu_run_shows_counts_not_costs(capsys, tmp_path):
    """Compared by count per step, a row read "same  0 us  8.78 ms  +8.78 ms": a cost change
    beside "same"."""
    from test_cli import write_cpu_trace

    cpu = write_cpu_trace(tmp_path / "cpu" / "w.pt.trace.json", op="aten::nonzero", count=2)
    status, out, _ = _compare(capsys, str(cpu), _trace("dynamic_shapes_baseline"))
    assert status == 0
    header = next(line for line in out.splitlines() if line.startswith("status"))
    assert header.endswith("(syncs per step)") and "/step" not in header
    assert " us " not in " ".join(
        line for line in out.splitlines() if line.startswith(("same", "new", "fixed"))
    )
    assert "saving           not measured" in out


def test_two_cpu_only_runs_promise_no_saving(capsys, tmp_path):
    """Between CPU-only runs the saving line read "predicted ≤0 us per step, measured 106
    ms"; the dashboard calls that change CPU timing."""
    from test_cli import write_cpu_trace

    base = write_cpu_trace(tmp_path / "a" / "w.pt.trace.json", op="aten::nonzero", count=2)
    new = write_cpu_trace(tmp_path / "b" / "w.pt.trace.json", op="aten::nonzero", count=1)
    status, out, _ = _compare(capsys, str(base), str(new))
    assert status == 0
    assert _saving_line(out).startswith("saving not measured: on the CPU these syncs cost nothing")
    assert "≤0 us" not in out


def test_a_side_that_is_no_trace_nor_report_says_what_compare_reads(capsys, tmp_path):
    exported = tmp_path / "base.csv"
    exported.write_text("site,count\ntrain.py:8,5\n", encoding="utf-8")
    status, _, err = _compare(capsys, str(exported), _trace("copy_and_item_fixed"))
    assert status == 2
    assert f"{exported.name}: no trace could be read" in err
    assert "compare reads a trace, a run's folder, or a report JSON" in err


def test_a_baseline_without_syncs_is_not_said_to_have_them_all_fixed(capsys):
    """Reversed pair (the fixed run as the baseline): 'every sync fixed' stood beside two
    new sites."""
    status, out, _ = _compare(
        capsys, _trace("copy_and_item_fixed"), _trace("copy_and_item_baseline"), "--json"
    )
    result = json.loads(out)
    assert status == 0 and result["counts"]["new"] == 2
    assert result["every_site_fixed"] is False
    _, text, _ = _compare(capsys, _trace("copy_and_item_fixed"), _trace("copy_and_item_baseline"))
    assert _saving_line(text).startswith("saving the baseline had no sync to fix, measured")


def test_a_line_fixed_in_a_row_still_there_is_held_to_its_own_prediction(capsys):
    """readback_metrics: the .cpu() at 199 fixed, the .tolist() at 204 kept, one row. The
    saving line said 'no site fixed'."""
    _, out, _ = _compare(
        capsys, _trace("readback_metrics_baseline"), _trace("readback_metrics_fix_cpu"), "--json"
    )
    result = json.loads(out)
    (row,) = result["sites"]
    assert row["status"] == "better" and row["lines_fixed"] == [199]
    main(["report", _trace("readback_metrics_baseline"), "--json", "--source-root", str(PAIRS_DIR)])
    base = json.loads(capsys.readouterr().out)
    (at_199,) = [s for s in base["sites"] if s["line"] == 199]
    assert row["lines_fixed_saving_per_step_us"] == pytest.approx(
        at_199["predicted_saving_per_step_us"]
    )
    assert result["predicted_saving_of_fixed_us"] == pytest.approx(
        at_199["predicted_saving_per_step_us"]
    )
    _, text, _ = _compare(
        capsys, _trace("readback_metrics_baseline"), _trace("readback_metrics_fix_cpu")
    )
    assert "for what was fixed (1 line of a site still there; its own prediction;" in (
        _saving_line(text)
    )


def test_a_fixed_site_without_a_prediction_of_its_own_is_not_no_site_fixed(capsys, tmp_path):
    """A report JSON whose sites carry no prediction (schema /1 allows it): the header said
    '1 fixed' and the saving line 'no site fixed'."""
    main(["report", _trace("copy_and_item_baseline"), "--json", "--source-root", str(PAIRS_DIR)])
    report = json.loads(capsys.readouterr().out)
    for site in report["sites"]:
        del site["predicted_saving_per_step_us"]
    old = tmp_path / "base.json"
    old.write_text(json.dumps(report), encoding="utf-8")
    _, text, _ = _compare(capsys, str(old), _trace("copy_and_item_fix_copy"))
    assert _saving_line(text).startswith("saving 1 site fixed, without a prediction of its own")


def test_two_npu_runs_without_ascendcl_calls_are_not_called_cpu_runs(capsys, tmp_path):
    from test_ascend_layout import write_run

    base = write_run(tmp_path, level=0, run_name="a")
    new = write_run(tmp_path, level=0, run_name="b")
    status, out, _ = _compare(capsys, str(base), str(new))
    assert status == 0
    saving = _saving_line(out)
    assert saving.startswith("saving not measured: the NPU traces recorded no AscendCL call")
    assert "CPU" not in saving


def test_the_inexact_footnote_is_given_for_every_marked_row():
    """It was looked for at the end of each row's text: a merged row's '(before: ...)' and
    the latent rows hid it."""
    from tb_syncfinder.outputs.text import render_compare

    def row(status: str, lines_before: list[int], lines_after: list[int]) -> dict:
        return {
            "key": "train.py:f:aten::nonzero:dynamic_shape",
            "file": "train.py",
            "line": lines_after[0],
            "line_exact": False,
            "func": "f",
            "kind": "dynamic_shape",
            "ops": ["aten::nonzero"],
            "apis": [],
            "status": status,
            "before": {"lines": lines_before, "cost_per_step_us": 10.0, "per_step": 1.0},
            "after": {"lines": lines_after, "cost_per_step_us": 5.0, "per_step": 0.5},
            "change_us": -5.0,
            "lines_fixed": sorted(set(lines_before) - set(lines_after)),
        }

    merged = {"sites": [row("better", [199, 204, 210], [199, 204])], "counts": {"better": 1}}
    text = render_compare(merged, width=100)
    assert "train.py:199,204* (before: 199,204,210)" in text
    assert "* not the line of the syncing call" in text
    latent = {"sites": [], "latent_sites": [row("worse", [10], [10])], "counts": {}}
    assert "* not the line of the syncing call" in render_compare(latent, width=100)


def test_lines_that_moved_are_not_counted_as_fixed(capsys, tmp_path):
    """The same trace, its source found on one side only (283 exact against 286, the def
    line): 'same', and a saving 'for what was fixed' was claimed. Lines an edit moved are
    no fix either."""
    report = tmp_path / "found.json"
    main(
        ["report", _trace("readback_metrics_baseline"), "--json", "-o", str(report)]
        + ["--source-root", str(PAIRS_DIR)]
    )
    moved = json.loads(report.read_text(encoding="utf-8"))
    for site in moved["sites"]:
        site["line"] += 7  # lines added above the function
    shifted = tmp_path / "shifted.json"
    shifted.write_text(json.dumps(moved), encoding="utf-8")
    capsys.readouterr()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    copied = elsewhere / "readback_metrics_baseline.pt.trace.json.gz"
    shutil.copy(_trace("readback_metrics_baseline"), copied)
    unread = tmp_path / "unread.json"
    main(["report", str(copied), "--json", "-o", str(unread), "--source-root", str(elsewhere)])
    assert all(not s["line_exact"] for s in json.loads(unread.read_text())["sites"])
    capsys.readouterr()
    for side in (str(shifted), str(unread)):
        _, out, _ = _compare(capsys, str(report), side, "--json")
        result = json.loads(out)
        assert all(not row["lines_fixed"] for row in result["sites"])
        assert result["predicted_saving_of_fixed_us"] is None


def test_the_comparison_json_names_its_schema_and_no_change_is_plus_zero(capsys):
    import math

    trace = _trace("copy_and_item_baseline")
    _, out, _ = _compare(capsys, trace, trace, "--json")
    result = json.loads(out)
    assert result["schema"] == "tb_syncfinder.compare/1"
    assert math.copysign(1.0, result["measured_saving_us"]) == 1.0


def test_a_line_fixed_while_the_rest_moved_is_counted_and_named_where_it_can_be(capsys, tmp_path):
    """Most fixes add or remove lines above the sync that stays. The .cpu() at 199 fixed and
    the .tolist() moved from 204 to 202: which line went, 199 (the rest moved up 2) or 204
    (moved down 3), the lines cannot tell; a line still went, and the saving line said 'no
    site fixed'."""
    from tb_syncfinder.compare import _lines_fixed

    assert _lines_fixed([199, 204], [204]) == [199]
    assert _lines_fixed([199, 204, 210], [201, 207]) == [199]  # one offset explains it
    assert _lines_fixed([199, 204], [202]) == []  # two offsets do
    fixed = tmp_path / "fix_cpu.json"
    main(["report", _trace("readback_metrics_fix_cpu"), "--json", "-o", str(fixed)])
    report = json.loads(fixed.read_text(encoding="utf-8"))
    for site in report["sites"]:
        site["line"] -= 2
    fixed.write_text(json.dumps(report), encoding="utf-8")
    capsys.readouterr()
    _, out, _ = _compare(capsys, _trace("readback_metrics_baseline"), str(fixed), "--json")
    (row,) = json.loads(out)["sites"]
    assert (row["lines_fixed_count"], row["lines_fixed"]) == (1, [])
    assert json.loads(out)["predicted_saving_of_fixed_us"] is None
    _, text, _ = _compare(capsys, _trace("readback_metrics_baseline"), str(fixed))
    assert _saving_line(text).startswith(
        "saving 1 line of a site still there fixed, without a prediction of its own"
    )


def test_the_median_steps_are_said_whichever_run_is_the_baseline(capsys):
    """The demo seg: 2.73 ms from the mean steps, 1.20 ms from the median ones. The median
    was said with the optimized run as the baseline and not the other way round (a tenth
    of the baseline's step: 1.58 ms of the seg baseline's, 1.3 ms of the optimized's)."""
    from tb_syncfinder.demo.runner import BUNDLED_TRACES_DIR

    base = str(BUNDLED_TRACES_DIR / "seg_baseline.pt.trace.json.gz")
    new = str(BUNDLED_TRACES_DIR / "seg_optimized.pt.trace.json.gz")
    for first, second in ((base, new), (new, base)):
        main(["compare", first, second])
        saving = _saving_line(capsys.readouterr().out)
        assert "from their median steps" in saving, saving
