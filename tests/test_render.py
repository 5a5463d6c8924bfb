from __future__ import annotations

import re

from conftest import make_site

from tb_syncfinder.models import Report, Summary, TraceInfo
from tb_syncfinder.outputs.text import (
    WIDTH,
    format_us,
    render_compare,
    render_report,
    render_runs,
    truncate_left,
)

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_sites_are_listed_most_expensive_first(sample_report: Report) -> None:
    text = render_report(sample_report, color=False)
    assert text.index("train.py:42") < text.index("model.py:17")
    assert "train_step" in text and "aten::item > aten::_local_scalar_dense" in text
    assert "fix: fix scalar_readback" in text


def test_plain_text_has_no_escape_codes_and_fits_100_columns(sample_report: Report) -> None:
    text = render_report(sample_report, color=False)
    assert "\x1b[" not in text
    assert all(len(line) <= WIDTH for line in text.splitlines())


def test_colour_adds_escape_codes_without_changing_the_text(sample_report: Report) -> None:
    coloured = render_report(sample_report, color=True)
    assert "\x1b[" in coloured
    assert ANSI.sub("", coloured) == render_report(sample_report, color=False)


def test_summary_gives_per_step_wait_idle_share_and_estimated_step_time(
        sample_report: Report) -> None:
    text = render_report(sample_report, color=False)
    assert "3.0  (12 over 4 steps)" in text  # syncs per step
    assert "850 us per step" in text  # 3400 us host wait / 4 steps
    assert "275 us per step" in text  # 1100 us idle / 4 steps
    assert "11.2%" in text  # 4500 / 40000
    assert "10.00 ms mean; ~8.88 ms without syncs" in text


def test_long_paths_are_cut_from_the_left_keeping_file_and_line() -> None:
    assert truncate_left("/a/very/long/path/to/the/project/src/train.py:42", 20) == \
        "…ect/src/train.py:42"
    long_site = make_site("/" + "deep/" * 30 + "train.py", 7, "f", "explicit_sync",
                          ["aten::x"], 1, 10.0, 0.0)
    report = Report(traces=[TraceInfo("t", "w", None, device="cuda")],
                    summary=Summary(1, 10.0, 0.0, 100.0), syncs=[], sites=[long_site], latent=[])
    text = render_report(report)
    assert "…" in text and "train.py:7" in text
    assert all(len(line) <= WIDTH for line in text.splitlines())


def test_top_limits_the_sites_and_says_how_many_are_hidden(sample_report: Report) -> None:
    text = render_report(sample_report, top=1)
    assert "train.py:42" in text and "model.py:17" not in text
    assert "1 more site (--top 0 shows all)" in text


def test_definition_line_is_marked_when_the_call_line_is_unknown() -> None:
    site = make_site("train.py", 8, "train_step", "scalar_readback", ["aten::item"], 1,
                     5.0, 0.0, line_exact=False)
    report = Report(traces=[TraceInfo("t", "w", None, device="cuda")],
                    summary=Summary(1, 5.0, 0.0, 100.0), syncs=[], sites=[site], latent=[])
    text = render_report(report)
    assert "train.py:8*" in text and "--source-root" in text


def test_cpu_only_trace_lists_latent_sites_as_would_synchronize() -> None:
    site = make_site("train.py", 8, "train_step", "dynamic_shape", ["aten::nonzero"], 3,
                     0.0, 0.0, latent=True)
    report = Report(traces=[TraceInfo("t", "w", None, device="cpu", steps=3)],
                    summary=Summary(0, 0.0, 0.0, 300.0, step_count=3, latent_count=3),
                    syncs=[], sites=[], latent=[], latent_sites=[site])
    text = render_report(report)
    assert "would synchronize on a GPU" in text
    assert "aten::nonzero" in text
    assert "CPU-only trace: nothing ran on a GPU" in text


def test_unreadable_traces_are_listed_with_their_reason(sample_report: Report) -> None:
    sample_report.traces.append(TraceInfo("/traces/bad.pt.trace.json", "bad", None,
                                          error="not valid JSON (line 1)"))
    text = render_report(sample_report)
    assert "/traces/bad.pt.trace.json: not valid JSON (line 1)" in text
    assert "1 unreadable" in text


def test_durations_read_in_the_best_unit() -> None:
    assert format_us(4.5) == "4.5 us"
    assert format_us(850) == "850 us"
    assert format_us(1234.5) == "1.23 ms"
    assert format_us(2_100_000) == "2.10 s"


def test_render_compare_shows_status_and_step_time_change(sample_report: Report) -> None:
    from tb_syncfinder.compare import compare

    base = sample_report.to_json()
    new = sample_report.to_json()
    new["sites"] = [s for s in new["sites"] if s["kind"] != "dynamic_shape"]
    new["summary"]["mean_step_time_us"] = 9_000.0
    text = render_compare(compare(base, new))
    assert re.search(r"^fixed\s+…?.*model\.py:17", text, re.M)
    assert re.search(r"^same\s+.*train\.py:42", text, re.M)
    assert "10.00 ms -> 9.00 ms (-1.00 ms)" in text
    assert all(len(line) <= WIDTH for line in text.splitlines())


