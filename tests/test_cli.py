from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tb_syncfinder.cli import main
from tb_syncfinder.models import SCHEMA


def write_item_trace(path: Path, steps: int = 2, items_per_step: int = 3) -> Path:
    """A minimal CUDA trace as Kineto writes one: per step, a kernel then ``tensor.item()``
    (aten::item > _local_scalar_dense > cudaMemcpyAsync DtoH pageable + cudaStreamSynchronize).
    """
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
    ]
    corr, t = 1, 1000.0
    for step in range(1, steps + 1):
        start, body = t, []
        for _ in range(items_per_step):
            body += [
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mul",
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": 20,
                    "args": {},
                },
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 5,
                    "dur": 10,
                    "args": {"correlation": corr},
                },
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "mul_kernel",
                    "pid": 0,
                    "tid": 7,
                    "ts": t + 20,
                    "dur": 200,
                    "args": {"correlation": corr, "device": 0, "stream": 7},
                },
            ]
            corr, t = corr + 1, t + 30
            body += [
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::item",
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": 300,
                    "args": {},
                },
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::_local_scalar_dense",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 2,
                    "dur": 296,
                    "args": {},
                },
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaMemcpyAsync",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 5,
                    "dur": 10,
                    "args": {"correlation": corr},
                },
                {
                    "ph": "X",
                    "cat": "gpu_memcpy",
                    "name": "Memcpy DtoH (Device -> Pageable)",
                    "pid": 0,
                    "tid": 7,
                    "ts": t + 240,
                    "dur": 2,
                    "args": {"correlation": corr, "bytes": 4, "device": 0, "stream": 7},
                },
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaStreamSynchronize",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 20,
                    "dur": 260,
                    "args": {"correlation": corr + 1},
                },
            ]
            corr, t = corr + 2, t + 400
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 1,
                "tid": 1,
                "ts": start - 1,
                "dur": t - start + 2,
                "args": {},
            }
        )
        events += body
        t += 50
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def write_cpu_trace(
    path: Path, op: str = "aten::nonzero", count: int = 1, step_marker: bool = True
) -> Path:
    """A CPU-only trace of ``count`` calls of ``op`` (aten::nonzero would synchronize on a
    GPU: a latent finding), in ProfilerStep#1 unless ``step_marker`` is False."""
    where = {"ph": "X", "pid": 1, "tid": 1, "args": {}}
    events = [
        {**where, "cat": "cpu_op", "name": op, "ts": 10.0 + 50 * n, "dur": 30.0}
        for n in range(count)
    ]
    if step_marker:
        span = {"name": "ProfilerStep#1", "ts": 0.0, "dur": 50.0 * count + 50}
        events.insert(0, {**where, "cat": "user_annotation", **span})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tb_syncfinder.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_report_prints_sites_and_summary_as_plain_text_when_piped(tmp_path: Path) -> None:
    trace = write_item_trace(tmp_path / "w0.pt.trace.json")
    proc = run_cli("report", str(trace))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout  # piped: no colour
    assert "aten::item" in proc.stdout and "scalar_readback" in proc.stdout
    assert "syncs per step   3.0  (6 over 2 steps)" in proc.stdout


