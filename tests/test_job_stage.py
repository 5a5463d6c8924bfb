"""The job stage wired into the pipeline (issue 17): real gloo jobs on the CPU and NCCL-shaped
fixture jobs through ``engine.analyze_runs``, the CLI's ``report`` and the plugin's ``job``
route; the rank trace through summaries and pickling; the report schema only grows."""

from __future__ import annotations

import json
import pickle
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest
from gloo_workload import (
    OVERLAPPED_SLEEP_LINE,
    READBACK_LINE,
    SCRIPT,
    SLEEP_LINE,
    SLEEP_LINES,
    TWO_SLEEP_LINE,
    line_of,
    record_gloo_job,
)
from nccl_job import ITEM_LINE, TRAIN_FILE, JobSpec, write_job

from tb_syncfinder import jobs
from tb_syncfinder import ranks as R
from tb_syncfinder.cli import main
from tb_syncfinder.discovery import find_traces
from tb_syncfinder.engine import Options, analyze_runs, analyze_trace
from tb_syncfinder.models import TraceRef
from tb_syncfinder.summaries import SummaryStore

GLOO_WORLD = 3
GLOO_LATE = 2
GLOO_STEPS = 4
DELAY_S = 0.08


def within(measured: float, expected: float, share: float = 0.2) -> bool:
    return abs(measured - expected) <= share * expected


def analysed(logdir: Path, source_root: Path | None = None) -> dict[str, Any]:
    options = Options(source_roots=[str(source_root or logdir)])
    return analyze_runs(find_traces(str(logdir)), options).report.to_json()


@pytest.fixture(scope="module")
def gloo_logdir(tmp_path_factory) -> Path:
    """A logdir with one run: a real 3-rank gloo job, rank 2 late at a known line."""
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo not available")
    logdir = tmp_path_factory.mktemp("gloo_logdir")
    record_gloo_job(
        logdir / "job", world=GLOO_WORLD, late_rank=GLOO_LATE, delay_s=DELAY_S, steps=GLOO_STEPS
    )
    return logdir


@pytest.fixture(scope="module")
def gloo_report(gloo_logdir: Path) -> dict[str, Any]:
    return analysed(gloo_logdir, gloo_logdir / "job")


def injected_per_step(report: dict[str, Any]) -> dict[int, float]:
    """What the late rank's deliberate wait lasted per step, in its own trace (the delay
    actually injected: on a loaded machine time.sleep overruns)."""
    trace = next(t for t in report["traces"] if t["worker"] == f"rank{GLOO_LATE}")
    rank = analyze_trace(
        trace["path"], Options(source_roots=[str(Path(trace["path"]).parent)], contexts=False)
    ).rank
    assert rank is not None
    sleeps = {
        w.step: w.wait_us for w in rank.waits if w.kind == "blocking_call" and w.line == SLEEP_LINE
    }
    assert sorted(sleeps) == list(range(1, GLOO_STEPS + 1))
    return sleeps


def test_gloo_job_report_names_the_late_rank_and_its_line_as_the_top_job_cost(gloo_report):
    job = gloo_report["job"]
    assert job["ranks"] == [0, 1, 2] and job["world_size"] == GLOO_WORLD and job["complete"]
    assert not [i for i in job["issues"] if i["severity"] == "warning"]
    top = job["sites"][0]
    assert top["rank"] == GLOO_LATE
    assert top["file"].endswith(SCRIPT) and top["line"] == SLEEP_LINE
    assert top["kind"] == "blocking_call" and top["bound"] and job["what_if"] == "bound"
    injected = sum(injected_per_step(gloo_report).values())
    assert within(top["job_saving_us"], injected)
    assert within(top["caused_wait_us"], injected * (GLOO_WORLD - 1))
    # The CPU readback just after the wait held nobody up.
    assert all(
        s["line"] != READBACK_LINE or s["job_saving_us"] < 0.05 * injected for s in job["sites"]
    )


