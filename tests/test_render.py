from __future__ import annotations

import os
import re

import msgspec
import pytest
from conftest import SHARED_DIR, make_site

from tb_syncfinder.models import Report, Summary, TraceInfo
from tb_syncfinder.outputs.text import (
    WIDTH,
    format_share,
    format_us,
    render_compare,
    render_report,
    render_runs,
    site_location,
    truncate_left,
)

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(autouse=True)
def _terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """The renderers take the terminal's width: pin it, whatever terminal runs the tests."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))


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
    sample_report: Report,
) -> None:
    text = render_report(sample_report, color=False)
    assert "3.0  (12 over 4 steps)" in text  # syncs per step
    assert "850 us per step" in text  # 3400 us host wait / 4 steps
    assert "275 us per step" in text  # 1100 us idle / 4 steps
    assert "11%" in text  # 4500 / 40000
    assert "10.0 ms mean; ~8.88 ms without syncs" in text


def test_a_location_longer_than_its_column_gets_a_line_of_its_own_never_cut() -> None:
    assert (
        truncate_left("/a/very/long/path/to/the/project/src/train.py:42", 20)
        == "…ect/src/train.py:42"
    )
    long_file = "/" + "deep/" * 30 + "train.py"
    long_site = make_site(long_file, 7, "f", "explicit_sync", ["aten::x"], 1, 10.0, 0.0)
    short_site = make_site("short.py", 3, "g", "explicit_sync", ["aten::y"], 1, 5.0, 0.0)
    report = Report(
        traces=[TraceInfo("t", "w", None, device="cuda")],
        summary=Summary(2, 15.0, 0.0, 100.0),
        syncs=[],
        sites=[long_site, short_site],
        latent=[],
    )
    lines = render_report(report).splitlines()
    at = next(i for i, line in enumerate(lines) if f"{long_file}:7" in line)
    assert lines[at].split() == ["1", f"{long_file}:7"]  # whole, alone
    assert lines[at + 1].split()[-9:] == ["1", "0.2", "≤0", "us", "10", "us", "0", "us", "<0.1%"]
    assert any(line.split()[:2] == ["2", "short.py:3"] and "5 us" in line for line in lines)
    assert "…" not in "".join(lines)


def test_top_limits_the_sites_and_says_how_many_are_hidden(sample_report: Report) -> None:
    text = render_report(sample_report, top=1)
    assert "train.py:42" in text and "model.py:17" not in text
    assert "1 more site (--top 0 shows all)" in text


def test_a_report_read_in_python_gives_its_hints_in_pythons_words(sample_report: Report) -> None:
    """In a notebook ``--top 0`` and ``--source-root`` are no help (a review of the API)."""
    text = sample_report.to_text(top=1)
    assert "1 more site (report.to_text() shows all)" in text and "--top" not in text
    assert str(sample_report) == sample_report.to_text(top=10)


def test_definition_line_is_marked_when_the_call_line_is_unknown() -> None:
    site = make_site(
        "train.py",
        8,
        "train_step",
        "scalar_readback",
        ["aten::item"],
        1,
        5.0,
        0.0,
        line_exact=False,
    )
    report = Report(
        traces=[TraceInfo("t", "w", None, device="cuda")],
        summary=Summary(1, 5.0, 0.0, 100.0),
        syncs=[],
        sites=[site],
        latent=[],
    )
    text = render_report(report)
    assert "train.py:8*" in text and "--source-root" in text


def test_cpu_only_trace_lists_latent_sites_as_would_synchronize() -> None:
    site = make_site(
        "train.py", 8, "train_step", "dynamic_shape", ["aten::nonzero"], 3, 0.0, 0.0, latent=True
    )
    report = Report(
        traces=[TraceInfo("t", "w", None, device="cpu", steps=3)],
        summary=Summary(0, 0.0, 0.0, 300.0, step_count=3, latent_count=3),
        syncs=[],
        sites=[],
        latent=[],
        latent_sites=[site],
    )
    text = render_report(report)
    assert "would synchronize on a GPU" in text
    assert "aten::nonzero" in text
    assert "CPU-only trace: nothing ran on a GPU" in text
    # What a CPU run cannot tell is said, not left for the reader to take as absent: without
    # stacks no copy is listed, with them .cpu() and .tolist() are.
    flat = " ".join(text.split())
    assert "without Python stacks: copies to or from the host (.cpu(), .tolist()" in flat
    report.traces[0].has_stacks = True
    flat = " ".join(render_report(report).split())
    assert "Not listed on a CPU-only trace: .to() copies whose line does not name the host" in flat
    # torchvision's save_image copies its grid to the host, unlisted (a user's walk of dcgan).
    assert "the copies libraries make in their own code (torchvision's save_image," in flat
    # torch.save copies each GPU storage back (a user's walk of minGPT).
    assert "torch.save of GPU tensors) and pageable uploads" in flat
    assert ".tolist()" not in flat


def test_a_rare_site_per_step_keeps_its_first_digit_instead_of_showing_zero() -> None:
    """800 syncs over 40,000 steps is 0.02 per step: it showed as 0.0, which reads as none."""
    site = make_site(
        "train.py",
        8,
        "train_step",
        "dynamic_shape",
        ["aten::nonzero"],
        800,
        0.0,
        0.0,
        steps=40_000,
        latent=True,
    )
    report = Report(
        traces=[TraceInfo("t", "w", None, device="cpu", steps=40_000)],
        summary=Summary(0, 0.0, 0.0, 300.0, step_count=40_000, latent_count=800),
        syncs=[],
        sites=[],
        latent=[],
        latent_sites=[site],
    )
    text = render_report(report, width=120)
    row = next(line for line in text.splitlines() if "train.py:8" in line)
    assert row.split()[-1] == "0.02"
    assert "0.02 per step, 800 in all" in " ".join(text.split())


def test_a_compare_of_cpu_only_runs_counts_its_latent_sites_in_the_headline() -> None:
    """Between CPU-only runs (a CI runner's) the latent sites are all there is: the headline
    said nothing after "compare" and the body "no synchronization sites in either run"."""
    from tb_syncfinder.outputs.text import render_compare

    row = {
        "key": "seg.py:f:aten::nonzero:dynamic_shape",
        "file": "seg.py",
        "line": 77,
        "func": "f",
        "kind": "dynamic_shape",
        "ops": ["aten::nonzero"],
        "apis": [],
        "status": "fixed",
        "before": {"per_step": 1.0, "count": 5},
        "after": None,
        "change_us": 0.0,
    }
    counts = dict.fromkeys(("new", "worse", "better", "same", "fixed"), 0)
    text = render_compare(
        {"sites": [], "latent_sites": [row], "counts": counts, "base": {}, "new": {}}, width=100
    )
    first, _blank, body = text.splitlines()[:3]
    assert first == "Sync Advisor: compare  1 fixed (latent)"
    assert "no measured synchronization in either run (CPU-only: latent sites below)" in body


def test_unreadable_traces_are_listed_with_their_reason(sample_report: Report) -> None:
    sample_report.traces.append(
        TraceInfo("/traces/bad.pt.trace.json", "bad", None, error="not valid JSON (line 1)")
    )
    text = render_report(sample_report)
    assert "/traces/bad.pt.trace.json: not valid JSON (line 1)" in text
    assert "1 unreadable" in text


def test_durations_read_in_the_best_unit() -> None:
    assert format_us(4.5) == "4.5 us"
    assert format_us(850) == "850 us"
    assert format_us(1234.5) == "1.23 ms"
    assert format_us(2_100_000) == "2.10 s"
    assert format_us(159_184) == "159 ms"  # three significant digits
    assert format_us(999.7) == "1.00 ms" and format_us(99_972) == "100 ms"


def test_render_compare_shows_status_and_step_time_change(sample_report: Report) -> None:
    from tb_syncfinder.compare import compare

    base = sample_report.to_json()
    new = sample_report.to_json()
    new["sites"] = [s for s in new["sites"] if s["kind"] != "dynamic_shape"]
    new["summary"]["mean_step_time_us"] = 9_000.0
    text = render_compare(compare(base, new))
    assert re.search(r"^fixed\s+…?.*model\.py:17", text, re.M)
    assert re.search(r"^same\s+.*train\.py:42", text, re.M)
    assert "10.0 ms -> 9.00 ms (-1.00 ms)" in text
    assert all(len(line) <= WIDTH for line in text.splitlines())


def test_cpu_only_summary_counts_latent_syncs_instead_of_printing_zero_costs():
    from tb_syncfinder.outputs.text import render_report

    report = {
        "schema": "tb_syncfinder.report/1",
        "traces": [
            {
                "path": "w.pt.trace.json",
                "worker": "w",
                "span": None,
                "device": "cpu",
                "steps": 5,
                "error": None,
            }
        ],
        "summary": {
            "sync_count": 0,
            "host_wait_us": 0.0,
            "gpu_idle_us": 0.0,
            "step_time_us": 50_000.0,
            "step_count": 5,
            "latent_count": 20,
            "mean_step_time_us": 10_000.0,
        },
        "syncs": [],
        "sites": [],
        "latent": [],
        "latent_sites": [],
        "steps": [],
    }
    text = render_report(report, color=False, top=None)
    assert "4.0 per step, 20 in all" in text
    assert "share of step" not in text
    assert "without syncs" not in text


def _cpu_only_report_json(latent_count: int = 20, steps: int = 5) -> dict:
    return {
        "schema": "tb_syncfinder.report/1",
        "traces": [
            {
                "path": "/logs/cpu/w.pt.trace.json",
                "worker": "w",
                "span": None,
                "run": "cpu",
                "device": "cpu",
                "steps": steps,
                "error": None,
            }
        ],
        "summary": {
            "sync_count": 0,
            "host_wait_us": 0.0,
            "gpu_idle_us": 0.0,
            "step_time_us": 50_000.0,
            "step_count": steps,
            "latent_count": latent_count,
            "mean_step_time_us": 10_000.0,
        },
        "syncs": [],
        "sites": [],
        "latent": [],
        "latent_sites": [],
        "steps": [],
    }


def test_single_run_renders_exactly_as_the_plain_report(sample_report: Report) -> None:
    data = sample_report.to_json()
    assert render_runs([("r", data)], top=1) == render_report(data, top=1)


def test_several_runs_get_a_section_each_then_an_overview_line_per_run(
    sample_report: Report,
) -> None:
    text = render_runs([("gpu_run", sample_report.to_json()), ("cpu", _cpu_only_report_json())])
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
    assert gpu_row.split() == ["gpu_run", "4", "3.0", "850", "us", "11%", "-"]
    assert cpu_row.split() == ["cpu", "5", "-", "-", "-", "4.0"]
    assert all(len(line) <= WIDTH for line in text.splitlines())


def test_several_runs_colour_without_changing_the_text(sample_report: Report) -> None:
    runs = [("a", sample_report.to_json()), ("b", _cpu_only_report_json())]
    assert ANSI.sub("", render_runs(runs, color=True)) == render_runs(runs, color=False)


def test_run_whose_traces_are_all_unreadable_is_named_in_its_section_and_overview(
    sample_report: Report,
) -> None:
    broken = {
        "traces": [
            {"path": "/logs/bad/w.pt.trace.json", "run": "bad", "error": "not valid JSON (line 1)"}
        ],
        "summary": {},
        "sites": [],
        "latent_sites": [],
    }
    text = render_runs([("good", sample_report.to_json()), ("bad", broken)])
    assert "/logs/bad/w.pt.trace.json: not valid JSON (line 1)" in text
    assert re.search(r"^bad\s+no trace could be read$", text, re.M)


def test_a_trace_read_with_repairs_says_what_was_repaired():
    from tb_syncfinder.outputs.text import render_report

    report = {
        "schema": "tb_syncfinder.report/1",
        "traces": [
            {
                "path": "win.pt.trace.json",
                "worker": "w",
                "span": None,
                "device": "cuda",
                "steps": 1,
                "error": None,
                "repairs": ["escaped backslashes in Windows paths", "quoted N/A values"],
            }
        ],
        "summary": {
            "sync_count": 0,
            "host_wait_us": 0.0,
            "gpu_idle_us": 0.0,
            "step_time_us": 1000.0,
            "step_count": 1,
            "checked": ["cudaMemcpy"],
        },
        "syncs": [],
        "sites": [],
        "latent": [],
        "latent_sites": [],
        "steps": [],
    }
    text = render_report(report, color=False, top=None)
    assert "win.pt.trace.json: escaped backslashes in Windows paths; quoted N/A values" in text


def test_what_was_checked_is_labelled_once_and_wraps_under_itself():
    from tb_syncfinder.outputs.text import render_report

    checked = [f"check number {n} (with a few words to wrap)" for n in range(12)]
    report = {
        "schema": "tb_syncfinder.report/1",
        "traces": [{"path": "t.pt.trace.json", "worker": "w", "device": "cuda", "steps": 1}],
        "summary": {"sync_count": 0, "step_count": 1, "checked": checked},
        "syncs": [],
        "sites": [],
        "latent": [],
        "latent_sites": [],
        "steps": [],
    }
    lines = render_report(report, color=False, top=None, width=80).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  checked: "))
    listed = []
    for line in lines[at:]:
        if not line.strip():
            break
        listed.append(line)
    assert len(listed) > 2 and sum("checked:" in line for line in listed) == 1
    assert all(line.startswith(" " * len("  checked: ")) for line in listed[1:])
    assert "check number 11" in " ".join(listed)


def test_the_site_table_says_which_columns_are_totals_and_which_per_step(
    sample_report: Report,
) -> None:
    """A review read the table's 'wait' (a total) against compare's per-step cost."""
    text = render_report(sample_report, color=False, width=100)
    assert "count, wait, GPU idle: over the 4 profiled steps; /step, saves/step: per step" in (
        " ".join(text.split())
    )


def test_compare_text_carries_the_compare_note():
    from tb_syncfinder.outputs.text import render_compare

    note = "one run is CPU-only: sites compared by count per step"
    text = render_compare(
        {
            "sites": [],
            "latent_sites": [],
            "counts": {},
            "note": note,
            "base": {},
            "new": {},
            "step_time_change_us": None,
        }
    )
    assert note in text


H100_TRACES = SHARED_DIR / "traces" / "h100_demo"


def _wide_report() -> Report:
    """Sites with every kind of cell a terminal must not cut: a long relative path, a long
    absolute path, a site without a stack, a long function name, large and small costs."""
    sites = [
        make_site(
            "pkg/models/segmentation/heads/deeplab_head.py",
            212,
            "forward_with_aux",
            "dynamic_shape",
            ["aten::index", "aten::nonzero"],
            400,
            1_234_567.0,
            98_765.0,
            steps=100,
        ),
        make_site(
            "/home/someone/projects/train.py",
            88,
            "train_one_epoch_with_logging_and_checkpoints",
            "scalar_readback",
            ["aten::item", "aten::_local_scalar_dense"],
            100,
            4_321.0,
            1_200.0,
            steps=100,
        ),
        make_site(
            None,
            None,
            None,
            "blocking_host_to_device",
            ["autograd::engine::evaluate_function: IndexBackward0", "aten::to"],
            100,
            55.5,
            7.25,
            steps=100,
        ),
    ]
    return Report(
        traces=[TraceInfo("t", "w", None, device="cuda")],
        summary=Summary(600, 1_239_943.5, 99_972.25, 4_000_000.0, step_count=100),
        syncs=[],
        sites=sites,
        latent=[],
    )


def _report_cells(site: dict) -> list[str]:
    return [
        site_location(site),
        format_us(site["host_wait_us"]),
        format_us(site["gpu_idle_us"]),
        format_share(site["share_of_step"]),
    ]


def _check_fits(text: str, width: int, cells: list[list[str]]) -> None:
    lines = text.splitlines()
    # Only a location longer than the terminal is wider, on a line of its own: never cut.
    alone = {line for line in lines for row in cells if line.split(maxsplit=1)[1:] == [row[0]]}
    too_wide = [line for line in lines if len(line) > width and line not in alone]
    assert not too_wide, too_wide
    for row in cells:
        location, *numbers = row
        # Whole; a backward site shares its forward line's location.
        at = [i for i, line in enumerate(lines) if location in line]
        assert at, location
        # The numbers are on the location's line, or the next when the location is alone.
        near = [lines[i] + "\n" + lines[i + 1] for i in at]
        assert any(all(n in text for n in numbers) for text in near), (row, near)


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_the_table_uses_the_terminal_width_and_never_cuts_a_location_or_a_number(
    width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    data = _wide_report().to_json()
    text = render_report(data)
    _check_fits(text, width, [_report_cells(s) for s in data["sites"]])
    if width == 200:  # room for every column
        assert "function" in text.splitlines()[3] and "in forward_with_aux()" not in text
    if width == 80:  # the function is the first to give way, onto the line below
        assert "function" not in text.splitlines()[3]
        assert "in forward_with_aux()" in text
    # The long function name never makes a column: it is said below its row.
    assert "in train_one_epoch_with_logging_and_checkpoints()" in text


@pytest.mark.skipif(
    not (H100_TRACES / "seg_baseline.pt.trace.json.gz").exists(), reason="no shared H100 traces"
)
@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_report_and_compare_of_the_h100_runs_fit_the_terminal_whole(
    width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import json

    from tb_syncfinder.cli import main

    monkeypatch.setenv("COLUMNS", str(width))
    baseline = str(H100_TRACES / "seg_baseline.pt.trace.json.gz")
    optimized = str(H100_TRACES / "seg_optimized.pt.trace.json.gz")
    assert main(["report", baseline, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert main(["report", baseline]) == 0
    _check_fits(capsys.readouterr().out, width, [_report_cells(s) for s in data["sites"]])
    assert main(["compare", baseline, optimized]) == 0
    text = capsys.readouterr().out
    assert all(len(line) <= width for line in text.splitlines())
    # The per-step column stays at every width: it says what a fix removed.
    assert text.count("1.0>0.0") == 4, text


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_compare_keeps_locations_and_the_per_step_column_at_every_width(
    width: int, sample_report: Report
) -> None:
    from tb_syncfinder.compare import compare

    base = sample_report.to_json()
    new = sample_report.to_json()
    new["sites"] = [s for s in new["sites"] if s["kind"] != "dynamic_shape"]
    text = render_compare(compare(base, new), width=width)
    assert all(len(line) <= width for line in text.splitlines())
    # The figures on the location's line, or on the next where the location is alone.
    row = r"\s+/home/me/proj/{}\s(?:.*\s)?\s*.*{}$"
    assert re.search("^fixed" + row.format(r"model\.py:17", r"1\.0>0\.0"), text, re.M), text
    assert re.search("^same" + row.format(r"train\.py:42", r"2\.0>2\.0"), text, re.M), text


def test_counts_of_one_are_singular(sample_report: Report) -> None:
    data = sample_report.to_json()
    data["sites"] = data["sites"][:1]
    text = render_report(data)
    assert "(1 site)" in text and "1 sites" not in text
    assert "1 trace (cuda 1)" in text


def test_an_inexact_line_of_a_file_that_was_read_says_why_not_that_it_was_not_found() -> None:
    site = make_site(
        "train.py", 157, "train", "explicit_sync", [], 1, 30.0, 0.0, line_exact=False, def_line=150
    )
    at_def = make_site(
        "model.py", 8, "forward", "explicit_sync", [], 1, 20.0, 0.0, line_exact=False, def_line=8
    )
    data = Report(
        traces=[TraceInfo("t", "w", None, device="cuda")],
        summary=Summary(2, 50.0, 0.0, 100.0),
        syncs=[],
        sites=[site, at_def],
        latent=[],
    ).to_json()
    data["syncs"] = [
        {"site_key": site.key, "source": {"resolved_path": "/src/train.py"}},
        {"site_key": at_def.key, "source": {"resolved_path": "/src/model.py"}},
    ]
    text = render_report(data)
    assert "train.py:157*" in text and "model.py:8*" in text
    assert "already running" in text and "does not single out one call" in text
    assert "not found" not in text and "--source-root" not in text
    data["syncs"] = []  # nothing read: now the file was not found
    unread = render_report(data)
    # The recorded line may be where a running function was, not its definition.
    assert "--source-root" in unread and "where the function is defined" not in unread
    assert "where it was when profiling started" in " ".join(unread.split())


def test_each_kind_of_inexact_line_has_its_own_mark_and_legend() -> None:
    """A table with a running frame's line and a definition line marked both "*" under two
    legends, and no row said which was its own (a user's walk of nanoGPT)."""
    running = make_site(
        "train.py", 157, "train", "explicit_sync", [], 1, 30.0, 0.0, line_exact=False, def_line=150
    )
    at_def = make_site(
        "model.py", 8, "forward", "explicit_sync", [], 1, 20.0, 0.0, line_exact=False, def_line=8
    )
    also_running = make_site(
        "loop.py", 40, "fit", "explicit_sync", [], 1, 10.0, 0.0, line_exact=False, def_line=12
    )
    data = Report(
        traces=[TraceInfo("t", "w", None, device="cuda")],
        summary=Summary(3, 60.0, 0.0, 100.0),
        syncs=[],
        sites=[running, at_def, also_running],
        latent=[],
    ).to_json()
    data["syncs"] = [
        {"site_key": site.key, "source": {"resolved_path": f"/src/{site.file}"}}
        for site in (running, at_def, also_running)
    ]
    lines = render_report(data).splitlines()
    rows = {line.split()[1]: line for line in lines if line[:1].isdigit()}
    assert set(rows) == {"train.py:157*", "model.py:8**", "loop.py:40*"}, rows
    legends = [line for line in lines if line.startswith("*")]
    assert [legend.split()[0] for legend in legends] == ["*", "**"]
    assert "already running" in legends[0] and "does not single out" in legends[1]
    # One kind alone keeps the one mark.
    data["sites"] = [data["sites"][1]]
    assert "model.py:8* " in render_report(data) + " "


def test_a_site_says_what_its_location_alone_does_not_backward_library_and_candidates() -> None:
    from tb_syncfinder.models import Source

    backward = make_site(
        "seg.py",
        82,
        "baseline_loss",
        "dynamic_shape",
        ["autograd::engine::evaluate_function: IndexBackward0"],
        5,
        100.0,
        50.0,
        backward=True,
        run_by=Source("seg.py", 127, 120, "baseline_step", True),
    )
    library = make_site(
        "gen.py",
        12,
        "generate_text",
        "scalar_readback",
        ["aten::item"],
        3,
        90.0,
        10.0,
        library=Source("/venv/site-packages/hf/utils.py", 880, 700, "_has_unfinished", True),
    )
    inexact = make_site(
        "loop.py",
        4,
        "main",
        "scalar_readback",
        ["aten::item"],
        2,
        80.0,
        0.0,
        line_exact=False,
        candidates=[7, 9],
    )
    report = Report(
        traces=[TraceInfo("w.json", "w", None, device="cuda")],
        summary=Summary(10, 270.0, 60.0, 40_000.0, step_count=4),
        syncs=[],
        sites=[backward, library, inexact],
        latent=[],
    )
    text = render_report(report, width=120)
    assert "backward of this line, run by line 127 (baseline_step)" in text
    assert "synced in /venv/site-packages/hf/utils.py:880 (_has_unfinished)" in text
    assert "candidate lines 7, 9" in text
    assert text.count("backward of") == 1 and text.count("candidate lines") == 1


def test_a_wrapped_kind_list_continues_under_its_text_not_under_a_second_label(
    sample_report: Report, monkeypatch: pytest.MonkeyPatch
) -> None:

    kinds = {
        "scalar_readback": 12,
        "dynamic_shape": 3,
        "blocking_host_to_device": 2,
        "explicit_sync": 1,
        "allocator_sync": 1,
        "collective_wait": 1,
    }
    report = msgspec.structs.replace(
        sample_report, summary=msgspec.structs.replace(sample_report.summary, by_kind=kinds)
    )
    monkeypatch.setenv("COLUMNS", "60")
    lines = render_report(report, color=False).splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("by kind"))
    assert lines[start + 1].strip() and "by kind" not in lines[start + 1]
    assert sum("by kind" in line for line in lines) == 1
    indent = lines[start].index("scalar_readback")
    assert lines[start + 1][:indent].strip() == ""


def test_lines_removed_above_a_function_since_profiling_are_told_from_a_running_frame(
    tmp_path,
) -> None:
    """The trace recorded ``train_step`` at line 6, a frame entered after the profiler
    started (so at its def line then); two lines were removed above it since, and line 6
    is now inside it. Not a frame running at line 6: the file changed, and its call is a
    candidate, not claimed."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    from tb_syncfinder import analyze

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(
        "import torch\n\n\ndef train_step(loss):\n    x = 1\n    y = 2\n    return loss.item()\n"
    )
    b = KinetoTraceBuilder()
    with b.frame(("train.py", 30, "<module>")), b.frame(("train.py", 25, "main")):
        with b.frame(("torch/profiler/profiler.py", 342, "start_trace")):
            b.advance(5)
        for n in range(2):
            with b.step(n):
                item_sync(b, stack=[("train.py", 6, "train_step")], kernel_us=200)
    b.write(tmp_path / "run" / "worker0.pt.trace.json")
    data = analyze(tmp_path / "run", source_roots=[str(tmp_path / "src")]).to_json()
    (site,) = data["sites"]
    assert (site["line"], site["def_line"], site["line_exact"]) == (4, 4, False)
    assert (site["recorded_line"], site["candidates"]) == (6, [7])
    assert "the file changed since profiling" in render_report(data)


def test_a_file_changed_since_profiling_is_said_so_with_its_call_lines_as_candidates(
    tmp_path,
) -> None:
    """The trace recorded ``train_step`` at line 2; lines were added above it since: the
    site points at the function as it is now, never exact, and the report says why."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    from tb_syncfinder import analyze

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(
        "import torch\n\n\ndef train_step(loss):\n    x = 1\n    return loss.item()\n"
    )
    b = KinetoTraceBuilder()
    for n in range(2):
        with b.step(n):
            item_sync(b, stack=[("train.py", 2, "train_step")], kernel_us=200)
    b.write(tmp_path / "run" / "worker0.pt.trace.json")
    data = analyze(tmp_path / "run", source_roots=[str(tmp_path / "src")]).to_json()
    (site,) = data["sites"]
    assert (site["line"], site["def_line"], site["line_exact"]) == (4, 4, False)
    assert (site["recorded_line"], site["candidates"]) == (2, [6])
    assert {s["source"]["recorded_line"] for s in data["syncs"]} == {2}
    text = render_report(data)
    assert "train.py:4*" in text and "candidate lines 6" in text
    assert "the file changed since profiling" in text
    assert "does not single out" not in text


def test_a_function_gone_from_its_file_is_reported_at_its_recorded_line_and_said_so(
    tmp_path,
) -> None:
    """The trace recorded ``train_step`` at line 6; the function was renamed since, and
    line 6 is now inside ``fit``. The site stays at the recorded line, names no def line
    (``fit``'s is not the frame's), and the report says the file changed."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    from tb_syncfinder import analyze

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(
        "import torch\n\n\ndef fit(loss):\n    x = 1\n    y = 2\n    return loss.item()\n"
    )
    b = KinetoTraceBuilder()
    for n in range(2):
        with b.step(n):
            item_sync(b, stack=[("train.py", 6, "train_step")], kernel_us=200)
    b.write(tmp_path / "run" / "worker0.pt.trace.json")
    data = analyze(tmp_path / "run", source_roots=[str(tmp_path / "src")]).to_json()
    (site,) = data["sites"]
    assert (site["line"], site["def_line"], site["line_exact"]) == (6, None, False)
    assert (site["recorded_line"], site["candidates"]) == (6, [])
    text = render_report(data)
    assert "train.py:6*" in text
    assert "no such function there" in text
    assert "already running" not in text and "changed since profiling (the trace" not in text


def test_compare_names_a_row_of_several_lines_by_every_line(sample_report: Report) -> None:
    from tb_syncfinder.compare import compare

    base = sample_report.to_json()
    twice = dict(next(s for s in base["sites"] if s["kind"] == "scalar_readback"), line=43)
    base["sites"].append(twice)
    new = sample_report.to_json()
    new["sites"] = [s for s in new["sites"] if s["kind"] != "scalar_readback"]
    text = render_compare(compare(base, new))
    assert re.search(r"^fixed\s+\S*train\.py:42,43\s", text, re.M), text


def test_compare_names_a_site_without_a_stack_as_the_report_does(sample_report: Report) -> None:
    from tb_syncfinder.compare import compare

    base = sample_report.to_json()
    site = msgspec.to_builtins(
        make_site(None, None, None, "explicit_sync", [], 1, 5.0, 0.0, apis=["hipDeviceSynchronize"])
    )
    base["sites"].append(site)
    report_text = render_report(base)
    assert "[hipDeviceSynchronize] (no stack)" in report_text
    text = render_compare(compare(base, base))
    assert re.search(r"^same\s+\[hipDeviceSynchronize\] \(no stack\)", text, re.M), text


def test_a_cpu_only_report_without_its_latent_list_does_not_claim_there_are_none() -> None:
    from tb_syncfinder.outputs import ReportSet

    data = _cpu_only_report_json(latent_count=5, steps=1)
    data["latent_sites"] = [
        msgspec.to_builtins(
            make_site(None, None, None, "scalar_readback", ["aten::item"], 5, 0.0, 0.0, latent=True)
        )
    ]
    stripped = ReportSet(data, {"cpu": data}).without_latent().report  # report --no-latent
    text = render_report(stripped)
    assert "would synchronize on a GPU either" not in text
    assert "Latent syncs not listed (--no-latent): 5 calls in it would synchronize" in text
    none = render_report(_cpu_only_report_json(latent_count=0, steps=1))
    assert "No operator in it would synchronize on a GPU either." in none
    # ... with what a CPU-only trace cannot show, as under a latent list.
    assert "Not listed on a CPU-only trace" in " ".join(none.split())


def test_the_idle_after_syncs_is_not_called_idle_they_caused(sample_report: Report) -> None:
    """The sum of each sync's bubble (``gpu_idle_us``) is idle *after* syncs; only the
    replay's share (``sync_idle_share``: what goes away with them) is said to be caused."""
    data = sample_report.to_json()
    data["summary"].update(
        gpu_idle_us=2_000.0,  # 500 us per step over the 4 steps
        saving_how="predicted by replaying each profiled step",
        saving_method="replay",
        predicted_saving_per_step_us=100.0,
        sync_idle_share=0.002,
    )
    text = render_report(data)
    (idle,) = [line for line in text.splitlines() if "500 us per step" in line]
    assert idle.split()[:3] == ["GPU", "idle", "after"] and "caused" not in idle
    flowing = " ".join(text.split())  # wrapped lines joined
    assert (
        flowing.count("caused") == 1
        and "GPU idle caused by syncs (after them and later) 0.2% of the time" in flowing
    )


def test_the_share_says_it_is_of_the_hosts_step_when_the_device_step_is_longer(
    sample_report: Report,
) -> None:
    summary = sample_report.summary
    assert "device's is longer" not in render_report(sample_report, color=False)
    summary.mean_wall_step_time_us = summary.mean_step_time_us * 1.7
    summary.mean_device_step_time_us = summary.mean_wall_step_time_us
    text = render_report(sample_report, color=False)
    host = format_us(summary.mean_step_time_us)
    assert f"(of the host's {host} step; the device's is longer)" in text


def test_a_trace_without_step_markers_says_it_counts_as_one_step(sample_report: Report) -> None:
    marked = render_report(sample_report, color=False)
    assert "without ProfilerStep markers" not in marked
    sample_report.traces[0].step_markers = False
    text = render_report(sample_report, color=False)
    assert "1 trace without ProfilerStep markers, each counted as one" in text


def test_compare_names_a_changed_latent_site_by_its_location() -> None:
    row = {
        "key": "train.py:train_step:aten::nonzero:dynamic_shape",
        "file": "train.py",
        "line": 21,
        "func": "train_step",
        "kind": "dynamic_shape",
        "ops": ["aten::nonzero"],
        "status": "new",
        "before": None,
        "after": {"lines": [21]},
    }
    result = {"sites": [], "latent_sites": [row], "counts": {"new": 1}, "base": {}, "new": {}}
    text = render_compare(result, color=False)
    assert "new    train.py:21 train_step aten::nonzero (dynamic_shape)" in text


def test_syncs_outside_any_step_are_counted_and_said_so(sample_report: Report) -> None:
    assert "outside any step" not in render_report(sample_report, color=False)
    sample_report.syncs[0].step = None  # after the last step: in the totals, in no step
    text = render_report(sample_report, color=False)
    assert "(12 over 4 steps, 1 of them outside any step)" in text


def test_a_large_jobs_section_names_rank_ranges_and_shows_the_late_ranks_only() -> None:
    from tb_syncfinder.outputs.job_text import RANK_ROWS, job_lines

    ranks = [r for r in range(320) if r not in (11, 299)]
    late = {137: 2990.0, 250: 1190.0}
    job = {
        "world_size": 320,
        "backend": "nccl",
        "ranks": ranks,
        "missing_ranks": [11, 299],
        "site_count": 2,
        "rank_totals": [
            {"rank": r, "worker": f"rank{r}", "late_us": late.get(r, 0.0), "caused_wait_us": 0.0}
            for r in ranks
        ],
        "rank_steps": [
            {"rank": r, "step": 1, "late_us": late.get(r, 0.0), "wait_us": 5.0} for r in ranks
        ],
        "sites": [
            {
                "rank": 137,
                "file": "train.py",
                "line": 80,
                "caused_wait_us": 16.5e3,
                "job_saving_us": 13.0,
                "job_saving_per_step_us": 13.0,
            },
            {
                "rank": 0,
                "file": "train.py",
                "line": 80,
                "caused_wait_us": 0.0,
                "job_saving_us": 0.0,
                "job_saving_per_step_us": 0.0,
            },
        ],
    }
    lines = job_lines({"job": job}, lambda text, *_: text, 100)
    text = "\n".join(lines)
    assert lines[0].startswith("Job: world size 320 (nccl), ranks 0-10, 12-298, 300-319")
    assert all(len(line) <= 100 for line in lines)
    assert f"... {len(ranks) - RANK_ROWS} more ranks" in text
    rows = [line for line in lines if line.strip().startswith(("137 ", "250 "))]
    assert len(rows) == 4  # both late ranks, in the ranks table and the lateness grid
    # The site that cost nothing is out, and said to be, not counted as one hidden.
    assert "Top sites by cost to the job (1 of 1; 1 more cost the job nothing)" in text
    assert "wait it caused" in text


def test_a_jobs_top_sites_cut_by_the_json_are_counted_as_all_not_as_free() -> None:
    """60 sites that all cost the job something, 50 of them in the JSON: "(10 of 50; 10
    more cost the job nothing)" called the 10 left out free."""
    from tb_syncfinder.outputs.job_text import job_lines

    sites = [
        {"rank": 0, "file": "train.py", "line": n, "caused_wait_us": 100.0 - n,
         "job_saving_us": 100.0 - n, "job_saving_per_step_us": 1.0}
        for n in range(50)
    ]  # fmt: skip
    job = {"world_size": 2, "backend": "nccl", "ranks": [0, 1], "site_count": 60, "sites": sites}
    text = "\n".join(job_lines({"job": job}, lambda text, *_: text, 100, top=10))
    assert "Top sites by cost to the job (10 of 60)" in text


def test_a_jobs_site_not_at_the_syncing_line_is_marked_as_in_the_sites_table() -> None:
    from tb_syncfinder.outputs.job_text import job_lines

    site = {
        "rank": 1,
        "file": "job_workload.py",
        "line": 94,
        "line_exact": False,
        "caused_wait_us": 8990.0,
        "job_saving_us": 20080.0,
        "job_saving_per_step_us": 2510.0,
    }
    job = {"world_size": 2, "backend": "nccl", "ranks": [0, 1], "site_count": 1, "sites": [site]}
    text = "\n".join(job_lines({"job": job}, lambda text, *_: text, 100))
    assert "job_workload.py:94*" in text
    site["line_exact"] = True
    assert "job_workload.py:94*" not in "\n".join(job_lines({"job": job}, lambda t, *_: t, 100))


def test_a_job_with_no_collective_matched_measures_no_collective_wait_nor_lateness() -> None:
    """One rank of sixteen: "0 collectives matched", then "collective wait 0 us" beside its
    33.5 ms collective_wait site, and a lateness grid of 0s its legend said would be dots."""
    from tb_syncfinder.outputs.job_text import job_lines

    total = {"rank": 0, "worker": "w0", "sync_wait_us": 762e3, "wait_in_collectives_us": 0.0}
    steps = [
        {"rank": 0, "step": n, "wait_us": 0.0, "late_us": 0.0, "collectives": 0} for n in (1, 2)
    ]
    job = {"world_size": 16, "backend": "nccl", "ranks": [0], "collective_count": 0,
           "rank_totals": [total], "rank_steps": steps}  # fmt: skip
    text = "\n".join(job_lines({"job": job}, lambda text, *_: text, 100))
    row = next(line for line in text.splitlines() if line.strip().startswith("0  w0"))
    assert row.split()[-3:] == ["-", "-", "-"], row
    assert "Lateness per rank and step" not in text
    job["collective_count"] = 3  # matched elsewhere: a step of this rank without one is "."
    text = "\n".join(job_lines({"job": job}, lambda text, *_: text, 100))
    grid = next(line for line in text.splitlines()[::-1] if line.strip().startswith("0 "))
    assert grid.split()[1:] == [".", "."], grid


@pytest.mark.parametrize(
    ("what_if", "matched", "said"),
    [
        ("replay", 4, "for the job ~2.51 ms per step, its sites' savings to the job added up"),
        ("bound", 4, "for the job ≤2.51 ms per step"),
        ("none", 4, None),  # the job's what-if did not run: no figure of the job's step
        ("replay", 0, None),  # no collective matched: the ranks are not known to step together
    ],
)
def test_a_jobs_summary_says_what_its_step_saves_only_where_the_job_was_costed(
    sample_report: Report, what_if: str, matched: int, said: str | None
) -> None:
    data = sample_report.to_json()
    data["summary"].update(saving_how="predicted by replaying", saving_method="replay")
    data["job"] = {"world_size": 2, "ranks": [0, 1], "collective_count": matched,
                   "what_if": what_if, "job_saving_per_step_us": 2510.0}  # fmt: skip
    flowing = " ".join(render_report(data).split())
    if said is None:
        assert "for the job" not in flowing
    else:
        assert said in flowing, flowing


def test_the_profilers_note_has_a_line_of_its_own_and_is_not_repeated(
    sample_report: Report,
) -> None:
    """``profiler_note`` is said once, on its own labelled line under how the saving was
    obtained, with ``saving_note`` still in parentheses there."""
    note = "The profiler's own overhead is about 2.92 ms of the host's time per step here."
    data = sample_report.to_json()
    data["summary"].update(
        saving_how="predicted by replaying each profiled step",
        saving_method="replay",
        saving_note="analysed in 3 windows",
        profiler_note=note,
    )
    flowing = " ".join(render_report(data).split())
    assert flowing.count("The profiler's own overhead") == 1
    assert "replaying each profiled step (analysed in 3 windows) profiler The profiler's" in flowing
    data["summary"]["saving_note"] = None
    flowing = " ".join(render_report(data).split())
    assert "replaying each profiled step profiler The profiler's" in flowing


def test_a_site_that_saves_more_with_another_fixed_says_so_under_it(
    sample_report: Report,
) -> None:
    note = (
        "Fixing this alone saves 287 us per step: the .tolist() at line 204 then waits for "
        "the same GPU work. Fixed together they save 4.37 ms per step."
    )
    data = sample_report.to_json()
    data["sites"][0].update(fix_with=[data["sites"][1]["key"]], fix_with_note=note)
    text = render_report(data)
    assert note in " ".join(text.split())
    lines = text.splitlines()
    first = next(n for n, line in enumerate(lines) if "Fixing this alone" in line)
    assert lines[first].startswith("    Fixing this alone saves 287 us per step")
    assert all(len(line) <= WIDTH for line in lines)


def test_files_under_the_root_are_named_relative_to_it_and_the_json_is_left_as_is() -> None:
    from tb_syncfinder.outputs.text import with_relative_files

    root = "/home/me/proj"
    site = {
        "file": "/home/me/proj/pkg/train.py",
        "run_by": {"file": "/home/me/proj/pkg/loop.py", "line": 3},
        "library": {"file": "/home/me/proj/.venv/lib/torch/functional.py", "line": 786},
    }
    outside = {"file": "/usr/lib/other.py", "library": {"file": "torch/functional.py"}}
    data = {"sites": [site, outside], "job": {"sites": [dict(site)]}}
    shown = with_relative_files(data, root)
    first, second = shown["sites"]
    assert first["file"] == os.path.join("pkg", "train.py")
    assert first["run_by"]["file"] == os.path.join("pkg", "loop.py")
    assert first["library"]["file"] == os.path.join(".venv", "lib", "torch", "functional.py")
    assert second == outside  # outside the root, or already relative: as recorded
    assert shown["job"]["sites"][0]["file"] == os.path.join("pkg", "train.py")
    assert data["sites"][0]["file"] == "/home/me/proj/pkg/train.py"  # a copy


def test_a_file_the_trace_named_relative_to_its_script_is_named_as_the_shell_names_it() -> None:
    """pytorch/examples' ``vae/main.py``, run from ``vae/`` and reported from the folder
    above: the trace names it ``main.py``, SARIF ``vae/main.py``, and the table said
    ``main.py`` (a user's walk). The file its syncs were read from names it now."""
    from tb_syncfinder.outputs.text import with_relative_files

    root = "/home/me/examples"
    read = {"source": {"resolved_path": "/home/me/examples/vae/main.py"}, "site_key": "k"}
    elsewhere = {"source": {"resolved_path": "/tmp/x/main.py"}, "site_key": "o"}
    data = {
        "sites": [{"key": "k", "file": "main.py"}],
        "latent_sites": [{"key": "o", "file": "main.py"}, {"key": "u", "file": "train.py"}],
        "syncs": [read],
        "latent": [elsewhere],
    }
    shown = with_relative_files(data, root)
    assert shown["sites"][0]["file"] == os.path.join("vae", "main.py")
    # Read outside the root, or not read: as recorded.
    assert [row["file"] for row in shown["latent_sites"]] == ["main.py", "train.py"]


def test_what_a_latent_list_leaves_out_is_said_for_each_kind_of_trace_in_the_run() -> None:
    """A run of torch_npu's Level0 traces and CPU-only ones was told only the CPU's: the
    copies the NPU traces cannot show went unsaid."""
    from tb_syncfinder.outputs.text import latent_not_listed

    npu = {"device": "npu", "has_runtime": False, "has_gpu_activity": False}
    cpu = {"device": "cpu", "has_gpu_activity": False, "has_stacks": False}
    only_npu = latent_not_listed([npu])
    assert only_npu.startswith("Not listed: copies") and "CPU-only" not in only_npu
    assert latent_not_listed([cpu]).startswith("Not listed on a CPU-only trace")
    both = latent_not_listed([npu, cpu])
    assert "AscendCL calls show (the NPU traces)." in both and "CPU-only trace" in both