def test_report_says_how_a_trace_read_in_windows_goes_and_nothing_for_a_small_one(
    tmp_path: Path,
) -> None:
    """A large trace's analysis is minutes of silence: the report says on stderr that it
    reads it in windows, why, and each window as it is done; a small trace's stays quiet."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    b = KinetoTraceBuilder()
    for n in range(1, 41):
        with b.step(n):
            item_sync(b, stack=[("train.py", 8, "train_step")])
    trace = b.write(tmp_path / "w0.pt.trace.json")
    quiet = run_cli("report", str(trace))
    assert quiet.returncode == 0 and quiet.stderr == ""
    windowed = run_cli("report", str(trace), "--window-mb", str(trace.stat().st_size / 4e6))
    assert windowed.returncode == 0, windowed.stderr
    lines = windowed.stderr.splitlines()
    assert "analysed in" in lines[0] and "(the window size asked for)" in lines[0]
    count = int(lines[0].split("analysed in ")[1].split()[0])
    assert count >= 3
    assert lines[1 : 1 + count] == [
        f"tb-syncfinder: {trace}: window {n} of {count} analysed" for n in range(1, count + 1)
    ]
    assert lines[-1].startswith(f"tb-syncfinder: {trace}: done at ")


def test_report_json_follows_the_schema(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace = write_item_trace(tmp_path / "w0.pt.trace.json")
    assert main(["report", str(trace), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == SCHEMA
    assert {"traces", "summary", "syncs", "sites", "latent"} <= set(report)
    assert report["summary"]["sync_count"] == 6
    sync = report["syncs"][0]
    for key in (
        "kind",
        "api",
        "apis",
        "op",
        "trigger_op",
        "step",
        "thread",
        "ts_us",
        "host_wait_us",
        "gpu_idle_after_us",
        "annotations",
        "module",
        "stack",
        "source",
        "trace",
    ):
        assert key in sync
    assert sync["op"] == "aten::item" and sync["kind"] == "scalar_readback"
    assert sync["host_wait_us"] > 0


def test_format_csv_and_sarif(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace = write_item_trace(tmp_path / "w0.pt.trace.json")
    assert main(["report", str(trace), "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rank,latent,file,line") and len(lines) == 2
    assert main(["report", str(trace), "--format", "sarif"]) == 0
    sarif = json.loads(capsys.readouterr().out)
    assert sarif["version"] == "2.1.0"


def test_max_syncs_per_step_exits_1_naming_the_step(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trace = write_item_trace(tmp_path / "w0.pt.trace.json", steps=2, items_per_step=3)
    assert main(["report", str(trace), "--max-syncs-per-step", "3"]) == 0
    assert main(["report", str(trace), "--max-syncs-per-step", "2"]) == 1
    err = capsys.readouterr().err
    assert "2 steps of w0.pt.trace.json have more than 2 syncs, up to 3 (step 1); at " in err
    assert err.count("too many syncs") == 1


def test_nonexistent_path_exits_2_with_the_reason(tmp_path: Path) -> None:
    proc = run_cli("report", str(tmp_path / "missing"))
    assert proc.returncode == 2
    assert "missing: no such file or directory" in proc.stderr


def test_several_trace_files_of_a_folder_are_reported_as_that_folders_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # `report run/*.pt.trace.json` (a shell glob) failed with "unrecognized arguments".
    run = tmp_path / "run"
    for worker in ("w0", "w1", "w2"):
        write_item_trace(run / f"{worker}.pt.trace.json")
    files = [str(run / "w0.pt.trace.json"), str(run / "w1.pt.trace.json")]
    assert main(["report", *files, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["path"] for t in doc["traces"]] == files
    assert [r["run"] for r in doc["runs"]] == ["run"]
    # A trace given twice (itself and in its folder) is analysed once.
    assert main(["report", files[0], str(run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(t["path"] for t in doc["traces"]) == sorted(str(p) for p in run.iterdir())


def test_several_paths_name_a_folders_run_once_whatever_their_order_or_links(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # A review: a logdir and a file of its nested run 'a/b' gave one run or two by their
    # order; Ascend workers' files of one run, and a logdir seen through a link beside its
    # real path, were refused as two runs of one name.
    logdir = tmp_path / "logs"
    for worker in ("w1", "w2"):
        write_item_trace(logdir / "a" / "b" / f"{worker}.pt.trace.json")
    one_file = str(logdir / "a" / "b" / "w1.pt.trace.json")
    for argv in ([str(logdir), one_file], [one_file, str(logdir)]):
        assert main(["report", *argv, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [r["run"] for r in doc["runs"]] == ["a/b"] and len(doc["traces"]) == 2
    (tmp_path / "link").symlink_to(logdir)
    assert main(["report", str(tmp_path / "link" / "a" / "b"), str(logdir / "a"), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["traces"]) == 2
    output = Path("ASCEND_PROFILER_OUTPUT") / "trace_view.json"
    ascend = [tmp_path / "npu" / "run" / f"host_{n}_ascend_pt" / output for n in (1, 2)]
    for path in ascend:
        write_item_trace(path)
    assert main(["report", *map(str, ascend), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in doc["runs"]] == ["run"] and len(doc["traces"]) == 2


def test_two_runs_of_one_name_in_two_folders_are_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    for side in ("a", "b"):
        write_item_trace(tmp_path / side / "run" / "w0.pt.trace.json")
    assert main(["report", str(tmp_path / "a" / "run"), str(tmp_path / "b" / "run")]) == 2
    err = capsys.readouterr().err
    assert "two runs named 'run'" in err
    assert str(tmp_path / "a" / "run") in err and str(tmp_path / "b" / "run") in err


def test_help_keeps_commands_whole_and_gives_the_exit_statuses() -> None:
    report_help = run_cli("report", "--help").stdout
    assert "pip install 'ray>=2.10'" in report_help  # not split at its hyphen or '>='
    assert "exit status: 0 fine; 1 when --max-syncs-per-step" in " ".join(report_help.split())
    assert "exit status: 0 fine; 1 with --fail-on-regression" in " ".join(
        run_cli("compare", "--help").stdout.split()
    )


def test_the_table_names_files_under_the_working_directory_relative_to_it(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An editable install records /home/me/repo/pkg/train.py; in /home/me/repo the user
    # reads pkg/train.py (the JSON keeps what the trace recorded).
    from kineto_builder import KinetoTraceBuilder, item_sync

    source = tmp_path / "repo" / "pkg" / "train.py"
    source.parent.mkdir(parents=True)
    source.write_text("\n" * 20)
    b = KinetoTraceBuilder()
    for step in (1, 2):
        with b.step(step):
            item_sync(b, stack=[(str(source), 8, "train_step")])
    trace = b.write(tmp_path / "run" / "w0.pt.trace.json")
    monkeypatch.chdir(tmp_path / "repo")
    assert main(["report", str(trace)]) == 0
    table = capsys.readouterr().out
    assert f"pkg{os.sep}train.py:8" in table and str(source) not in table
    assert main(["report", str(trace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sites"][0]["file"] == str(source)
    monkeypatch.chdir(tmp_path / "run")  # not under it: named whole
    assert main(["report", str(trace)]) == 0
    assert f"{source}:8" in capsys.readouterr().out


def test_folder_without_traces_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    assert main(["report", str(tmp_path)]) == 2
    assert "no traces found" in capsys.readouterr().err


def test_every_trace_unreadable_exits_2_naming_each_file(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "a.pt.trace.json").write_text('{"traceEvents": [')
    (tmp_path / "b.pt.trace.json").write_bytes(b"\x00\x01 not json")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "a.pt.trace.json: " in err and "b.pt.trace.json: " in err


def test_broken_trace_next_to_a_good_one_is_listed_and_the_good_one_analysed(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_item_trace(tmp_path / "run" / "good.pt.trace.json")
    (tmp_path / "run" / "bad.pt.trace.json").write_text('{"traceEvents": [')
    assert main(["report", str(tmp_path / "run")]) == 0
    captured = capsys.readouterr()
    assert "aten::item" in captured.out
    assert "Errors (1 file skipped)" in captured.out
    assert f"{tmp_path / 'run' / 'bad.pt.trace.json'}: " in captured.out
    # Also on stderr: the Errors section comes last, unseen behind `| head` or `-o FILE`.
    assert f"warning: {tmp_path / 'run' / 'bad.pt.trace.json'}: " in captured.err
    assert main(["report", str(tmp_path / "run"), "--json"]) == 0
    captured = capsys.readouterr()
    errors = [t for t in json.loads(captured.out)["traces"] if t["error"]]
    assert len(errors) == 1 and "bad.pt.trace.json" in captured.err


def test_cpu_only_trace_reports_latent_findings_unless_disabled(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trace = write_cpu_trace(tmp_path / "cpu.pt.trace.json")
    assert main(["report", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "would synchronize on a GPU" in out and "aten::nonzero" in out
    assert main(["report", str(trace), "--no-latent", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["latent"] == [] and report["latent_sites"] == []


def test_colour_follows_tty_and_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    from tb_syncfinder.cli import _use_color

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert _use_color("auto", Tty()) is True
    monkeypatch.setenv("TERM", "dumb")  # a terminal that shows escape codes as text
    assert _use_color("auto", Tty()) is False
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("NO_COLOR", "1")
    assert _use_color("auto", Tty()) is False
    assert _use_color("always", Tty()) is True
    assert _use_color("auto", sys.stdout) is False or sys.stdout.isatty()


def test_color_always_colours_a_file_too(tmp_path: Path) -> None:
    trace = write_item_trace(tmp_path / "w.pt.trace.json")
    out = tmp_path / "r.txt"
    assert main(["report", str(trace), "--color", "always", "-o", str(out)]) == 0
    assert "\x1b[" in out.read_text()
    assert main(["report", str(trace), "-o", str(out)]) == 0
    assert "\x1b[" not in out.read_text()


def test_bad_option_exits_2(capsys: pytest.CaptureFixture) -> None:
    assert main(["report", "x", "--path-map", "no-equals-sign"]) == 2
    assert "expected FROM=TO" in capsys.readouterr().err
    assert main([]) == 2


def test_compare_reports_fixed_site_and_fails_on_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    base = write_item_trace(tmp_path / "base" / "w.pt.trace.json", items_per_step=3)
    saved = tmp_path / "base.json"
    assert main(["report", str(base), "--json", "-o", str(saved)]) == 0
    assert json.loads(saved.read_text())["schema"] == SCHEMA
    new = write_cpu_trace(tmp_path / "new" / "w.pt.trace.json")
    assert main(["compare", str(saved), str(new)]) == 0
    assert "fixed" in capsys.readouterr().out
    assert main(["compare", str(new), str(saved), "--fail-on-regression", "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["counts"]["new"] == 1
    assert "new:" in captured.err


def test_annotate_writes_the_trace_with_a_sync_advisor_track(tmp_path: Path) -> None:
    trace = write_item_trace(tmp_path / "w.pt.trace.json")
    out = tmp_path / "annotated.json"
    assert main(["report", str(trace), "--annotate", str(out), "-o", str(tmp_path / "r")]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    slices = [e for e in events if e.get("cat") == "sync_advisor"]
    assert len([e for e in slices if e["name"].startswith("scalar_readback")]) == 6


def test_demo_subcommand_is_wired(capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("tb_syncfinder.demo.cli")
    with pytest.raises(SystemExit) as exc:
        from tb_syncfinder.cli import build_parser

        build_parser().parse_args(["demo", "--help"])
    assert exc.value.code == 0
    assert main(["demo", "--help"]) == 0
    assert "--logdir" in capsys.readouterr().out


def test_python_dash_m_tb_syncfinder_runs_the_same_command_line():
    done = subprocess.run(
        [sys.executable, "-m", "tb_syncfinder", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "0.1.0" in done.stdout + done.stderr


def write_logdir_of_runs(logdir: Path) -> Path:
    """Three runs as the PyTorch Profiler tab lists them: ``busy`` (3 syncs in each of 2
    steps), ``calm`` (1 sync in each of 4 steps) and ``cpu`` (a CPU-only trace)."""
    write_item_trace(logdir / "busy" / "w0.pt.trace.json", steps=2, items_per_step=3)
    write_item_trace(logdir / "calm" / "w0.pt.trace.json", steps=4, items_per_step=1)
    write_cpu_trace(logdir / "cpu" / "w0.pt.trace.json")
    return logdir


def test_logdir_with_several_runs_reports_each_run_over_its_own_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    logdir = write_logdir_of_runs(tmp_path / "logs")
    assert main(["report", str(logdir)]) == 0
    out = capsys.readouterr().out
    busy, calm, cpu = (out.index(f"== {name}: ") for name in ("busy", "calm", "cpu"))
    overview = out.index("Runs (3)")
    assert busy < calm < cpu < overview
    assert "syncs per step   3.0  (6 over 2 steps)" in out[busy:calm]
    assert "syncs per step   1.0  (4 over 4 steps)" in out[calm:cpu]
    assert "would synchronize on a GPU" in out[cpu:overview]
    rows = {line.split()[0]: line.split() for line in out[overview:].splitlines()[2:]}
    assert rows["busy"][1:3] == ["2", "3.0"] and rows["calm"][1:3] == ["4", "1.0"]
    assert rows["cpu"][-1] == "1.0"  # latent syncs per step of the CPU-only run


def test_run_option_restricts_the_report_to_the_named_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    logdir = write_logdir_of_runs(tmp_path / "logs")
    assert main(["report", str(logdir / "calm")]) == 0
    alone = capsys.readouterr().out
    assert main(["report", str(logdir), "--run", "calm"]) == 0
    assert capsys.readouterr().out == alone  # one run reads as it always did
    assert main(["report", str(logdir), "--run", "calm", "--run", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "== calm: " in out and "== cpu: " in out and "== busy: " not in out


@pytest.mark.parametrize("fmt", ["json", "sarif", "csv", "table"])
def test_output_file_is_written_naming_each_error_when_no_trace_could_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture, fmt: str
) -> None:
    """A CI step that uploads the SARIF or parses the JSON found no file at all (exit 2,
    the reason on stderr only): the file now says why, and the exit status is still 2."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "w.pt.trace.json").write_text("xx")
    out = tmp_path / f"out.{fmt}"
    assert main(["report", str(run), "--format", fmt, "-o", str(out)]) == 2
    assert "no trace could be read" in capsys.readouterr().err
    text = out.read_text()
    assert "invalid JSON" in text or (fmt == "csv" and text.startswith("rank,"))  # CSV: sites
    if fmt == "sarif":
        (invocation,) = json.loads(text)["runs"][0]["invocations"]
        assert invocation["executionSuccessful"] is False
    if fmt == "json":
        assert json.loads(text)["traces"][0]["error"].startswith("invalid JSON")