def test_gloo_job_waits_of_the_other_ranks_are_within_20_percent_of_the_injected_delay(gloo_report):
    injected = injected_per_step(gloo_report)
    job = gloo_report["job"]
    grid = {(r["rank"], r["step"]): r for r in job["rank_steps"]}
    for rank in range(GLOO_WORLD):
        rows = [grid[(rank, s)] for s in range(1, GLOO_STEPS + 1)]
        if rank == GLOO_LATE:
            assert all(r["wait_us"] == 0.0 for r in rows)
            assert within(
                statistics.median(r["late_us"] for r in rows), statistics.median(injected.values())
            )
        else:
            assert all(r["late_us"] == 0.0 for r in rows)
            assert within(
                statistics.median(r["wait_us"] for r in rows), statistics.median(injected.values())
            ), (rank, rows)
    totals = {r["rank"]: r for r in job["rank_totals"]}
    assert within(totals[GLOO_LATE]["blocking_wait_us"], sum(injected.values()))
    assert totals[GLOO_LATE]["wait_in_collectives_us"] == 0.0


@pytest.fixture(scope="module")
def overlapped_report(tmp_path_factory) -> dict[str, Any]:
    """A real 2-rank gloo job whose all-reduce is waited for (``Work.wait``) at the start of
    the next step; every rank computes for 0.4 times the delay after starting it, and rank 1
    then sleeps for the delay."""
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo not available")
    folder = tmp_path_factory.mktemp("gloo_overlapped") / "job"
    record_gloo_job(folder, world=2, late_rank=1, delay_s=DELAY_S, steps=5, mode="overlapped")
    return analysed(folder.parent, folder)