def test_cpu_only_summary_counts_latent_syncs_instead_of_printing_zero_costs():
    from tb_syncfinder.outputs.text import render_report

    report = {
        "schema": "tb_syncfinder.report/1",
        "traces": [{"path": "w.pt.trace.json", "worker": "w", "span": None, "device": "cpu",
                    "steps": 5, "error": None}],
        "summary": {"sync_count": 0, "host_wait_us": 0.0, "gpu_idle_us": 0.0,
                    "step_time_us": 50_000.0, "step_count": 5, "latent_count": 20,
                    "mean_step_time_us": 10_000.0},
        "syncs": [], "sites": [], "latent": [], "latent_sites": [], "steps": [],
    }
    text = render_report(report, color=False, top=None)
    assert "4.0 per step, 20 in all" in text
    assert "share of step" not in text
    assert "without syncs" not in text


def _cpu_only_report_json(latent_count: int = 20, steps: int = 5) -> dict:
    return {
        "schema": "tb_syncfinder.report/1",
        "traces": [{"path": "/logs/cpu/w.pt.trace.json", "worker": "w", "span": None,
                    "run": "cpu", "device": "cpu", "steps": steps, "error": None}],
        "summary": {"sync_count": 0, "host_wait_us": 0.0, "gpu_idle_us": 0.0,
                    "step_time_us": 50_000.0, "step_count": steps,
                    "latent_count": latent_count, "mean_step_time_us": 10_000.0},
        "syncs": [], "sites": [], "latent": [], "latent_sites": [], "steps": [],
    }


def test_single_run_renders_exactly_as_the_plain_report(sample_report: Report) -> None:
    data = sample_report.to_json()
    assert render_runs([("r", data)], top=1) == render_report(data, top=1)


def test_several_runs_get_a_section_each_then_an_overview_line_per_run(
        sample_report: Report) -> None:
    text = render_runs([("gpu_run", sample_report.to_json()),
                        ("cpu", _cpu_only_report_json())])
    assert text.startswith("Sync Advisor  2 runs, 2 traces (cpu 1, cuda 1)")
    gpu_at = text.index("== gpu_run: 1 trace (cuda 1) ")
    cpu_at = text.index("== cpu: 1 trace (cpu 1) ")
    overview_at = text.index("Runs (2)")
    assert gpu_at < cpu_at < overview_at
    # Each section holds its own run's figures, not figures diluted over both runs' steps.
    gpu_section = text[gpu_at:cpu_at]
    assert "train.py:42" in gpu_section and "3.0  (12 over 4 steps)" in gpu_section
    assert "4.0 per step, 20 in all" in text[cpu_at:overview_at]
    overview = text[overview_at:].splitlines()
    gpu_row = next(line for line in overview if line.startswith("gpu_run "))
    cpu_row = next(line for line in overview if line.startswith("cpu "))
    # steps, syncs/step, host wait/step (3400 us / 4), share; latent per step for CPU-only
    assert gpu_row.split() == ["gpu_run", "4", "3.0", "850", "us", "11.2%", "-"]
    assert cpu_row.split() == ["cpu", "5", "-", "-", "-", "4.0"]
    assert all(len(line) <= WIDTH for line in text.splitlines())


def test_several_runs_colour_without_changing_the_text(sample_report: Report) -> None:
    runs = [("a", sample_report.to_json()), ("b", _cpu_only_report_json())]
    assert ANSI.sub("", render_runs(runs, color=True)) == render_runs(runs, color=False)


def test_run_whose_traces_are_all_unreadable_is_named_in_its_section_and_overview(
        sample_report: Report) -> None:
    broken = {"traces": [{"path": "/logs/bad/w.pt.trace.json", "run": "bad",
                          "error": "not valid JSON (line 1)"}],
              "summary": {}, "sites": [], "latent_sites": []}
    text = render_runs([("good", sample_report.to_json()), ("bad", broken)])
    assert "/logs/bad/w.pt.trace.json: not valid JSON (line 1)" in text
    assert re.search(r"^bad\s+no trace could be read$", text, re.M)


def test_a_trace_read_with_repairs_says_what_was_repaired():
    from tb_syncfinder.outputs.text import render_report

    report = {
        "schema": "tb_syncfinder.report/1",
        "traces": [{"path": "win.pt.trace.json", "worker": "w", "span": None, "device": "cuda",
                    "steps": 1, "error": None,
                    "repairs": ["escaped backslashes in Windows paths", "quoted N/A values"]}],
        "summary": {"sync_count": 0, "host_wait_us": 0.0, "gpu_idle_us": 0.0,
                    "step_time_us": 1000.0, "step_count": 1, "checked": ["cudaMemcpy"]},
        "syncs": [], "sites": [], "latent": [], "latent_sites": [], "steps": [],
    }
    text = render_report(report, color=False, top=None)
    assert ("win.pt.trace.json: escaped backslashes in Windows paths; quoted N/A values"
            in text)


def test_compare_text_carries_the_compare_note():
    from tb_syncfinder.outputs.text import render_compare

    note = "one run is CPU-only: sites compared by count per step"
    text = render_compare({"sites": [], "latent_sites": [], "counts": {}, "note": note,
                           "base": {}, "new": {}, "step_time_change_us": None})
    assert note in text