def test_unknown_run_exits_2_listing_the_runs_found(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    logdir = write_logdir_of_runs(tmp_path / "logs")
    assert main(["report", str(logdir), "--run", "busy", "--run", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no run named 'nope'" in err and "runs found: busy, calm, cpu" in err


def test_json_of_a_logdir_is_one_report_with_each_runs_own_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    logdir = write_logdir_of_runs(tmp_path / "logs")
    assert main(["report", str(logdir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == SCHEMA
    assert report["summary"]["sync_count"] == 10  # the merged report, as before
    runs = {entry["run"]: entry for entry in report["runs"]}
    assert list(runs) == ["busy", "calm", "cpu"]
    assert runs["busy"]["summary"]["syncs_per_step"] == 3.0
    assert runs["calm"]["summary"]["syncs_per_step"] == 1.0
    assert runs["cpu"]["summary"]["latent_count"] == 1 and runs["cpu"]["latent_site_count"] == 1
    assert runs["busy"]["traces"] == [str(logdir / "busy" / "w0.pt.trace.json")]
    # Each run's own sites, as the table and CSV give them: the merged ones spread a run's
    # syncs over every run's steps.
    assert [site["per_step"] for site in runs["calm"]["sites"]] == [1.0]
    assert runs["calm"]["sites"][0]["key"] in {site["key"] for site in report["sites"]}
    assert len(runs["cpu"]["latent_sites"]) == 1 and runs["busy"]["latent_sites"] == []
    assert main(["report", str(logdir), "--json", "--run", "calm"]) == 0
    picked = json.loads(capsys.readouterr().out)
    assert picked["summary"]["sync_count"] == 4 and picked["sites"][0]["per_step"] == 1.0
    assert [entry["run"] for entry in picked["runs"]] == ["calm"]


def test_csv_of_a_logdir_has_rows_per_run_with_a_run_column(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import csv
    import io

    logdir = write_logdir_of_runs(tmp_path / "logs")
    assert main(["report", str(logdir), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    by_run = {row["run"]: row for row in rows}
    assert set(by_run) == {"busy", "calm", "cpu"}
    assert by_run["busy"]["per_step"] == "3" and by_run["calm"]["per_step"] == "1"
    assert by_run["cpu"]["latent"] == "1"


def test_sarif_results_of_several_runs_name_their_run(sample_report) -> None:
    from tb_syncfinder.outputs.sarif import sarif_by_run

    data = sample_report.to_json()
    runs = {"baseline": data, "optimized": {**data, "sites": data["sites"][:1]}}
    log = sarif_by_run(data, runs)
    assert len(log["runs"]) == 1  # one upload for code scanning
    results = log["runs"][0]["results"]
    assert [r["properties"]["run"] for r in results] == ["baseline", "baseline", "optimized"]
    assert all(r["message"]["text"].startswith(f"Run {r['properties']['run']}: ") for r in results)
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in results)
    assert (
        "run" not in sarif_by_run(data, {"baseline": data})["runs"][0]["results"][0]["properties"]
    )


def test_max_syncs_per_step_of_a_logdir_names_the_run_and_step(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    logdir = write_logdir_of_runs(tmp_path / "logs")
    assert main(["report", str(logdir), "--max-syncs-per-step", "3"]) == 0
    capsys.readouterr()
    assert main(["report", str(logdir), "--max-syncs-per-step", "2", "--json"]) == 1
    err = capsys.readouterr().err
    assert "run busy: 2 steps of w0.pt.trace.json have more than 2 syncs, up to 3 (step 1)" in err
    assert "run calm" not in err
    assert main(["report", str(logdir), "--max-syncs-per-step", "2", "--run", "calm"]) == 0


@pytest.mark.parametrize(
    "argv, reason",
    [
        (["-o", "{tmp}/missing/out.txt"], "no such directory"),
        (["-o", "{tmp}"], "it is a directory"),
        (["--json", "--annotate", "{tmp}/missing/a.json"], "no such directory"),
    ],
)
def test_an_output_that_cannot_be_written_exits_2_with_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], reason: str
) -> None:
    trace = write_item_trace(tmp_path / "w.pt.trace.json")
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    assert main(["report", str(trace), *argv]) == 2  # 1 is the CI gate's "too many syncs"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    path = argv[-1]
    assert f"{path}: {reason}" in err


def test_a_compare_output_that_cannot_be_written_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trace = write_item_trace(tmp_path / "w.pt.trace.json")
    assert main(["compare", str(trace), str(trace), "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--output {tmp_path}: it is a directory" in err


@pytest.mark.parametrize("command", ["report", "report --json", "annotate", "compare"])
def test_an_output_naming_an_analysed_trace_is_refused_and_the_trace_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture, command: str
) -> None:
    """A review's `report RUN -o RUN/x.pt.trace.json.gz` replaced the trace with the text
    report, exit 0."""
    trace = write_item_trace(tmp_path / "run" / "w.pt.trace.json")
    kept = trace.read_bytes()
    argv = {
        "report": ["report", str(trace.parent), "-o", str(trace)],
        "report --json": ["report", str(trace.parent), "--json", "-o", str(trace)],
        "annotate": ["report", str(trace), "--annotate", str(trace)],
        "compare": ["compare", str(trace), str(trace.parent), "-o", str(trace)],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{trace}: it is one of the traces analysed" in err, err
    assert trace.read_bytes() == kept


def test_an_output_that_fails_at_write_time_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tb_syncfinder import cli

    trace = write_item_trace(tmp_path / "w.pt.trace.json")
    monkeypatch.setattr(cli, "_check_writable", lambda path, option: None)
    out = tmp_path / "gone" / "out.txt"
    assert main(["report", str(trace), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--output {out}: no such file or directory" in err


@pytest.mark.parametrize("value", ["-5", "nan", "inf", "lots"])
def test_window_mb_must_be_zero_or_a_positive_number(
    tmp_path: Path, capsys: pytest.CaptureFixture, value: str
) -> None:
    trace = write_item_trace(tmp_path / "w.pt.trace.json")
    assert main(["report", str(trace), f"--window-mb={value}"]) == 2
    assert "argument --window-mb: expected" in capsys.readouterr().err
    assert main(["report", str(trace), "--window-mb", "0"]) == 0  # 0: never split


def test_window_mb_in_bytes_never_rounds_a_small_size_down_to_never_split() -> None:
    from tb_syncfinder.cli import _window_bytes

    assert _window_bytes(None) is None and _window_bytes(0.0) == 0
    assert _window_bytes(5.0) == 5_000_000 and _window_bytes(1e-9) == 1


def test_compare_warns_of_each_unreadable_trace_and_lists_it_in_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    write_item_trace(run / "good.pt.trace.json")
    (run / "x.pt.trace.json").write_text("")
    (run / "t.pt.trace.json").write_text('{"traceEvents": [')
    other = write_item_trace(tmp_path / "other" / "w.pt.trace.json")
    assert main(["compare", str(run), str(other)]) == 0
    err = capsys.readouterr().err
    assert f"warning: baseline: {run / 'x.pt.trace.json'}: " in err
    assert f"warning: baseline: {run / 't.pt.trace.json'}: " in err
    assert main(["compare", str(other), str(run), "--json"]) == 0
    captured = capsys.readouterr()
    unreadable = json.loads(captured.out)["unreadable"]
    assert sorted(e["path"] for e in unreadable) == [
        str(run / "t.pt.trace.json"),
        str(run / "x.pt.trace.json"),
    ]
    assert {e["side"] for e in unreadable} == {"new"} and all(e["error"] for e in unreadable)
    assert "warning: new run: " in captured.err


def test_csv_adds_the_predicted_saving_after_every_existing_column(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import csv
    import io

    trace = write_item_trace(tmp_path / "w0.pt.trace.json")
    assert main(["report", str(trace), "--json"]) == 0
    (site,) = json.loads(capsys.readouterr().out)["sites"]
    assert main(["report", str(trace), "--format", "csv"]) == 0
    header, row = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    first = (
        "rank,latent,file,line,line_exact,def_line,func,kind,ops,apis,count,per_step,"
        "host_wait_us,mean_host_wait_us,gpu_idle_us,share_of_step,steps,advice,key,run"
    ).split(",")
    assert header[: len(first)] == first  # none moved
    added = dict(zip(header[len(first) :], row[len(first) :], strict=True))
    assert set(added) == {
        "predicted_saving_us",
        "predicted_saving_per_step_us",
        "saving_method",
        "waiting_for",
        "predicted_saving_with_others_per_step_us",
        "fix_with",
        "unprofiled_predicted_saving_per_step_us",
        "notebook",
        "notebook_cell",
        "library_line",
        "library_func",
        "library_lines",
        "ranks",
    }
    assert added["unprofiled_predicted_saving_per_step_us"] == ""  # no step time given
    assert added["notebook"] == added["notebook_cell"] == ""  # not a Jupyter cell's
    assert added["library_line"] == added["library_func"] == ""  # no library call
    assert float(added["predicted_saving_us"]) == pytest.approx(
        site["predicted_saving_us"], abs=1e-3
    )
    assert added["saving_method"] == site["saving_method"]


def test_write_summaries_says_where_the_summaries_went(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trace = write_item_trace(tmp_path / "run" / "w0.pt.trace.json")
    assert main(["report", str(trace), "--write-summaries"]) == 0
    err = capsys.readouterr().err
    folder = tmp_path / "run" / ".sync_advisor"
    assert f"summaries of 1 trace written to {folder}\n" in err
    assert any(folder.iterdir())
    elsewhere = tmp_path / "summaries"
    argv = ["report", str(trace), "--write-summaries", "--summaries-dir", str(elsewhere)]
    assert main(argv) == 0
    assert f"summaries of 1 trace written to {elsewhere}\n" in capsys.readouterr().err


def test_write_summaries_warns_when_a_summary_could_not_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tb_syncfinder.summaries import SummaryStore

    monkeypatch.setattr(SummaryStore, "put", lambda self, ref, result, options: False)
    trace = write_item_trace(tmp_path / "run" / "w0.pt.trace.json")
    assert main(["report", str(trace), "--write-summaries"]) == 0
    err = capsys.readouterr().err
    assert "summaries of" not in err
    folder = tmp_path / "run" / ".sync_advisor"
    assert f"warning: 1 trace summary could not be written to {folder}" in err


def test_the_gate_counts_latent_syncs_of_a_cpu_only_trace_unless_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A CI runner profiles on the CPU: nothing waits there, so the operators that would
    synchronize on a GPU are what the gate checks."""
    trace = write_cpu_trace(tmp_path / "run" / "cpu.pt.trace.json")
    assert main(["report", str(trace), "--max-syncs-per-step", "0"]) == 1
    err = capsys.readouterr().err
    assert "step 1 of cpu.pt.trace.json has 1 latent syncs" in err
    assert "1 CPU-only trace: its latent syncs" in err
    assert main(["report", str(trace), "--max-syncs-per-step", "1"]) == 0
    capsys.readouterr()
    assert main(["report", str(trace), "--max-syncs-per-step", "0", "--no-latent"]) == 0
    assert "latent" not in capsys.readouterr().err


def test_the_gate_says_a_cpu_traces_steps_over_the_limit_in_one_line_as_for_a_gpu_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The demo's CPU run printed a line per step over the limit (five), its GPU run one
    line with the worst step and the sites: the CPU's now reads as the GPU's."""
    where = {"ph": "X", "pid": 1, "tid": 1, "args": {}}
    events = []
    for step in range(1, 4):
        t0 = 1000.0 * step
        events.append(
            {
                **where,
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "ts": t0,
                "dur": 900.0,
            }
        )
        for n in range(step + 1):  # 2, 3 and 4 latent syncs
            events.append(
                {
                    **where,
                    "cat": "cpu_op",
                    "name": "aten::nonzero",
                    "ts": t0 + 10 + 100 * n,
                    "dur": 30.0,
                }
            )
    trace = tmp_path / "run" / "cpu.pt.trace.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(json.dumps({"traceEvents": events}))
    assert main(["report", str(trace), "--max-syncs-per-step", "2"]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "too many syncs" in line]
    assert lines == [
        "tb-syncfinder: too many syncs: 2 steps of cpu.pt.trace.json have more than 2 latent "
        "syncs (operators that would synchronize on a GPU), up to 4 (step 3); at aten::nonzero (7)"
    ]


def test_a_gate_that_could_not_read_a_trace_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    write_item_trace(run / "good.pt.trace.json", items_per_step=1)
    (run / "rank1.pt.trace.json").write_text('{"traceEvents": [')  # a crashed rank's
    assert main(["report", str(run), "--max-syncs-per-step", "5"]) == 2
    assert f"gate: cannot check {run / 'rank1.pt.trace.json'}: " in capsys.readouterr().err
    # Over the limit anyway: the gate's own verdict.
    assert main(["report", str(run), "--max-syncs-per-step", "0"]) == 1
    # No gate asked: the report of the good trace, as before.
    assert main(["report", str(run)]) == 0


def test_compare_fails_on_a_new_latent_site_between_cpu_only_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    base = write_cpu_trace(tmp_path / "base" / "cpu.pt.trace.json", op="aten::add")
    new = write_cpu_trace(tmp_path / "new" / "cpu.pt.trace.json")
    assert main(["compare", str(base), str(new), "--fail-on-regression"]) == 1
    assert "new (latent): " in capsys.readouterr().err
    assert main(["compare", str(new), str(base), "--fail-on-regression"]) == 0
    run = tmp_path / "new"
    (run / "broken.pt.trace.json").write_text("")
    assert main(["compare", str(new), str(run), "--fail-on-regression"]) == 2


def test_a_folder_of_traces_under_other_names_points_at_them(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """prof.export_chrome_trace("trace.json") writes any name the user chose."""
    exported = write_cpu_trace(tmp_path / "logs" / "trace.json")
    assert main(["report", str(exported.parent)]) == 2
    err = capsys.readouterr().err
    assert f"{exported} may be a trace under another name: pass the file itself" in err
    assert main(["report", str(exported)]) == 0


def test_a_logdir_with_runs_still_names_a_trace_under_another_name_it_passed_over(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """accelerate's profile_0.json in one run's folder: the logdir's other runs were reported
    and it was passed over without a word."""
    write_cpu_trace(tmp_path / "logs" / "run" / "cpu.pt.trace.json")
    unnamed = write_cpu_trace(tmp_path / "logs" / "accel" / "profile_0.json")
    assert main(["report", str(tmp_path / "logs")]) == 0
    err = capsys.readouterr().err
    assert f"warning: {unnamed}: begins like a profiler trace, but is not read as one" in err


def test_a_path_map_that_matches_no_frame_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from kineto_builder import KinetoTraceBuilder, item_sync

    b = KinetoTraceBuilder()
    with b.step(1), b.frame(("/workspace/proj/train.py", 4, "train_step")):
        item_sync(b, stack=[("/workspace/proj/train.py", 4, "train_step")])
    trace = b.write(tmp_path / "run" / "w.pt.trace.json")
    assert main(["report", str(trace), "--path-map", f"/elsewhere={tmp_path}"]) == 0
    err = capsys.readouterr().err
    assert f"--path-map /elsewhere={tmp_path} matched no frame of the findings" in err
    assert main(["report", str(trace), "--path-map", f"/workspace={tmp_path}"]) == 0
    assert "matched no frame" not in capsys.readouterr().err


def test_the_gate_counts_latent_syncs_of_a_cpu_trace_without_step_markers(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """export_chrome_trace without a schedule: no ProfilerStep, the whole trace one step."""
    trace = write_cpu_trace(tmp_path / "run" / "w.pt.trace.json", count=3, step_marker=False)
    assert main(["report", str(trace), "--max-syncs-per-step", "2"]) == 1
    err = capsys.readouterr().err
    assert "(no ProfilerStep markers, counted as one step) has 3 latent syncs" in err
    assert main(["report", str(trace), "--max-syncs-per-step", "3"]) == 0


def test_a_path_map_says_nothing_about_a_run_without_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trace = write_cpu_trace(tmp_path / "run" / "w.pt.trace.json", op="aten::add")
    assert main(["report", str(trace), "--path-map", f"/workspace={tmp_path}"]) == 0
    assert "matched no frame" not in capsys.readouterr().err


def test_compare_does_not_gate_on_copies_a_baseline_of_an_older_version_could_not_list(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """CPU-only traces list ``.tolist()`` / ``.cpu()`` since 2026-11-25: a CI baseline
    written before then lacks them, and gating every upgrade on them would fail it with
    no change in the program. A baseline that could list them gates as usual."""
    from kineto_builder import KinetoTraceBuilder

    def cpu_run(folder: str, tolist: bool) -> Path:
        b = KinetoTraceBuilder()
        with b.step(1), b.frame(("train.py", 4, "step")):
            with b.op("aten::add"):
                b.advance(5)
            if tolist:
                with b.op("aten::resolve_conj", called="tolist"):
                    b.advance(5)
        return b.write(tmp_path / folder / "w.pt.trace.json")

    base, new = cpu_run("base", tolist=False), cpu_run("new", tolist=True)
    saved = tmp_path / "base.json"
    assert main(["report", str(base), "--json", "-o", str(saved)]) == 0
    assert main(["compare", str(saved), str(new), "--fail-on-regression"]) == 1
    assert "new (latent): train.py:step:aten::to:device_to_host_copy" in capsys.readouterr().err
    older = json.loads(saved.read_text())
    del older["latent_methods"]  # as written before these calls were listed
    saved.write_text(json.dumps(older))
    assert main(["compare", str(saved), str(new), "--fail-on-regression"]) == 0
    err = capsys.readouterr().err
    assert "1 new latent site of .cpu(), .to(), .tolist(): the baseline's tb-syncfinder" in err
    assert main(["compare", str(saved), str(new), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["latent_sites"]
    assert row["status"] == "new" and row["newly_listed"] is True


def test_a_tolist_compares_as_one_site_between_a_cpu_run_and_a_gpu_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """On a GPU ``.tolist()`` runs aten::to (a DtoH copy); a CPU trace records the call with
    no copy operator. Keyed apart, compare called the line fixed in one run and new in the
    other, and failed the gate."""
    from kineto_builder import KinetoTraceBuilder

    cpu = KinetoTraceBuilder()
    with cpu.step(1), cpu.frame(("train.py", 4, "step")):
        with cpu.op("aten::resolve_conj", called="tolist"):
            cpu.advance(5)
    gpu = KinetoTraceBuilder()
    with gpu.step(1), gpu.frame(("train.py", 4, "step")):
        gpu.kernel(dur=200)
        with gpu.op("aten::to", called="tolist"), gpu.op("aten::_to_copy"), gpu.op("aten::copy_"):
            gpu.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=16)
            gpu.runtime("cudaStreamSynchronize")
    base = cpu.write(tmp_path / "cpu" / "w.pt.trace.json")
    new = gpu.write(tmp_path / "gpu" / "w.pt.trace.json")
    assert main(["compare", str(base), str(new), "--fail-on-regression", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["sites"]
    assert row["key"] == "train.py:step:aten::to:device_to_host_copy"
    assert row["before"] is not None and row["after"] is not None


def test_a_gpu_runs_device_copies_against_a_cpu_baseline_are_listed_not_gated(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A review compared the CPU demo's cnn_baseline with its H100 recording, the same
    program: its .to() copies, which no CPU-only trace lists, read "new" and failed the
    gate; and the saving line set a CPU step time against a GPU one."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    cpu = KinetoTraceBuilder(gpu=False)
    with cpu.step(1), cpu.frame(("train.py", 4, "step")):
        with cpu.op("aten::item", called="item"), cpu.op("aten::_local_scalar_dense"):
            cpu.advance(5)
    gpu = KinetoTraceBuilder()
    with gpu.step(1), gpu.frame(("train.py", 4, "step")):
        with gpu.op("aten::to", called="to"), gpu.op("aten::_to_copy"), gpu.op("aten::copy_"):
            gpu.runtime("cudaMemcpyAsync", dur=5, memcpy=("HtoD", "Pageable"), bytes=4096)
        item_sync(gpu, stack=())
    base = cpu.write(tmp_path / "cpu" / "w.pt.trace.json")
    new = gpu.write(tmp_path / "gpu" / "w.pt.trace.json")
    assert main(["compare", str(base), str(new), "--fail-on-regression", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    copy = next(r for r in result["sites"] if r["kind"] == "blocking_host_to_device")
    assert copy["status"] == "new" and copy["newly_listed"] is True
    assert "CPU-only trace cannot show" in result["detection_note"]
    assert main(["compare", str(base), str(new), "--color", "never"]) == 0
    text = capsys.readouterr().out
    assert "saving           not measured: a CPU-only run's step time does not compare" in text
    assert "measured" not in text.split("saving")[-1].replace("not measured", "")


@pytest.mark.parametrize(
    "content", [b'{"traceEvents": []}', b'{"traceEvents": [{"ph": "M", "name": "x", "pid": 1}]}']
)
def test_a_gate_cannot_pass_an_empty_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture, content: bytes
) -> None:
    """A profiler that wrote no event passed --max-syncs-per-step 0 as a CPU-only trace."""
    trace = tmp_path / "w.pt.trace.json"
    trace.write_bytes(content)
    assert main(["report", str(trace), "--max-syncs-per-step", "0"]) == 2
    assert f"gate: cannot check {trace}: empty trace" in capsys.readouterr().err
    assert main(["report", str(trace)]) == 0  # without a gate: read, and said empty


def test_compare_refuses_a_logdir_of_several_runs_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Merged, a logdir of two runs compared each site's syncs per step over both runs'
    steps, silently."""
    logs = tmp_path / "logs"
    write_item_trace(logs / "a" / "w.pt.trace.json")
    write_item_trace(logs / "b" / "w.pt.trace.json")
    assert main(["compare", str(logs), str(logs / "a")]) == 2
    err = capsys.readouterr().err
    assert f"{logs} holds 2 runs (a, b): compare one run with one run" in err
    assert main(["compare", str(logs / "b"), str(logs / "a")]) == 0


def test_options_that_will_do_nothing_are_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trace = write_item_trace(tmp_path / "run" / "w.pt.trace.json")
    missing = tmp_path / "no_such_dir"
    assert main(["compare", str(trace), str(trace), "--source-root", str(missing)]) == 0
    assert capsys.readouterr().err.count(f"--source-root {missing}: no such directory") == 1
    assert main(["report", str(trace), "--ray-workers", "2"]) == 0
    assert capsys.readouterr().err.count("--ray-workers is for a Ray run") == 1


def test_the_annotate_error_names_what_to_give(tmp_path: Path, capsys: pytest.CaptureFixture):
    write_item_trace(tmp_path / "run" / "a.pt.trace.json")
    write_item_trace(tmp_path / "run" / "b.pt.trace.json")
    out = tmp_path / "x.json"
    assert main(["report", str(tmp_path / "run"), "--annotate", str(out)]) == 2
    err = capsys.readouterr().err
    assert "2 were analysed: pick one" in err and "on the command line: one trace file" in err


def test_compare_gates_cannot_pass_an_empty_trace(tmp_path: Path, capsys) -> None:
    base = write_item_trace(tmp_path / "base" / "w.pt.trace.json")
    empty = tmp_path / "empty" / "w.pt.trace.json"
    empty.parent.mkdir()
    empty.write_text('{"traceEvents": []}')
    assert main(["compare", str(base.parent), str(empty.parent), "--fail-on-regression"]) == 2
    assert f"gate: cannot check new run {empty}: empty trace" in capsys.readouterr().err
    assert main(["compare", str(base.parent), str(empty.parent)]) == 0  # no gate: compared


def test_a_saved_report_against_its_trace_recorded_again_is_no_self_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trace = write_item_trace(tmp_path / "run" / "w.pt.trace.json", steps=2, items_per_step=1)
    saved = tmp_path / "base.json"
    assert main(["report", str(trace.parent), "--json", "-o", str(saved)]) == 0
    write_item_trace(trace, steps=2, items_per_step=2)  # recorded again, in place
    capsys.readouterr()
    main(["compare", str(saved), str(trace.parent)])
    assert "same trace files" not in capsys.readouterr().err


def test_compare_color_always_colours_a_file_too(tmp_path: Path) -> None:
    trace = write_item_trace(tmp_path / "w.pt.trace.json")
    out = tmp_path / "c.txt"
    assert main(["compare", str(trace), str(trace), "--color", "always", "-o", str(out)]) == 0
    assert "\x1b[" in out.read_text()


def test_an_annotated_trace_named_gz_is_gzipped(tmp_path: Path) -> None:
    import gzip

    trace = write_item_trace(tmp_path / "w.pt.trace.json")
    out = tmp_path / "annotated.pt.trace.json.gz"
    assert main(["report", str(trace), "--annotate", str(out)]) == 0
    assert "traceEvents" in json.loads(gzip.decompress(out.read_bytes()))


def test_compare_of_a_run_with_itself_says_so(tmp_path: Path, capsys: pytest.CaptureFixture):
    trace = write_item_trace(tmp_path / "run" / "w.pt.trace.json")
    assert main(["compare", str(trace), str(trace.parent)]) == 0
    captured = capsys.readouterr()
    assert "both sides are the same trace files" in captured.err
    assert "both sides are the same trace files" in captured.out


def test_compare_does_not_gate_against_a_baseline_of_older_site_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    base = write_item_trace(tmp_path / "base" / "w.pt.trace.json", items_per_step=1)
    new = write_item_trace(tmp_path / "new" / "w.pt.trace.json", items_per_step=3)
    saved = tmp_path / "base.json"
    assert main(["report", str(base), "--json", "-o", str(saved)]) == 0
    assert main(["compare", str(saved), str(new), "--fail-on-regression"]) == 1  # worse
    older = json.loads(saved.read_text())
    del older["site_keys"]  # as written before the keys changed
    saved.write_text(json.dumps(older))
    capsys.readouterr()
    assert main(["compare", str(saved), str(new), "--fail-on-regression"]) == 2
    err = capsys.readouterr().err
    assert "written by another version of tb-syncfinder" in err and "cannot gate" in err


def test_compare_refuses_a_report_edited_into_another_shape_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A review: a saved report whose ``sites`` was a string, or a site's ``count`` text,
    failed inside the comparison with a traceback and exit 1, a regression's status: a gate
    could not tell a corrupt baseline from a regression."""
    trace = write_item_trace(tmp_path / "w.pt.trace.json")
    saved = tmp_path / "base.json"
    assert main(["report", str(trace), "--json", "-o", str(saved)]) == 0
    good = json.loads(saved.read_text())
    edits = {
        "sites_text.json": (lambda r: r.update(sites="x"), "$.sites"),
        "traces_text.json": (lambda r: r.update(traces="x"), "$.traces"),
        "count_text.json": (lambda r: r["sites"][0].update(count="q"), "$.sites[0].count"),
    }
    for name, (edit, where) in edits.items():
        report = json.loads(json.dumps(good))
        edit(report)
        (tmp_path / name).write_text(json.dumps(report))
        capsys.readouterr()
        code = main(["compare", str(tmp_path / name), str(trace), "--fail-on-regression"])
        err = capsys.readouterr().err
        assert code == 2, name
        assert f"{tmp_path / name}: not a valid {SCHEMA} report" in err and where in err
    later = dict(good, schema="tb_syncfinder.report/99")
    (tmp_path / "later.json").write_text(json.dumps(later))
    assert main(["compare", str(tmp_path / "later.json"), str(trace)]) == 2
    assert f"a tb_syncfinder.report/99 report; this version of tb-syncfinder reads {SCHEMA}" in (
        capsys.readouterr().err
    )


def test_unprofiled_step_time_bounds_what_fixing_every_sync_can_save(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``--unprofiled-step-ms``: the step the user measured without the profiler minus the
    GPU's busy time per step is the most that fixing every sync can save; the report says
    so beside the profiled program's predicted saving."""
    trace = write_item_trace(tmp_path / "w0.pt.trace.json")
    assert main(["report", str(trace), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    busy_us = summary["device_busy_per_step_us"]
    assert busy_us > 0 and "unprofiled_step_time_us" not in summary
    step_ms = (busy_us + 40.0) / 1000
    assert main(["report", str(trace), "--json", "--unprofiled-step-ms", str(step_ms)]) == 0
    given = json.loads(capsys.readouterr().out)["summary"]
    assert given["unprofiled_step_time_us"] == pytest.approx(step_ms * 1000)
    assert given["unprofiled_saving_at_most_per_step_us"] == pytest.approx(40.0, abs=0.01)
    assert main(["report", str(trace), "--unprofiled-step-ms", str(step_ms)]) == 0
    text = capsys.readouterr().out
    assert "unprofiled" in text and "at most 40 us per step" in text
    # The step time echoed as typed, not rounded to a measured figure's 3 digits.
    assert main(["report", str(trace), "--unprofiled-step-ms", "14.51"]) == 0
    assert "14.51 ms per step (given)" in capsys.readouterr().out
    assert main(["report", str(trace), "--unprofiled-step-ms", "14.510858859999871"]) == 0
    assert "14.5108588599999 ms per step (given)" in capsys.readouterr().out
    # Faster than the GPU's own work: no step of this program, so no bound from it either
    # ("at most 0 us" read as a measured nothing left to save).
    assert main(["report", str(trace), "--json", "--unprofiled-step-ms", "0.001"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["summary"]["unprofiled_saving_at_most_per_step_us"] is None
    assert "shorter than the GPU's busy time" in answer["traces"][0]["unprofiled_note"]


@pytest.mark.parametrize("value", ["0", "-3", "abc", "inf", "1e9", "0.00004"])
def test_an_unprofiled_step_time_that_is_not_a_positive_number_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture, value: str
) -> None:
    trace = write_item_trace(tmp_path / "w0.pt.trace.json")
    assert main(["report", str(trace), "--unprofiled-step-ms", value]) == 2
    assert "--unprofiled-step-ms" in capsys.readouterr().err


def test_an_unprofiled_step_time_for_a_logdir_of_several_runs_asks_which_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    for run in ("baseline", "fixed"):
        write_item_trace(tmp_path / run / "w0.pt.trace.json")
    assert main(["report", str(tmp_path), "--unprofiled-step-ms", "5"]) == 2
    err = capsys.readouterr().err
    assert "2 runs here" in err and "--run NAME" in err
    assert main(["report", str(tmp_path), "--run", "fixed", "--unprofiled-step-ms", "5"]) == 0


def _iterations(path: Path, marked: bool, iterations: int = 5) -> Path:
    """A CUDA trace of ``iterations`` loop iterations of two ``.item()`` each, with a
    ProfilerStep marker per iteration or none (profiled without ``prof.step()``)."""
    from contextlib import nullcontext

    from tests.kineto_builder import KinetoTraceBuilder, item_sync

    builder = KinetoTraceBuilder()
    for n in range(iterations):
        with builder.step(n) if marked else nullcontext():
            item_sync(builder, stack=[("train.py", 8, "train_step")])
            item_sync(builder, stack=[("train.py", 9, "train_step")])
    return builder.write(path)


def test_the_gate_names_a_gpu_trace_without_step_markers_as_one_step_with_its_sites(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Not "step 0 of w.pt.trace.json" (a step the program never had) with no site: the
    whole trace is the step, and its lines are what to open."""
    trace = _iterations(tmp_path / "run" / "w.pt.trace.json", marked=False)
    out = str(tmp_path / "report.txt")
    assert main(["report", str(trace), "--max-syncs-per-step", "3", "-o", out]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "too many syncs" in line]
    assert lines == [
        "tb-syncfinder: too many syncs: w.pt.trace.json (no ProfilerStep markers, counted as "
        "one step) has 10 syncs (limit 3); at train.py:8* (5), train.py:9* (5)"
    ]
    legend = " ".join(Path(out).read_text().split())
    assert "over the 1 trace (no step markers); /step, saves/step: per step, here per" in legend


def test_compare_does_not_gate_per_step_across_runs_with_and_without_step_markers(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The same five iterations, profiled with prof.step() and without: the whole unmarked
    trace is one "step", so its sites read five times worse per step ("+400 %") though
    nothing changed. The comparison says why, and the gate cannot pass or fail on it."""
    from tb_syncfinder.compare import compare

    marked = _iterations(tmp_path / "marked" / "w.pt.trace.json", marked=True).parent
    unmarked = _iterations(tmp_path / "unmarked" / "w.pt.trace.json", marked=False).parent
    out = str(tmp_path / "cmp")
    assert main(["compare", str(marked), str(unmarked), "--fail-on-regression", "-o", out]) == 2
    err = capsys.readouterr().err
    assert "per-step figures do not compare" in err and "new run: w.pt.trace.json" in err
    assert "cannot gate per step across runs with and without ProfilerStep markers" in err
    headline = (tmp_path / "cmp").read_text().splitlines()[0]
    assert headline == "Sync Advisor: compare  per step not comparable: 1 worse"
    from tb_syncfinder import analyze

    base, new = (analyze(p).to_json() for p in (marked, unmarked))
    counted = [r["summary"]["traces_without_step_markers"] for r in (base, new)]
    assert counted == [0, 1]
    assert compare(base, new)["steps_differ"] is not None
    assert compare(base, base)["steps_differ"] is None
    assert compare(new, new)["steps_differ"] is None  # per trace on both sides: alike
    # The other way round, a real regression (three reads an iteration, not two) read as
    # "better" per step: the gate cannot pass either.
    worse = tmp_path / "worse" / "w.pt.trace.json"
    from tests.kineto_builder import KinetoTraceBuilder, item_sync

    builder = KinetoTraceBuilder()
    for n in range(5):
        with builder.step(n):
            for line in (8, 9, 10):
                item_sync(builder, stack=[("train.py", line, "train_step")])
    builder.write(worse)
    capsys.readouterr()
    argv = ["compare", str(unmarked), str(worse.parent), "--fail-on-regression", "-o", out]
    assert main(argv) == 2


def test_runs_that_both_mix_marked_and_unmarked_traces_alike_are_gated_as_usual(
    tmp_path: Path,
) -> None:
    """A marked training trace beside an unmarked evaluation trace, in both runs: their
    figures per step are made alike, so the gate judges them (a new read fails it)."""
    from tb_syncfinder import analyze
    from tb_syncfinder.compare import compare

    for run in ("base", "new"):
        _iterations(tmp_path / run / "train.pt.trace.json", marked=True)
        _iterations(tmp_path / run / "eval.pt.trace.json", marked=False)
    base, new = (analyze(tmp_path / run).to_json() for run in ("base", "new"))
    assert compare(base, new)["steps_differ"] is None
    # A trace that recorded nothing counts no step either way: no share of unmarked ones.
    (tmp_path / "new" / "empty.pt.trace.json").write_text('{"traceEvents": []}')
    assert compare(base, analyze(tmp_path / "new").to_json())["steps_differ"] is None


def test_worker_picks_the_training_traces_lightning_writes_beside_its_validation_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Lightning's PyTorchProfiler writes a training and a validation trace into one folder:
    one run of two workers, whose figures per step mix both traces' steps. ``--worker``
    picks one, by its name as it is (brackets and all) or by a shell pattern."""
    run = tmp_path / "prof"
    training = "fit-prof-[Strategy]SingleDeviceStrategy.training_step"
    write_cpu_trace(run / f"{training}.1795878848364846130.pt.trace.json", count=2)
    validation = "fit-prof-[Strategy]SingleDeviceStrategy.validation_step"
    write_cpu_trace(run / f"{validation}.1795878848588392783.pt.trace.json")
    assert main(["report", str(run), "--format", "json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert len(both["traces"]) == 2
    for pattern in ("*training_step*", training):
        assert main(["report", str(run), "--worker", pattern, "--format", "json"]) == 0
        picked = json.loads(capsys.readouterr().out)
        assert [t["worker"] for t in picked["traces"]] == [training]
        assert picked["summary"]["latent_count"] == 2
    assert main(["report", str(run), "--worker", "*test_step*"]) == 2
    err = capsys.readouterr().err
    assert "no worker matches '*test_step*'; workers found: fit-prof-[Strategy]" in err


def test_a_source_root_given_keeps_the_current_directory_searched(tmp_path, monkeypatch):
    """``--help`` and the README say the current directory is always searched; a root
    given had replaced it, and a script beside the logs went unread (a user walk)."""
    pytest.importorskip("torch")
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch

            w = torch.randn(4, 4, device="cpu")  # where a GPU run puts it
            with torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True,
                schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                on_trace_ready=torch.profiler.tensorboard_trace_handler("logs/run"),
            ) as prof:
                for step in range(5):
                    loss = (w @ w).sum()
                    print(loss.item())
                    prof.step()
            """
        )
    )
    # Run as a user runs it, from its folder: torch records the frame as ``train.py``,
    # relative to the script's ``sys.path`` entry (not found beside the logs' folder).
    subprocess.run(
        [sys.executable, "train.py"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r.json"
    assert main(["report", "logs", "--source-root", str(elsewhere), "-o", str(out)]) == 0
    (site,) = json.loads(out.read_text())["latent_sites"]
    assert (site["line"], site["line_exact"]) == (11, True)


_TWO_SCRIPTS = {
    # pytorch/examples names every script main.py: one read in a function, ...
    "lm": """\
import torch

net = torch.nn.Linear(8, 1)


def train():
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        on_trace_ready=torch.profiler.tensorboard_trace_handler("../logs/lm"),
    ) as prof:
        for step in range(5):
            loss = net(torch.randn(4, 8)).mean()
            total = loss.item()
            prof.step()


train()
""",
    # ... and two at the module's top, on lines the other file has inside its function.
    "gan": """\
import torch

net = torch.nn.Linear(8, 1)
with torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True,
    schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
    on_trace_ready=torch.profiler.tensorboard_trace_handler("../logs/gan"),
) as prof:
    for step in range(5):
        out = net(torch.randn(4, 8))
        d_x = out.mean().item()
        print(step, out.sum().item(), d_x)
        prof.step()
""",
}


@pytest.mark.parametrize("order", [("lm", "gan"), ("gan", "lm")])
def test_scripts_of_one_name_under_two_source_roots_are_each_read_for_its_own_run(
    tmp_path, monkeypatch, order
):
    """A user walk of pytorch/examples: with ``--source-root lm --source-root gan``, both
    runs' ``main.py`` was read from the first root, and the other run's sites fell back to
    the recorded line, starred, two sites merged into one."""
    pytest.importorskip("torch")
    import subprocess
    import sys

    for name, text in _TWO_SCRIPTS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "main.py").write_text(text)
        # Run from its folder: torch records the frames as the relative ``main.py``.
        subprocess.run(
            [sys.executable, "main.py"], cwd=tmp_path / name, check=True, capture_output=True
        )
    monkeypatch.chdir(tmp_path / "logs")  # a folder with no main.py of its own
    roots = [arg for name in order for arg in ("--source-root", str(tmp_path / name))]
    out = tmp_path / "r.json"
    assert main(["report", str(tmp_path / "logs"), *roots, "-o", str(out)]) == 0
    runs = {run["run"]: run for run in json.loads(out.read_text())["runs"]}
    lines = {
        name: sorted((s["line"], s["line_exact"]) for s in runs[name]["latent_sites"])
        for name in runs
    }
    assert lines == {"lm": [(14, True)], "gan": [(11, True), (12, True)]}