def _work_wait_us(trace_path: str) -> float:
    with open(trace_path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    return sum(
        e["dur"]
        for e in events
        if e.get("cat") == "python_function" and e["name"].startswith("<built-in method wait of ")
    )


def _slept_per_step_us(report: dict[str, Any], worker: str, delay_s: float) -> float:
    """The mean of ``worker``'s injected sleeps (``time.sleep(delay_s)`` on its main
    thread, as its trace recorded them): what the job's figures are checked against, not
    the nominal delay, which a loaded machine overruns (a review saw 24 ms over 4 sleeps
    of 30 ms, the whole margin of a check)."""
    path = next(t["path"] for t in report["traces"] if t["worker"] == worker)
    with open(path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    main_thread = {e["tid"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
    sleeps = [
        e["dur"]
        for e in events
        if e.get("cat") == "python_function"
        and e["name"] == "<built-in function sleep>"
        and e["tid"] in main_thread
        and e["dur"] >= 0.9 * delay_s * 1e6
    ]
    assert sleeps, f"no sleep of {delay_s} s on {worker}'s main thread"
    return statistics.mean(sleeps)


def test_an_overlapped_gloo_rank_waits_as_long_as_its_work_wait_blocked(overlapped_report):
    """Rank 0 starts each all-reduce as soon as the one before is done and rank 1 a step of
    1.4 delays later, but rank 0 computes for 0.4 of them before it waits: its wait is read
    from the Python frames of ``Work.wait`` (torch's name for it in the Python tracer), one
    delay a step, not the gap between their arrivals. Rank 1's sleep after starting the
    all-reduce is the cause."""
    job = overlapped_report["job"]
    rank0 = next(t for t in overlapped_report["traces"] if t["worker"] == "rank0")
    blocked = _work_wait_us(rank0["path"])
    totals = {t["rank"]: t for t in job["rank_totals"]}
    late_steps = len(job["steps"]) - 1  # the first step's lateness is carried in
    slept = _slept_per_step_us(overlapped_report, "rank1", DELAY_S)
    assert within(blocked / late_steps, slept, 0.3)
    assert totals[0]["wait_in_collectives_us"] == pytest.approx(blocked, rel=0.1)
    assert totals[1]["wait_in_collectives_us"] == 0.0
    top = job["sites"][0]
    assert (top["rank"], top["line"], top["kind"]) == (1, OVERLAPPED_SLEEP_LINE, "blocking_call")
    # Fixing the sleep saves the job what rank 0 waited.
    assert within(top["job_saving_us"] / late_steps, slept, 0.3)
    pace = [i for i in job["issues"] if i["code"] == "pace"]
    assert pace and pace[0]["ranks"] == [1]


def test_one_work_wait_counts_once_though_two_collectives_ran_during_it(tmp_path):
    """Two all-reduces started together run on gloo's two worker threads at once; rank 0's
    first Work.wait covers both. It is counted once (for the first: the second wait returns
    at once), so rank 0 waited what it blocked, not twice that."""
    pytest.importorskip("torch")
    folder = tmp_path / "job"
    record_gloo_job(folder, world=2, late_rank=1, delay_s=0.05, steps=4, mode="two_at_once")
    report = analysed(tmp_path, folder)
    job = report["job"]
    rank0 = next(t for t in report["traces"] if t["worker"] == "rank0")
    blocked = _work_wait_us(rank0["path"])
    totals = {t["rank"]: t for t in job["rank_totals"]}
    assert totals[0]["wait_in_collectives_us"] == pytest.approx(blocked, rel=0.1)
    assert sum(s["time_us"] for s in job["steps"]) > totals[0]["wait_in_collectives_us"]
    top = job["sites"][0]
    assert (top["rank"], top["line"]) == (1, TWO_SLEEP_LINE)
    # Rank 1 sleeps first thing in every step, step 1 included: fixing it saves every step
    # (its first step's lateness was labelled carried in while the window was taken to
    # start at the first operator, after the sleep).
    slept = _slept_per_step_us(report, "rank1", 0.05)
    assert within(top["job_saving_us"] / len(job["steps"]), slept, 0.3)


@pytest.mark.parametrize("mode", ["ddp", "ddp_hook", "out_of_order", "functional"])
def test_every_way_of_waiting_for_gloo_keeps_the_waits_and_the_late_line(tmp_path, mode):
    """Rank 1 sleeps before its collectives each step; rank 0 waits for it whatever the way
    it waits: DDP's reducer (C++, or its Python comm hook, both waited for in C++ during
    backward, here beside an all-reduce for logging waited for from Python), two all-reduces
    waited for in the other order, a functional collective. The waits read from Python's
    Work.wait frames were 0 for the first two, and half for the third; the functional
    collective's autograd wrapper counted as a second collective."""
    pytest.importorskip("torch")
    folder = tmp_path / "job"
    record_gloo_job(folder, world=2, late_rank=1, delay_s=0.05, steps=4, mode=mode)
    report = analysed(tmp_path, folder)
    job = report["job"]
    totals = {t["rank"]: t for t in job["rank_totals"]}
    steps = len(job["steps"])
    slept = _slept_per_step_us(report, "rank1", 0.05)
    if mode == "out_of_order":
        # Rank 0 waits in Python's Work.wait, for the sleep and for the 16 MB all-reduce's
        # own transfer, which a loaded machine stretches (62-74 ms a step beside the test
        # suite): the frames it blocked in are the truth, not the delay.
        rank0 = next(t for t in report["traces"] if t["worker"] == "rank0")
        blocked = _work_wait_us(rank0["path"])
        # Load makes the wait longer, not shorter: frames renamed by another torch (both
        # sides 0) fail here.
        assert blocked >= 0.7 * 0.05e6 * (steps - 1)
        assert totals[0]["wait_in_collectives_us"] == pytest.approx(blocked, rel=0.15)
    else:
        assert within(totals[0]["wait_in_collectives_us"] / steps, slept, 0.3), totals[0]
    top = job["sites"][0]
    assert (top["rank"], top["line"]) == (1, SLEEP_LINES[mode])
    # The sleep opens every step, the first included: every step is saved (50.1 ms of 50
    # a step; the first step's was left out, as carried in, while the window was taken to
    # start at the first operator, after the sleep: 37.5 ms).
    assert within(top["job_saving_us"] / steps, slept, 0.2)


def test_a_side_threads_sleeps_are_no_ranks_blocking_time_nor_its_cost(tmp_path):
    """A review's job: every rank also runs a heartbeat thread sleeping 5 ms in a loop. Its
    sleeps were the rank's blocking time, and the heartbeat line the job's top site (32.9
    ms a step, above the lateness), beside the sleep that made rank 1 late (30.1 ms)."""
    pytest.importorskip("torch")
    folder = tmp_path / "job"
    record_gloo_job(folder, world=2, late_rank=1, delay_s=0.03, steps=4, mode="heartbeat")
    report = analysed(tmp_path, folder)
    job = report["job"]
    heartbeat = line_of("# HEARTBEAT:")
    assert [s["line"] for s in job["sites"]] == [SLEEP_LINE]
    totals = {t["rank"]: t for t in job["rank_totals"]}
    assert totals[0]["blocking_wait_us"] == 0.0
    assert within(totals[1]["blocking_wait_us"], 4 * _slept_per_step_us(report, "rank1", 0.03), 0.2)
    assert heartbeat not in {s.get("line") for s in report["sites"] + report["latent_sites"]}


def test_a_cpu_ranks_sleep_that_sets_the_pace_is_costed_what_fixing_it_saves(tmp_path):
    """Three all-reduces in flight from each step to the next, rank 1 sleeping 30 ms
    between waiting for them and starting the next ones: fixing the sleep saved 31-37 ms a
    step unprofiled (``bench/gloo_pace_truth.py``: 50-58 ms -> 18-21 ms, rank 0's step). The
    collectives' own figures explained 2 of its 4 late arrivals (the first step's was
    'carried in': the window was taken to start at the first operator, after the sleep),
    22 ms a step; with no replay on a CPU rank the pace figure was missing. It is now the
    sleep's share of rank 1's own step."""
    pytest.importorskip("torch")
    folder = tmp_path / "job"
    record_gloo_job(folder, world=2, late_rank=1, delay_s=0.03, steps=4, mode="in_flight")
    report = analysed(tmp_path, folder)
    job = report["job"]
    top = job["sites"][0]
    assert (top["rank"], top["line"]) == (1, SLEEP_LINES["in_flight"])
    assert top["bound"]
    slept = _slept_per_step_us(report, "rank1", 0.03)
    assert within(top["job_saving_per_step_us"], slept, 0.2), (top, slept)
    first = min(job["late_arrivals"], key=lambda a: (a["step"], a["k"]))
    # Explained by the sleep: most of it, or of the lateness where that is shorter. Under
    # load the lateness grows past the 30 ms slept (39.5 ms in one CI run) and what the
    # sleep explains stays the sleep (30.1 ms).
    asleep_us = 0.03e6
    assert first["step"] == 1, first
    assert first["explained_us"] > 0.8 * min(first["lateness_us"], asleep_us), first


@pytest.mark.parametrize(
    "late",
    [
        {(1, s): 4000.0 for s in range(1, 6)},  # rank 1 sets the pace
        {(1, 2): 4000.0, (2, 3): 4000.0, (3, 4): 4000.0},  # a different rank each step
    ],
    ids=["one_rank_late", "late_rank_changes"],
)
def test_a_line_on_every_rank_is_not_costed_more_than_fixing_it_saves_one_rank(tmp_path, late):
    """Each rank's item() on the same line saves that rank at most what its replay says per
    step, so fixing the line saves the job at most that per step. The pace figure (which
    already fixes the line on every rank) is not added to the other ranks' rows, and where
    no rank sets the pace the collectives' figures stand alone."""
    spec = JobSpec(world=4, ranks_per_host=4, subgroups=False, late=late)
    write_job(tmp_path / "job", spec)
    report = analyze_runs(find_traces(str(tmp_path)), Options(source_roots=[str(tmp_path / "job")]))
    per_rank = [
        r.savings.sites.get(key, 0.0) / len(r.rank.steps)
        for r in report.results
        for key in r.savings.sites
        if key.endswith(":aten::item")
    ]
    doc = report.report.to_json()
    site = next(s for s in doc["sites"] if s["line"] == ITEM_LINE)
    assert 0 < site["job_saving_per_step_us"] <= 1.05 * max(per_rank)
    pace = [i["ranks"] for i in doc["job"]["issues"] if i["code"] == "pace"]
    assert pace == ([[1]] if len(late) == 5 else [])


def test_several_jobs_in_one_run_folder_are_each_costed_with_their_own_ranks(tmp_path):
    """Two recordings of the H200 job in one folder (two jobs of ranks 0 and 1, as a
    profiler schedule with repeat writes): each job's figures are those of its own traces."""
    gpu_job = Path(__file__).resolve().parent / "gpu_job"
    run = tmp_path / "run"
    run.mkdir()
    alone = {}
    for variant in ("baseline", "both"):
        for trace in (gpu_job / variant).iterdir():
            shutil.copy(trace, run / f"{variant}_{trace.name}")
        doc = analyze_runs(
            find_traces(str(gpu_job / variant)), Options(source_roots=[str(gpu_job)])
        ).report.to_json()
        alone[variant] = (doc["job"]["job_saving_us"], doc["job"]["what_if"])
    doc = analyze_runs(find_traces(str(run)), Options(source_roots=[str(gpu_job)])).report.to_json()
    together = [doc["job"], *doc["job"]["other_jobs"]]
    assert sorted(j["job_saving_us"] for j in together) == pytest.approx(
        sorted(saving for saving, _ in alone.values())
    )
    assert [j["what_if"] for j in together] == ["replay", "replay"]
    assert all(how == "replay" for _, how in alone.values())


def test_gloo_lateness_is_split_into_explained_carried_in_and_not_explained(gloo_report):
    late = gloo_report["job"]["lateness"]
    parts = late["explained_us"] + late["carried_in_us"] + late["not_explained_us"]
    assert parts == pytest.approx(late["late_us"])
    assert late["explained_us"] > 0.8 * late["late_us"]
    arrivals = gloo_report["job"]["late_arrivals"]
    assert [a["rank"] for a in arrivals] == [GLOO_LATE] * GLOO_STEPS
    assert arrivals[0]["carried_in"] and not any(a["carried_in"] for a in arrivals[1:])


def test_cli_report_over_a_gloo_job_folder_prints_the_job_table(gloo_logdir, capsys):
    folder = gloo_logdir / "job"
    assert main(["report", str(folder), "--source-root", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "Job: world size 3 (gloo), ranks 0, 1, 2" in out
    assert "Lateness per rank and step" in out and "Top sites by cost to the job" in out
    site_rows = out.split("Top sites by cost to the job", 1)[1].splitlines()
    first = next(line for line in site_rows if line.strip().startswith("1 "))
    assert f"{SCRIPT}:{SLEEP_LINE}" in first and first.split()[1] == str(GLOO_LATE)


def test_cli_json_of_a_gloo_job_carries_the_job_object(gloo_logdir, capsys):
    folder = gloo_logdir / "job"
    assert main(["report", str(folder), "--json", "--source-root", str(folder)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["job"]["sites"][0]["line"] == SLEEP_LINE
    assert doc["job"]["sites"][0]["rank"] == GLOO_LATE


def test_a_gloo_job_whose_rank_crashed_in_torch_is_run_again_but_a_failing_job_is_not(
    tmp_path, monkeypatch
):
    """The recorder reruns a job, with a warning, only when a rank crashed (SIGSEGV in
    torch, in a forked child), at most ``CRASH_ATTEMPTS`` times; any other failure, an
    abort too, is raised at once."""
    import subprocess

    import gloo_workload

    def fake_run(outcomes):
        calls = []

        def run(command, cwd, **kwargs):
            code, stderr = outcomes[min(len(calls), len(outcomes) - 1)]
            calls.append(command)
            if code == 0:
                for rank in range(2):
                    (Path(cwd) / f"rank{rank}.pt.trace.json").write_text("{}")
            return subprocess.CompletedProcess(command, code, "", stderr)

        return run, calls

    crash = (1, "ProcessExitedException: process 1 terminated with signal SIGSEGV")
    run, calls = fake_run([crash, (0, "")])
    monkeypatch.setattr(gloo_workload.subprocess, "run", run)
    with pytest.warns(UserWarning, match="crashed"):
        assert len(gloo_workload.record_gloo_job(tmp_path / "a", world=2)) == 2
    assert len(calls) == 2

    for failure in ("ValueError: a bug in the job", "process 1 terminated with signal SIGABRT"):
        run, calls = fake_run([(1, failure)])
        monkeypatch.setattr(gloo_workload.subprocess, "run", run)
        with pytest.raises(RuntimeError, match=failure):
            gloo_workload.record_gloo_job(tmp_path / "b", world=2)
        assert len(calls) == 1

    run, calls = fake_run([crash])
    monkeypatch.setattr(gloo_workload.subprocess, "run", run)
    with pytest.raises(RuntimeError, match="SIGSEGV"), pytest.warns(UserWarning, match="crashed"):
        gloo_workload.record_gloo_job(tmp_path / "c", world=2)
    assert len(calls) == gloo_workload.CRASH_ATTEMPTS


# -- NCCL-shaped fixtures through the engine --------------------------------------------------

LATE_US = 4000.0
SPEC = JobSpec(
    late={(3, 2): LATE_US, (3, 3): LATE_US},
    missing=(5,),
    last_step={6: 3},
    host_skew_us=(0.0, 2500.0),
)


@pytest.fixture(scope="module")
def nccl_report(tmp_path_factory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("nccl_logdir")
    write_job(folder / "job", SPEC)
    return analysed(folder, folder / "job")


def issue_codes(job: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for issue in job["issues"]:
        out.setdefault(issue["code"], []).append(issue)
    return out


def test_nccl_job_with_a_missing_rank_names_it_and_analyses_the_others(nccl_report):
    job = nccl_report["job"]
    assert job["missing_ranks"] == [5] and not job["complete"]
    assert job["ranks"] == [0, 1, 2, 3, 4, 6, 7]
    (missing,) = issue_codes(job)[R.MISSING_RANKS]
    assert missing["ranks"] == [5] and missing["severity"] == "warning"
    assert job["collective_count"] > 0


def test_nccl_rank_that_stopped_early_is_named_and_matched_as_far_as_it_goes(nccl_report):
    job = nccl_report["job"]
    early = issue_codes(job)[R.STOPPED_EARLY]  # one per process group it is in
    assert early and all(issue["ranks"] == [6] for issue in early)
    totals = {r["rank"]: r for r in job["rank_totals"]}
    assert totals[6]["collectives"] < totals[0]["collectives"]
    assert max(r["step"] for r in job["rank_steps"] if r["rank"] == 6) == 3


def test_nccl_late_rank_item_line_is_the_job_cause_never_a_waiting_rank(nccl_report):
    job = nccl_report["job"]
    causes = [s for s in job["sites"] if s["job_saving_us"] > 0]
    assert causes and {s["rank"] for s in causes} == {3}
    top = causes[0]
    assert top["file"].endswith(TRAIN_FILE) and top["line"] == ITEM_LINE
    # As exact as the report's own site of that line (the dashboard marks it otherwise).
    site = next(s for s in nccl_report["sites"] if s["line"] == ITEM_LINE)
    assert top["line_exact"] == site["line_exact"]
    assert top["job_saving_us"] <= 2 * LATE_US + 1.0


def test_nccl_waiting_ranks_item_sync_is_relabelled_waiting_for_the_late_rank(nccl_report):
    waiting = [s for s in nccl_report["syncs"] if s["waiting_for_rank"] is not None]
    assert waiting and {s["waiting_for_rank"] for s in waiting} == {3}
    assert all(0 < s["peer_wait_us"] <= s["host_wait_us"] for s in waiting)
    assert not any(s["trace"].endswith("rank3.pt.trace.json") for s in waiting)
    site = next(s for s in nccl_report["sites"] if s["line"] == ITEM_LINE)
    # The site merges every rank's syncs of the line, rank 3's own among them.
    waited = sum(1 for s in waiting if s["site_key"] == site["key"])
    assert 0 < waited < site["count"]
    assert site["waiting_for"] == f"{waited} of its {site['count']} syncs waiting for rank 3"
    assert site["waiting_for_rank"] == 3
    # The old fields keep their meaning; the local saving drops by the peer's part.
    assert site["host_wait_us"] == pytest.approx(
        sum(s["host_wait_us"] for s in nccl_report["syncs"] if s["site_key"] == site["key"])
    )
    assert site["local_saving_us"] == pytest.approx(
        site["host_wait_us"] + site["gpu_idle_us"] - site["peer_wait_us"]
    )
    assert site["job_saving_us"] > 0 and site["caused_wait_us"] > 0


def test_the_waiting_for_label_reaches_the_table_and_the_csv(nccl_report):
    from tb_syncfinder.outputs.csv import to_csv
    from tb_syncfinder.outputs.text import render_report

    site = next(s for s in nccl_report["sites"] if s["line"] == ITEM_LINE)
    assert site["waiting_for"] in render_report(nccl_report, width=120)
    import csv
    import io

    header, *rows = list(csv.reader(io.StringIO(to_csv(nccl_report))))
    column = header.index("waiting_for")
    assert any(row[column] == site["waiting_for"] for row in rows)


def test_nccl_job_report_text_warns_about_the_missing_and_early_ranks(nccl_report):
    from tb_syncfinder.outputs.text import render_report

    text = render_report(nccl_report, width=120)
    assert "no trace of rank 5" in text
    assert f"[{R.MISSING_RANKS}]" in text and f"[{R.STOPPED_EARLY}]" in text


def item_site(report: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in report["sites"] if s["line"] == ITEM_LINE)


def test_a_read_on_one_rank_alone_is_said_per_step_of_that_rank_not_of_the_job(tmp_path):
    # Rank 0 alone logs its loss, in each step (``if rank == 0: print(loss.item())``): a
    # mean over both ranks' steps read 0.5 a step, "in 5 of 10 steps", naming no rank.
    import csv
    import io

    from tb_syncfinder.outputs.csv import to_csv
    from tb_syncfinder.outputs.text import render_report

    write_job(tmp_path / "run", JobSpec(world=2, ranks_per_host=2, steps=5, item_ranks=[0]))
    report = analysed(tmp_path)
    site = item_site(report)
    assert site["per_step"] == 0.5  # the schema's figure, over every rank's steps, stays
    assert site["job_ranks"] == 2
    assert site["ranks"] == [{"rank": 0, "count": 5, "steps": 5, "steps_with_syncs": 5}]
    text = render_report(report, width=200)
    assert "on rank 0 only, of the 2 ranks traced: 1.0 a step there" in text
    assert "in 5 of 10 steps" not in text
    rows = list(csv.DictReader(io.StringIO(to_csv(report))))
    assert next(r for r in rows if r["line"] == str(ITEM_LINE))["ranks"] == "0:5/5"


def test_a_read_in_some_steps_of_some_ranks_names_each_ranks_own_steps(tmp_path):
    from tb_syncfinder.outputs.text import ranks_text

    spec = JobSpec(world=4, ranks_per_host=4, steps=4, item_ranks=[1, 3], item_steps=[2, 4])
    write_job(tmp_path / "run", spec)
    site = item_site(analysed(tmp_path))
    assert [(r["rank"], r["count"], r["steps_with_syncs"]) for r in site["ranks"]] == [
        (1, 2, 2),
        (3, 2, 2),
    ]
    assert ranks_text(site) == (
        "on 2 of the 4 ranks traced: rank 1: 0.5 a step, in 2 of its 4 steps; "
        "rank 3: 0.5 a step, in 2 of its 4 steps"
    )


def test_a_read_alike_on_every_rank_says_nothing_by_rank(tmp_path):
    from tb_syncfinder.outputs.text import ranks_text

    write_job(tmp_path / "run", JobSpec(world=2, ranks_per_host=2, steps=3))
    site = item_site(analysed(tmp_path))
    assert len(site["ranks"]) == 2 and site["job_ranks"] == 2
    assert ranks_text(site) == ""


def test_a_guarded_read_on_one_rank_says_its_rank_and_its_guard():
    from tb_syncfinder.outputs.text import spread_text

    site = {
        "count": 5,
        "per_step": 0.5,
        "steps_with_syncs": 5,
        "max_per_step": 1,
        "periodic_guard": "step % 10 == 0",
        "job_ranks": 2,
        "ranks": [{"rank": 0, "count": 5, "steps": 5, "steps_with_syncs": 5}],
    }
    assert spread_text(site, 10) == (
        "on rank 0 only, of the 2 ranks traced: 1.0 a step there: "
        "already every N steps (under `if step % 10 == 0:`)"
    )


def test_run_without_distributed_info_has_no_job(tmp_path):
    from kineto_builder import KinetoTraceBuilder, item_sync

    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b, stack=[("train.py", 4, "train_step")])
    b.write(tmp_path / "run" / "w.pt.trace.json")
    doc = analysed(tmp_path)
    assert doc["job"] is None
    assert all(s["local_saving_us"] is None and s["job_saving_us"] == 0.0 for s in doc["sites"])
    assert all(s["ranks"] == [] and s["job_ranks"] == 0 for s in doc["sites"])


# -- the rank trace through summaries, pickling and replays ----------------------------------


def test_rank_trace_survives_the_per_trace_summary_and_pickling(tmp_path):
    paths = write_job(
        tmp_path / "job", JobSpec(world=2, ranks_per_host=2, steps=2, host_skew_us=(0.0,))
    )
    ref = TraceRef(str(paths[0]), "job", "rank0")
    options = Options(source_roots=[str(tmp_path / "job")])
    result = analyze_trace(ref, options)
    assert result.rank is not None and result.rank.rank == 0 and result.rank.collectives
    store = SummaryStore(str(tmp_path / "summaries"))
    assert store.put(ref, result, options)
    stored = store.get(ref, options).result
    assert stored is not None and stored.rank == result.rank
    assert pickle.loads(pickle.dumps(result)).rank == result.rank


def test_replayed_what_ifs_replace_the_bounds_for_the_ranks_they_cover(tmp_path):
    paths = write_job(
        tmp_path / "job",
        JobSpec(world=4, ranks_per_host=4, steps=4, late={(1, 2): LATE_US}, host_skew_us=(0.0,)),
    )
    options = Options(source_roots=[str(tmp_path / "job")], contexts=False)
    traces = [
        analyze_trace(TraceRef(str(p), "job", f"rank{r}"), options).rank for r, p in paths.items()
    ]
    (analysis,) = R.analyze_ranks(traces).jobs
    bounds, bound = jobs.job_what_ifs(analysis)
    assert bound and bounds and {w.rank for w in bounds} == {1}
    replayed = {1: {w.wait_id: {w.collective_index: w.earlier_us / 2} for w in bounds}}
    halves, bound = jobs.job_what_ifs(analysis, replayed)
    assert not bound
    assert sum(w.earlier_us for w in halves) == pytest.approx(sum(w.earlier_us for w in bounds) / 2)


# -- real traces recorded by others ------------------------------------------------------------


def test_real_single_rank_nccl_traces_load_as_incomplete_jobs(real_traces_dir, tmp_path):
    for name in ("a100_nccl_event_sync.pt.trace.json.gz", "a100_item_heavy_rank0.pt.trace.json.gz"):
        run = tmp_path / name.split(".")[0]
        run.mkdir()
        shutil.copy(real_traces_dir / name, run / name)
        doc = analysed(run)
        assert all(t["error"] is None for t in doc["traces"]), doc["traces"]
        job = doc["job"]
        if job is None:  # a trace without distributedInfo is no rank of a job
            continue
        assert job["ranks"] and not job["complete"] and job["missing_ranks"]
        assert R.MISSING_RANKS in issue_codes(job)
        assert job["sites"] == [] or all(s["bound"] for s in job["sites"])


def test_nccl_lateness_from_gpu_work_is_not_pinned_on_the_late_ranks_sync_by_the_replay(tmp_path):
    # The late rank's extra time is a longer kernel before its .item(): the item waits for
    # it, but without the item the all-reduce kernel would still queue behind that kernel.
    # The bound blames the item for the whole lateness; the replay (now what the engine
    # uses for ranks whose collectives have kernels) gives it only its own bubble.
    paths = write_job(
        tmp_path / "job",
        JobSpec(world=4, ranks_per_host=4, steps=4, late={(1, 2): LATE_US}, host_skew_us=(0.0,)),
    )
    options = Options(source_roots=[str(tmp_path / "job")], contexts=False)
    results = [
        analyze_trace(TraceRef(str(p), "job", f"rank{r}"), options) for r, p in paths.items()
    ]
    assert all(r.rank is not None and r.rank.replayed_earlier for r in results)
    (analysis,) = R.analyze_ranks([r.rank for r in results]).jobs
    bounds, _ = jobs.job_what_ifs(analysis)
    assert sum(w.earlier_us for w in bounds) > 0.9 * LATE_US

    from tb_syncfinder.engine import report_runs

    job = report_runs(results).report.to_json()["job"]
    assert job["what_if"] == "replay"
    (cause,) = [s for s in job["sites"] if s["job_saving_us"] > 0]
    assert cause["rank"] == 1 and cause["line"] == ITEM_LINE
    assert 0 < cause["job_saving_us"] < 0.1 * LATE_US
    assert job["lateness"]["not_explained_us"] > 0.8 * LATE_US


def test_a_run_of_copies_of_one_rank_names_the_duplicates_and_still_reports(tmp_path):
    # Copies of one rank's trace (a benchmark, or a folder copied twice): every rank is a
    # duplicate, so the job has no usable rank; the report must still come out.
    paths = write_job(tmp_path / "src", JobSpec(world=4, ranks_per_host=4, steps=2))
    run = tmp_path / "copies"
    run.mkdir()
    for n in range(3):
        shutil.copy(paths[0], run / f"copy{n}.pt.trace.json")
    options = Options(source_roots=[str(tmp_path / "src")], contexts=False)
    report = analyze_runs(find_traces(str(run)), options).report.to_json()
    assert len(report["syncs"]) > 0
    codes = [issue["code"] for issue in report["job"]["issues"]]
    assert R.DUPLICATE_RANK in codes and R.MISSING_RANKS in codes


def test_a_job_whose_ranks_never_wait_on_the_host_says_it_has_no_what_if(tmp_path):
    # Before, "what_if" read "replay" for a job with no what-if at all (any([]) is False).
    from tb_syncfinder.engine import report_runs

    labels = {}
    for item in (True, False):
        paths = write_job(
            tmp_path / f"item_{item}",
            JobSpec(world=2, ranks_per_host=2, steps=3, host_skew_us=(0.0,), item=item),
        )
        options = Options(contexts=False)
        results = [
            analyze_trace(TraceRef(str(p), "job", f"rank{r}"), options) for r, p in paths.items()
        ]
        job = report_runs(results).report.to_json()["job"]
        labels[item] = (job["what_if"], job["site_count"])
    assert labels[True][0] == "replay" and labels[True][1] > 0
    assert labels[False] == ("none", 0)
