"""`tb-syncfinder report` over several traces in analysis processes of this machine
(``fanout.process_mapper``, ``--jobs``): the same report as one process, a process that dies
fails only its trace, and small jobs never start one.

What the processes run comes from tests/worker_probes.py: a process imports what it runs by
name.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import worker_probes

from tb_syncfinder import cli, fanout
from tb_syncfinder.discovery import find_traces
from tb_syncfinder.engine import Options, analyze_runs
from tb_syncfinder.plugin import workers

REPO = Path(__file__).resolve().parents[1]
DEMO_TRACES = REPO / "tb_syncfinder" / "demo" / "traces"
TIMEOUT_S = 300


def _logdir(tmp_path: Path) -> Path:
    """Two runs of the bundled demo traces, a trace that is no JSON beside them."""
    for name in ("cnn_baseline", "cnn_optimized", "seg_baseline", "seg_optimized"):
        run = tmp_path / "logs" / name.split("_")[0]
        run.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEMO_TRACES / f"{name}.pt.trace.json.gz", run / f"{name}.pt.trace.json.gz")
    (tmp_path / "logs" / "cnn" / "broken.pt.trace.json").write_text("not json")
    return tmp_path / "logs"


def _report(logdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tb_syncfinder", "report", str(logdir), "--no-summaries", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        cwd=logdir.parent,
        env={**os.environ, "COLUMNS": "120"},
    )


def test_report_in_processes_is_the_same_bytes_as_in_one_process(tmp_path: Path) -> None:
    logdir = _logdir(tmp_path)
    for fmt in ("json", "table", "csv", "sarif"):
        one = _report(logdir, "--jobs", "1", "--format", fmt)
        two = _report(logdir, "--jobs", "2", "--format", fmt)
        assert one.returncode == two.returncode == 0, (one.stderr, two.stderr)
        assert one.stdout == two.stdout, fmt
        assert one.stderr == two.stderr
    assert "broken.pt.trace.json: invalid JSON" in two.stderr


def test_a_gate_exits_the_same_in_processes(tmp_path: Path) -> None:
    logdir = _logdir(tmp_path)
    one = _report(logdir, "--jobs", "1", "--max-syncs-per-step", "0", "--format", "json")
    two = _report(logdir, "--jobs", "3", "--max-syncs-per-step", "0", "--format", "json")
    assert one.returncode == two.returncode == 1
    assert one.stdout == two.stdout and one.stderr == two.stderr


def test_a_process_that_dies_fails_only_its_trace_saying_how(tmp_path: Path) -> None:
    logdir = _logdir(tmp_path)
    shutil.copy(
        DEMO_TRACES / "cnn_baseline.pt.trace.json.gz",
        logdir / "cnn" / "crash_rank1.pt.trace.json.gz",
    )
    refs = find_traces(str(logdir))
    mapper = fanout.process_mapper(2, analyze=worker_probes.analyze_in_process_or_die)
    results = {r.info.path: r for r in mapper(refs, Options(), None)}
    assert set(results) == {ref.path for ref in refs}
    crashed = results[str(logdir / "cnn" / "crash_rank1.pt.trace.json.gz")]
    expected = "was killed (SIGKILL" if os.name == "posix" else "exited with status 70"
    assert "the analysis process (pid" in crashed.info.error and expected in crashed.info.error
    fine = results[str(logdir / "cnn" / "cnn_baseline.pt.trace.json.gz")]
    assert fine.info.error is None and fine.syncs


def test_each_process_gets_its_share_of_the_memory(tmp_path: Path) -> None:
    refs = find_traces(str(_logdir(tmp_path)))
    large = {refs[0].path}
    mapper = fanout.process_mapper(
        2, analyze=worker_probes.memory_share_and_pid, progress_lines=lambda r: r.path in large
    )
    reasons = [r.info.error.split() for r in mapper(refs, Options(memory_share=0.8), None)]
    assert len(reasons) == len(refs)
    assert {share for share, _pid, _lines in reasons} == {"0.5"}
    assert len({pid for _share, pid, _lines in reasons}) == 2  # two processes, none this one
    assert str(os.getpid()) not in {pid for _share, pid, _lines in reasons}
    assert sorted(lines for *_rest, lines in reasons) == ["False"] * (len(refs) - 1) + ["True"]


def test_where_no_process_starts_the_traces_are_read_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_interpreter(executable: str | None = None) -> list[str]:
        raise workers.WorkerStartError("no Python interpreter to start analysis processes with")

    monkeypatch.setattr(workers, "worker_command", no_interpreter)
    refs = find_traces(str(_logdir(tmp_path)))
    here = analyze_runs(refs, Options(), mapper=fanout.process_mapper(2))
    alone = analyze_runs(refs, Options())
    assert [r.info.path for r in here.results] == [r.info.path for r in alone.results]
    assert [len(r.syncs) for r in here.results] == [len(r.syncs) for r in alone.results]
    assert sum(len(r.syncs) for r in here.results) > 0


def test_small_jobs_and_single_traces_stay_in_one_process(tmp_path: Path) -> None:
    refs = find_traces(str(_logdir(tmp_path)))  # 5 traces, ~10 MB of JSON in all
    assert fanout.local_processes(refs) == 1  # the starts would cost more than they save
    assert fanout.local_processes(refs[:1], jobs=4) == 1
    assert fanout.local_processes(refs, jobs=3) == 3
    assert fanout.local_processes(refs, jobs=64) == len(refs)
    assert fanout.local_processes(refs, jobs=1) == 1


def test_large_jobs_use_the_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    refs = find_traces(str(_logdir(tmp_path)))
    monkeypatch.setattr(fanout, "PROCESSES_MIN_JSON_BYTES", 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert fanout.local_processes(refs) == len(refs)  # fewer traces than cores
    monkeypatch.setattr(fanout, "PROCESSES_MAX_DEFAULT", 3)
    assert fanout.local_processes(refs) == 3


def test_jobs_with_ray_is_said_to_do_nothing(capsys: pytest.CaptureFixture) -> None:
    args = argparse.Namespace(source_root=[], ray=True, ray_address=None, ray_workers=0, jobs=2)
    cli._warn_of_unused_options(args)
    assert "--jobs is for this machine's processes" in capsys.readouterr().err
    cli._warn_of_unused_options(argparse.Namespace(**{**vars(args), "ray": False}))
    assert capsys.readouterr().err == ""


def test_the_python_api_takes_jobs_and_gives_the_same_report(tmp_path: Path) -> None:
    import tb_syncfinder

    logdir = _logdir(tmp_path)
    alone = tb_syncfinder.analyze(logdir, jobs=1)
    spread = tb_syncfinder.analyze(logdir, jobs=2)
    assert spread.to_json() == alone.to_json()
    assert alone.summary.sync_count > 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_fifo_beside_the_traces_is_not_opened_to_size_the_job(tmp_path: Path) -> None:
    """Sizing the job (is it worth processes?) stats the files: opening a FIFO blocked the
    whole report, and reading two bytes of a pipe (``report <(zcat a) <(zcat b)``) lost
    them from the trace."""
    logdir = _logdir(tmp_path)
    os.mkfifo(logdir / "cnn" / "pipe.pt.trace.json")
    done = _report(logdir, "--format", "json")  # the default: sizes the job first
    assert done.returncode == 0, done.stderr
    assert "a named pipe (FIFO) that nothing writes to" in done.stderr
    assert fanout._json_size(find_traces(str(logdir))[0]) > 0


def test_the_cli_shows_the_packages_warnings_but_not_the_analysis_processes_own(
    capsys: pytest.CaptureFixture,
) -> None:
    import logging

    with cli._package_log_lines("WARNING"):
        logging.getLogger("tb_syncfinder.plugin.workers").warning("sync_advisor: pid 1 died")
        logging.getLogger("tb_syncfinder.summaries").warning("cannot write summary x (full)")
        logging.getLogger("tb_syncfinder.windows").info("window 1 of 2 analysed")
    err = capsys.readouterr().err
    assert err == "tb-syncfinder: warning: cannot write summary x (full)\n"
    logging.getLogger("tb_syncfinder.summaries").warning("after")
    assert "tb-syncfinder" not in capsys.readouterr().err  # the handler went with the run


def test_remote_traces_stay_in_one_process_unless_asked(tmp_path: Path) -> None:
    from tb_syncfinder.models import TraceRef

    refs = [
        TraceRef(f"s3://bucket/job/rank{n}.pt.trace.json.gz", "job", f"rank{n}") for n in (0, 1)
    ]
    assert fanout.local_processes(refs) == 1
    assert fanout.local_processes(refs, jobs=2) == 2


def test_the_python_api_refuses_a_jobs_that_is_no_count(tmp_path: Path) -> None:
    import tb_syncfinder

    logdir = _logdir(tmp_path)
    for bad in ("2", -3, 1.5, True):
        with pytest.raises(ValueError, match="jobs: a whole number"):
            tb_syncfinder.analyze(logdir, jobs=bad)


def test_compare_takes_jobs_as_report_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A side that is a logdir of one run's traces is analysed in ``--jobs`` processes,
    with the same comparison as in one process."""
    logdir = _logdir(tmp_path)
    base, new = str(logdir / "cnn"), str(logdir / "seg")
    asked: list[int | None] = []
    real_mapper = fanout.process_mapper

    def recording_mapper(jobs: int | None, **kwargs: object) -> object:
        asked.append(jobs)
        return real_mapper(jobs, **kwargs)

    monkeypatch.setattr(fanout, "process_mapper", recording_mapper)
    outputs = []
    for jobs in ("1", "2"):
        status = cli.main(["compare", base, new, "--json", "--jobs", jobs])
        outputs.append((status, capsys.readouterr().out))
    assert asked == [2, 2]  # each side of the second comparison, none of the first
    assert outputs[0] == outputs[1] and outputs[0][0] == 0 and outputs[0][1].startswith("{")
