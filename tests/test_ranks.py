"""The job stage (tb_syncfinder.ranks): real gloo jobs recorded on the CPU, NCCL-shaped jobs
from the fixture builder (8 ranks, two hosts with skewed clocks, a missing rank, a rank whose
trace ends early), real traces recorded by others, and the cause hook."""

from __future__ import annotations

import json
import pickle
import re
import shutil
import statistics
from pathlib import Path

import pytest
from gloo_workload import READBACK_LINE, SCRIPT, SLEEP_LINE, record_gloo_job
from kineto_builder import KinetoTraceBuilder
from nccl_job import ITEM_LINE, TRAIN_FILE, JobSpec, write_job
from test_collectives import hta_trace_filter_pair

from tb_syncfinder import ranks as R
from tb_syncfinder.collectives import Collective, RankTrace, extract_rank_file
from tb_syncfinder.engine import Options, analyze_trace


def rank_traces(paths, source_root: Path | None = None) -> list[RankTrace]:
    """What the pipeline will do per trace: the engine's analysis, then the extraction with
    its syncs (latent ones too: on a CPU trace they are the readbacks)."""
    options = Options(source_roots=[str(source_root)] if source_root else (), contexts=False)
    resolver = options.resolver()
    out = []
    for p in paths:
        result = analyze_trace(str(p), options, resolver)
        assert result.info.error is None, result.info.error
        out.append(extract_rank_file(str(p), syncs=result.syncs + result.latent, resolver=resolver))
    return out


def only_job(traces) -> R.JobAnalysis:
    run = R.analyze_ranks(traces)
    assert len(run.jobs) == 1, [j.job.key for j in run.jobs]
    return run.jobs[0]


def codes(analysis: R.JobAnalysis) -> dict[str, list[R.JobIssue]]:
    out: dict[str, list[R.JobIssue]] = {}
    for issue in analysis.issues:
        out.setdefault(issue.code, []).append(issue)
    return out


def within(measured: float, expected: float, share: float = 0.2) -> bool:
    return abs(measured - expected) <= share * expected


# -- a real gloo job on the CPU ---------------------------------------------------------------

DELAY_S = 0.08  # long against scheduling noise on two busy cores, short for the test
GLOO_WORLD = 3
GLOO_LATE = 1
GLOO_STEPS = 4


@pytest.fixture(scope="module")
def gloo_job(tmp_path_factory):
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo not available")
    folder = tmp_path_factory.mktemp("gloo_job")
    paths = record_gloo_job(
        folder, world=GLOO_WORLD, late_rank=GLOO_LATE, delay_s=DELAY_S, steps=GLOO_STEPS
    )
    return folder, only_job(rank_traces(paths, folder))


def test_gloo_job_collectives_are_matched_on_every_rank_and_step(gloo_job):
    _folder, job = gloo_job
    assert sorted(job.ranks) == [0, 1, 2] and job.job.missing == []
    (group,) = job.groups
    assert group.status == "matched" and group.matched == GLOO_STEPS
    assert [c.step for c in job.collectives] == list(range(1, GLOO_STEPS + 1))
    for c in job.collectives:
        assert c.name == "allreduce"
        assert {a.source for a in c.arrivals} == {"cpu_op"}  # the gloo op, no kernel


# Other engineers' tests share the two cores (load averages of 10-20 seen): a process may be
# descheduled at any moment, which is real lateness or waiting that was not injected, and
# time.sleep(0.08) itself once lasted 207 ms. So the injected delay is what the deliberate
# wait lasted in the late rank's own trace (never less than asked), and per rank the median
# over the steps of what the other ranks measured is held to 20 % of it.


def injected_us(job: R.JobAnalysis) -> dict[int, float]:
    """Per step, how long the late rank's deliberate host wait lasted (its own trace)."""
    sleeps = {
        w.step: w.wait_us
        for w in job.ranks[GLOO_LATE].waits
        if w.kind == "blocking_call" and w.line == SLEEP_LINE
    }
    assert sorted(sleeps) == list(range(1, GLOO_STEPS + 1))
    assert all(us >= 0.99 * DELAY_S * 1e6 for us in sleeps.values())
    return sleeps


def test_gloo_job_names_the_late_rank_at_every_collective(gloo_job):
    _folder, job = gloo_job
    injected = injected_us(job)
    assert [c.last_rank for c in job.collectives] == [GLOO_LATE] * GLOO_STEPS
    assert all(c.lateness_us > 0.5 * injected[c.step] for c in job.collectives)
    assert within(
        statistics.median(c.lateness_us for c in job.collectives),
        statistics.median(injected.values()),
    )


def test_gloo_waits_on_the_other_ranks_are_within_20_percent_of_the_injected_delay(gloo_job):
    _folder, job = gloo_job
    injected = injected_us(job)
    waits: dict[int, list[tuple[float, float]]] = {}
    for c in job.collectives:
        for a in c.arrivals:
            waits.setdefault(a.rank, []).append((a.wait_us, injected[c.step]))
    assert [w for w, _ in waits.pop(GLOO_LATE)] == [0.0] * GLOO_STEPS
    assert sorted(waits) == [r for r in range(GLOO_WORLD) if r != GLOO_LATE]
    for rank, pairs in waits.items():
        measured = statistics.median(w for w, _ in pairs)
        assert within(measured, statistics.median(d for _, d in pairs)), (rank, pairs)
        assert all(w > 0.5 * d for w, d in pairs), (rank, pairs)


def test_gloo_cause_is_the_late_rank_at_the_line_of_its_host_wait(gloo_job):
    _folder, job = gloo_job
    injected = injected_us(job)
    causes = R.job_causes(job)
    top = causes[0]
    assert top.rank == GLOO_LATE
    assert top.file.endswith(SCRIPT) and top.line == SLEEP_LINE and top.kind == "blocking_call"
    assert top.bound  # the fallback gives bounds, said so
    total = sum(injected.values())
    assert within(top.job_saving_us, total)
    assert top.job_saving_us <= total + 1.0  # a bound never exceeds the wait itself
    assert within(top.caused_wait_us, total * (GLOO_WORLD - 1))
    # The CPU readback on the next line waited for nothing: it is not blamed.
    assert all(c.line != READBACK_LINE or c.job_saving_us < 0.05 * total for c in causes)
    readbacks = [w for w in job.ranks[GLOO_LATE].waits if w.line == READBACK_LINE]
    assert readbacks and all(w.is_sync and w.latent for w in readbacks)


def test_gloo_ranks_share_one_host_clock_and_its_residual_is_reported(gloo_job):
    _folder, job = gloo_job
    if not all(rt.host_name for rt in job.ranks.values()):
        pytest.skip("this torch writes no host_name: each rank is a clock of its own")
    (clock,) = job.clocks
    assert clock.method == "reference" and clock.ranks == [0, 1, 2]
    # The exits of one all-reduce on one host: within a few ms even on two busy cores.
    assert clock.residual_us is not None and clock.residual_us < 5_000
    assert job.noise_us >= R.MIN_NOISE_US


def test_gloo_lateness_at_the_first_collective_is_labelled_carried_in(gloo_job):
    _folder, job = gloo_job
    first = job.collectives[0]
    assert first.carried_in and not any(c.carried_in for c in job.collectives[1:])
    # What no host wait explains is labelled: at the first collective it may come from
    # before the window.
    late = R.late_arrivals(job, [])
    assert "before the profiled window" in late[0].label
    assert "before the profiled window" not in late[1].label


def _renumbered_copy(folder: Path, out: Path, rank: int, extra: int) -> list[Path]:
    """The job's traces, rank ``rank``'s steps numbered ``extra`` higher (its profiler
    stepped ``extra`` more times before the window: a warm-up of its own)."""
    out.mkdir()
    paths = []
    for path in sorted(folder.glob("rank*.pt.trace.json")):
        text = path.read_text(encoding="utf-8")
        if path.name == f"rank{rank}.pt.trace.json":
            text = re.sub(
                r"ProfilerStep#(\d+)", lambda m: f"ProfilerStep#{int(m.group(1)) + extra}", text
            )
        paths.append(out / path.name)
        paths[-1].write_text(text, encoding="utf-8")
    return paths


@pytest.mark.parametrize(
    ("renumbered", "extra"), [(GLOO_WORLD - 1, 2), (GLOO_WORLD - 1, 5), (0, 5)]
)
def test_a_ranks_steps_numbered_apart_over_the_same_time_are_matched_by_time(
    gloo_job, tmp_path, renumbered, extra
):
    """A rank's steps numbered 2 higher paired the ranks' collectives of different
    iterations (the late rank read as none late); numbered past the others' (no step in
    common) the report failed with StopIteration. Their times say which steps ran
    together: the rank is counted in the others' numbers, and said so; the lowest rank
    too, where it is the odd one (every other rank was renamed after it)."""
    if not all(rt.host_name for rt in gloo_job[1].ranks.values()):
        pytest.skip("this torch writes no host_name: no two ranks are known to share a clock")
    folder, job = gloo_job
    paths = _renumbered_copy(folder, tmp_path / "job", renumbered, extra)
    again = only_job(rank_traces(paths, folder))
    (issue,) = codes(again)[R.STEPS_RENUMBERED]
    assert issue.ranks == [renumbered] and f"stepped {extra} times more" in issue.message
    assert [(c.step, c.last_rank) for c in again.collectives] == [
        (c.step, c.last_rank) for c in job.collectives
    ]
    for c, before in zip(again.collectives, job.collectives, strict=True):
        assert c.lateness_us == pytest.approx(before.lateness_us)
    assert sorted({(r.rank, r.step) for r in again.rank_steps}) == sorted(
        {(r.rank, r.step) for r in job.rank_steps}
    )


def _steps_rank(
    rank: int, numbers: range, clock_us: float = 0.0, drift_us: float = 0.0, host: str = "h"
) -> RankTrace:
    """A rank of 1 ms steps, an all-reduce leaving at 0.9 ms of each iteration: its clock
    ``clock_us`` ahead (steps and collectives), its steps ``drift_us`` later than the
    iterations' collectives (a rank that waits for an all-reduce a step later)."""
    from tb_syncfinder.models import DistributedInfo, StepSpan

    steps, collectives = [], []
    for k, number in enumerate(numbers):
        ts = k * 1000.0 + clock_us + drift_us
        steps.append(StepSpan(number, ts, ts + 990.0))
        end = k * 1000.0 + 900.0 + clock_us
        collectives.append(
            Collective(index=k, name="allreduce", group="0", exec_ts=end - 50.0, exec_end=end,
                       step=number)
        )  # fmt: skip
    return RankTrace(
        f"rank{rank}.json", f"rank{rank}", DistributedInfo(rank, 2, "nccl", ()), 0, host,
        (0.0, len(numbers) * 1000.0 + clock_us + drift_us), collectives=collectives, steps=steps,
    )  # fmt: skip


def _renumbered_ranks(ranks: dict[int, RankTrace]) -> tuple[dict[int, list[int]], list[list[int]]]:
    issues: list[R.JobIssue] = []
    job = R._steps_numbered_alike(R.Job("k", len(ranks), "nccl", ranks, []), issues)
    steps = {r: [s.number for s in rt.steps] for r, rt in job.ranks.items()}
    return steps, [i.ranks for i in issues]


@pytest.mark.parametrize("clock_us", [300.0, 650.0])
def test_steps_numbered_alike_on_clocks_apart_are_not_renumbered(clock_us):
    """One clock a third or two thirds of a step ahead, read before the clocks are aligned,
    and its window a step shorter: its steps were paired with the next ones by time and
    renumbered (and the clocks then aligned a step off). Only collectives that left
    together pair steps: none did on the clocks as read, so nothing is renumbered."""
    steps, named = _renumbered_ranks(
        {0: _steps_rank(0, range(1, 9)), 1: _steps_rank(1, range(1, 8), clock_us=clock_us)}
    )
    assert named == [] and steps[1] == list(range(1, 8))


def test_ranks_a_step_apart_in_time_whose_collectives_leave_together_keep_their_numbers():
    """An all-reduce waited for a step later lets a rank drift most of a step from the
    others (the CPU job of tests/test_job_stage.py, overlapped): its steps overlap the
    others' next ones, and were renumbered by their times. Their collectives leave together
    in the same-numbered steps: numbered alike."""
    steps, named = _renumbered_ranks(
        {0: _steps_rank(0, range(1, 9)), 1: _steps_rank(1, range(1, 9), drift_us=950.0)}
    )
    assert named == [] and steps[1] == list(range(1, 9))


def test_a_rank_numbered_apart_is_renumbered_by_its_collectives():
    steps, named = _renumbered_ranks(
        {0: _steps_rank(0, range(1, 9)), 1: _steps_rank(1, range(3, 11), clock_us=5.0)}
    )
    assert named == [[1]] and steps[1] == list(range(1, 9))


def test_the_lowest_rank_numbered_apart_is_the_one_renumbered_whatever_the_others_windows():
    """Rank 0 numbers the iterations 6-10 where ranks 1-3 say 1-5, and ranks 1 and 2 profiled
    a step more: rank 0 is the one renumbered and named, not the ranks that agree."""
    steps, named = _renumbered_ranks(
        {
            0: _steps_rank(0, range(6, 11)),
            1: _steps_rank(1, range(1, 7)),
            2: _steps_rank(2, range(1, 7)),
            3: _steps_rank(3, range(1, 6)),
        }
    )
    assert named == [[0]]
    assert steps[0] == steps[3] == [1, 2, 3, 4, 5] and steps[1] == [1, 2, 3, 4, 5, 6]


def test_ranks_whose_step_numbers_share_none_and_no_clock_pairs_them_are_named_not_a_crash():
    """Step numbers with nothing in common, where the clocks could not pair the steps: the
    sequences are left as they are (then refused with the first step that differs) and the
    reason named, where the trim looked for a common step that was not there."""
    seqs = {
        0: [Collective(index=k, name="all_reduce", group="0", step=k + 1) for k in range(5)],
        1: [Collective(index=k, name="all_reduce", group="0", step=k + 6) for k in range(5)],
    }
    issues: list[R.JobIssue] = []
    R._trim_to_common_start(seqs, "0", issues)
    (issue,) = issues
    assert issue.code == R.STEPS_DISJOINT
    assert "rank 0: 1-5, rank 1: 6-10" in issue.message
    assert [len(seq) for seq in seqs.values()] == [5, 5]
    assert "is in step 1 on rank 0 but in step 6 on rank 1" in R._first_difference(seqs)


def test_a_rank_whose_window_started_a_step_later_leaves_the_jobs_saving_per_step_whole(
    tmp_path, monkeypatch
):
    """Rank 1's profiler waits a step longer: its steps are 2-4 where the others' are 1-4,
    and the job's collectives of step 1 are not matched. The late rank's saving over the 3
    steps it was matched in was divided by the others' 4 (0.75 of the delay a step)."""
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo not available")
    import gloo_workload

    schedule = "schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps),"
    later = (
        "schedule=torch.profiler.schedule(wait=(1 if rank == 1 else 0), warmup=1, "
        "active=(steps - 1 if rank == 1 else steps)),"
    )
    assert schedule in gloo_workload.WORKLOAD
    monkeypatch.setattr(gloo_workload, "WORKLOAD", gloo_workload.WORKLOAD.replace(schedule, later))
    late = 2
    paths = record_gloo_job(tmp_path, world=3, late_rank=late, delay_s=DELAY_S, steps=GLOO_STEPS)
    job = only_job(rank_traces(paths, tmp_path))
    assert job.common_steps == set(range(2, GLOO_STEPS + 1)) and job.step_count == GLOO_STEPS - 1
    top = R.site_job_costs(job, R.fallback_what_ifs(job))[0]
    assert top.rank == late and top.line == SLEEP_LINE
    assert top.job_saving_per_step_us > 0.9 * DELAY_S * 1e6
    assert (
        R.own_steps(job)[late] - max(us for rank, us in R.own_steps(job).items() if rank != late)
        > 0.9 * DELAY_S * 1e6
    )


def test_a_second_jobs_traces_in_the_folder_get_a_section_of_their_own(gloo_job, tmp_path, capsys):
    """Two jobs' traces in one folder (the second a minute later): the report showed the
    first job and one line naming the second, whose late rank and its cost were in the JSON
    alone."""
    from tb_syncfinder import analyze
    from tb_syncfinder.cli import main

    folder, _job = gloo_job
    run = tmp_path / "run"
    run.mkdir()
    for path in sorted(folder.glob("rank*.pt.trace.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        (run / path.name).write_text(json.dumps(doc), encoding="utf-8")
        for event in doc["traceEvents"]:
            if "ts" in event:
                event["ts"] += 60e6
        (run / f"b_{path.name}").write_text(json.dumps(doc), encoding="utf-8")
    report = analyze(run, source_roots=[str(folder)])
    job = report.job
    assert job is not None and len(job["other_jobs"]) == 1
    other = job["other_jobs"][0]
    assert other["ranks"] == list(range(GLOO_WORLD)) and other["late_collective_count"] > 0
    assert main(["report", str(run), "--source-root", str(folder)]) == 0
    text = capsys.readouterr().out
    head, _, rest = text.partition("Another job in this run, recorded from ")
    assert rest and re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC:", rest)
    assert "Lateness per rank and step" in head and "Lateness per rank and step" in rest
    assert f"b_rank{GLOO_LATE}" in rest and "time.sleep" in rest
    # Each job named by when it began, not by its key's epoch seconds.
    (other_job,) = [i for i in job["issues"] if i["code"] == R.OTHER_JOB]
    assert re.search(
        r"\(gloo\) recorded from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC is", other_job["message"]
    )


def test_ranks_on_one_host_name_whose_clocks_differ_are_said_to_hide_lateness(gloo_job, tmp_path):
    """Two containers with one host name and their own clocks: ranks sharing a name share a
    clock for the job stage, so one 30 ms off set a noise floor that hid the late rank,
    unsaid. The floor is named with the spread that set it."""
    folder, job = gloo_job
    if not all(rt.host_name for rt in job.ranks.values()):
        pytest.skip("this torch writes no host_name: each rank is a clock of its own")
    assert R.NOISE_FLOOR_HIGH not in codes(job)
    run = tmp_path / "run"
    run.mkdir()
    for path in sorted(folder.glob("rank*.pt.trace.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if path.name == "rank0.pt.trace.json":
            for event in doc["traceEvents"]:
                if "ts" in event:
                    event["ts"] += 0.4 * DELAY_S * 1e6
        (run / path.name).write_text(json.dumps(doc), encoding="utf-8")
    again = only_job(rank_traces(sorted(run.glob("*.json")), folder))
    (issue,) = codes(again)[R.NOISE_FLOOR_HIGH]
    assert "is not called lateness here" in issue.message and issue.severity == "warning"
    # The rank that sets the pace is not said to have made the others wait 0 ms so far: the
    # floor hid their waits, as the warning says.
    pace = R.pace_issue(again)
    assert pace is not None and pace.ranks == [GLOO_LATE]
    assert "so far" not in pace.message
    assert "no collective calls it late: lateness below the job's noise floor" in pace.message
    # Where the floor still lets some of its lateness through (a smaller clock offset), the
    # note does not say none was called.
    called = again.collectives[0]
    called.last_rank, called.lateness_us = GLOO_LATE, 0.9 * DELAY_S * 1e6
    held = R.pace_issue(again)
    assert held is not None and "no collective calls it late" not in held.message
    assert "so far" not in held.message


def test_a_fault_of_the_job_stage_leaves_the_runs_traces_reported(gloo_job, monkeypatch):
    """A run the job stage fails on (a bug) is reported trace by trace, saying so, instead
    of failing the report of every run beside it."""
    import tb_syncfinder.jobs
    from tb_syncfinder import analyze

    folder, _job = gloo_job

    def broken(*_args, **_kwargs):
        raise StopIteration

    monkeypatch.setattr(tb_syncfinder.jobs, "job_stage", broken)
    report = analyze(folder, source_roots=[str(folder)])
    assert len(report.traces) == GLOO_WORLD and report.job is None
    assert report.summary.latent_count > 0
    assert "the job stage failed (StopIteration" in report.summary.saving_note


def test_gloo_rank_steps_show_waiting_on_peers_against_being_waited_for(gloo_job):
    _folder, job = gloo_job
    injected = injected_us(job)
    delay = statistics.median(injected.values())
    late = [r for r in job.rank_steps if r.rank == GLOO_LATE]
    others = [r for r in job.rank_steps if r.rank != GLOO_LATE]
    assert len(late) == GLOO_STEPS and len(others) == GLOO_STEPS * (GLOO_WORLD - 1)
    assert all(r.wait_us == 0.0 for r in late) and all(r.late_us == 0.0 for r in others)
    assert all(r.blocking_wait_us == pytest.approx(injected[r.step]) for r in late)
    assert within(statistics.median(r.late_us for r in late), delay)
    assert within(statistics.median(r.caused_wait_us for r in late), delay * (GLOO_WORLD - 1))
    assert within(statistics.median(r.wait_us for r in others), delay)


# -- NCCL-shaped: 8 ranks, two hosts, a missing rank, a rank that stopped early ---------------

LATE_US = 4000.0
ABSENT_LATE_US = 3000.0
SKEW_US = 2500.0
MAIN = JobSpec(
    late={(3, 2): LATE_US, (3, 3): LATE_US, (5, 4): ABSENT_LATE_US},
    missing=(5,),
    last_step={6: 3},
    host_skew_us=(0.0, SKEW_US),
)


@pytest.fixture(scope="module")
def nccl_job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nccl_job")
    paths = write_job(folder, MAIN)
    return only_job(rank_traces(paths.values(), folder))


def _collective(job: R.JobAnalysis, group: str, step: int, nth: int = 0) -> R.MatchedCollective:
    found = [c for c in job.collectives if c.group == group and c.step == step]
    return found[nth]


def test_missing_rank_is_named_and_the_analysis_is_partial(nccl_job):
    issues = codes(nccl_job)
    (missing,) = issues[R.MISSING_RANKS]
    assert missing.ranks == [5] and "5" in missing.message
    status = {g.group: g.status for g in nccl_job.groups}
    assert status == {"0": "partial", "1": "matched", "2": "partial"}
    assert all(5 in c.absent for c in nccl_job.collectives if c.group in ("0", "2"))


def test_rank_whose_trace_ends_early_is_named_and_matched_as_far_as_it_goes(nccl_job):
    stopped = codes(nccl_job)[R.STOPPED_EARLY]
    assert {i.ranks[0] for i in stopped} == {6}
    assert all("after step 3" in i.message for i in stopped)
    group0 = next(g for g in nccl_job.groups if g.group == "0")
    assert group0.counts[6] == 6 and group0.counts[0] == 10 and group0.matched == 10
    for c in nccl_job.collectives:
        present = {a.rank for a in c.arrivals}
        if c.step <= 3 and c.group != "1":
            assert 6 in present
        elif c.group != "1":
            assert 6 in c.absent and 6 not in present


def test_two_hosts_with_skewed_clocks_are_aligned_and_the_residual_reported(nccl_job):
    node0, node1 = nccl_job.clocks
    assert (node0.name, node0.method, node0.offset_us) == ("node0", "reference", 0.0)
    assert node1.name == "node1" and node1.method == "collectives"
    assert node1.offset_us == pytest.approx(SKEW_US, abs=5.0)
    assert node1.samples >= 5 and node1.residual_us is not None and node1.residual_us <= 5.0
    assert node0.residual_us is not None and node0.residual_us <= 5.0  # kernels end within 4 us
    assert "node1: +25" in codes(nccl_job)[R.CLOCK_SKEW][0].message


def test_late_rank_is_named_and_the_others_wait_within_20_percent(nccl_job):
    for step in (2, 3):
        c = _collective(nccl_job, "0", step)
        assert c.last_rank == 3 and c.last_certain and within(c.lateness_us, LATE_US)
        for a in c.arrivals:
            if a.rank != 3:
                assert within(a.wait_us, LATE_US), (step, a.rank, a.wait_us)
    # Nobody else is late anywhere: the second all-reduce of a step and the all-gathers
    # start together once the first all-reduce has ended.
    late = {(c.group, c.k) for c in nccl_job.collectives if c.last_rank is not None}
    assert late == {("0", 2), ("0", 4)}


def test_lateness_of_a_rank_without_trace_is_never_pinned_on_a_present_rank(nccl_job):
    c = _collective(nccl_job, "0", 4)
    assert c.last_rank is None and not c.last_certain
    assert within(c.absent_late_us, ABSENT_LATE_US)
    assert codes(nccl_job)[R.ABSENT_RANK_LATE][0].ranks == [5, 6]
    causes = R.job_causes(nccl_job)
    assert all(4 not in site.steps for site in causes)
    assert {site.rank for site in causes} == {3}


def test_cause_fallback_names_the_late_ranks_sync_line_with_bounds(nccl_job):
    (cause,) = R.job_causes(nccl_job)
    assert (cause.rank, cause.file, cause.line) == (3, TRAIN_FILE, ITEM_LINE)
    assert cause.kind == "scalar_readback" and cause.op == "aten::item" and cause.is_sync
    assert cause.bound and cause.steps == [2, 3] and cause.late_collectives == 2
    assert within(cause.job_saving_us, 2 * LATE_US)
    waiting = 6  # ranks 0, 1, 2, 4, 6, 7 have traces in steps 2 and 3
    assert within(cause.caused_wait_us, 2 * LATE_US * waiting)
    assert cause.job_saving_per_step_us == pytest.approx(cause.job_saving_us / MAIN.steps)


def test_peer_waits_find_the_local_syncs_that_absorbed_the_wait_for_the_late_rank(nccl_job):
    absorbed = [p for p in R.peer_waits(nccl_job) if p.k == 2 and p.group == "0"]
    assert {p.rank for p in absorbed} == {0, 1, 2, 4, 6, 7}
    assert all(
        p.late_rank == 3 and p.site_key.startswith(f"{TRAIN_FILE}:{ITEM_LINE}:") for p in absorbed
    )
    assert all(within(p.overlap_us, LATE_US) for p in absorbed)


def test_rank_step_table_separates_waiting_on_peers_from_being_waited_for(nccl_job):
    rows = {(r.rank, r.step): r for r in nccl_job.rank_steps}
    assert within(rows[(3, 2)].late_us, LATE_US) and rows[(3, 2)].wait_us < 100
    assert within(rows[(0, 2)].wait_us, LATE_US) and rows[(0, 2)].late_us == 0
    assert within(rows[(0, 4)].absent_wait_us, ABSENT_LATE_US)
    assert rows[(3, 2)].sync_wait_us > LATE_US  # its .item() waited for the GPU work


def test_job_step_is_the_slowest_ranks_step(nccl_job):
    for js in nccl_job.job_steps:
        spans = [
            s.duration for rt in nccl_job.ranks.values() for s in rt.steps if s.number == js.step
        ]
        assert js.time_us == max(spans) and js.ranks == len(spans)


def test_job_step_names_the_rank_the_others_waited_for(nccl_job):
    late = {js.step: (js.late_rank, js.late_rank_caused_wait_us) for js in nccl_job.job_steps}
    for step in (2, 3):
        rank, caused_us = late[step]
        assert rank == 3 and caused_us >= LATE_US
    # Step 4's lateness is a rank without a trace: never pinned on a present rank.
    assert late[4] == (None, 0.0)
    assert late[1] == (None, 0.0)


def test_gloo_job_step_names_the_late_rank_though_every_rank_spans_the_wait(gloo_job):
    _folder, job = gloo_job
    assert [js.late_rank for js in job.job_steps] == [GLOO_LATE] * GLOO_STEPS


def _wait_id(job: R.JobAnalysis, rank: int, step: int) -> str:
    return next(w.id for w in job.ranks[rank].waits if w.step == step and w.is_sync)


def test_what_if_hook_costs_replayed_figures_capped_by_the_lateness(nccl_job):
    c = _collective(nccl_job, "0", 2)
    index = c.arrival_of(3).collective_index  # rank 3's own number for that collective
    sync = _wait_id(nccl_job, 3, 2)
    (partial,) = R.site_job_costs(nccl_job, R.what_ifs_for_rank(3, {sync: {index: 1000.0}}))
    assert not partial.bound
    assert partial.job_saving_us == pytest.approx(1000.0)
    assert partial.caused_wait_us == pytest.approx(1000.0 * (len(c.arrivals) - 1))
    assert partial.steps == [2] and partial.line == ITEM_LINE
    (capped,) = R.site_job_costs(nccl_job, [R.WhatIf(3, sync, index, 50_000.0)])
    assert capped.job_saving_us == pytest.approx(c.lateness_us)
    # A rank that was not the last one saves the job nothing by arriving earlier.
    other = _wait_id(nccl_job, 0, 2)
    other_index = c.arrival_of(0).collective_index
    (nothing,) = R.site_job_costs(nccl_job, [R.WhatIf(0, other, other_index, 1000.0)])
    assert nothing.job_saving_us == 0.0 and nothing.caused_wait_us == 0.0
    # A collective the job stage did not match (or an unknown wait) costs nothing.
    assert (
        R.site_job_costs(
            nccl_job,
            [R.WhatIf(3, sync, 10_000, 1000.0), R.WhatIf(3, "no-such-sync", index, 1000.0)],
        )
        == []
    )


def test_late_arrivals_leave_what_host_waits_do_not_explain_labelled(nccl_job):
    unexplained = R.late_arrivals(nccl_job, [])
    assert [(a.rank, a.step) for a in unexplained] == [(3, 2), (3, 3)]
    assert all(a.explained_us == 0 and "not explained" in a.label for a in unexplained)
    explained = R.late_arrivals(nccl_job, R.fallback_what_ifs(nccl_job))
    assert all(a.bound and a.unexplained_us < 1.0 for a in explained)
    assert all(a.label == "explained by the host waits listed (upper bounds)" for a in explained)


def test_job_analysis_is_picklable(nccl_job):
    again = pickle.loads(pickle.dumps(nccl_job))
    assert again.collectives == nccl_job.collectives and again.clocks == nccl_job.clocks


# -- clocks, grouping and refusals ------------------------------------------------------------


def test_ranks_without_host_name_are_each_aligned_on_the_collectives(tmp_path):
    spec = JobSpec(host_names=False, steps=3, host_skew_us=(0.0, -1800.0))
    job = only_job(rank_traces(write_job(tmp_path, spec).values()))
    offsets = {c.ranks[0]: c.offset_us for c in job.clocks}
    assert len(job.clocks) == 8
    for r, offset in offsets.items():
        assert offset == pytest.approx(0.0 if r < 4 else -1800.0, abs=5.0)
    assert all(c.last_rank is None for c in job.collectives)


def test_late_rank_in_the_first_step_is_labelled_carried_in(tmp_path):
    spec = JobSpec(world=4, subgroups=False, steps=2, host_skew_us=(0.0,), late={(2, 1): 2000.0})
    job = only_job(rank_traces(write_job(tmp_path, spec).values()))
    first = job.collectives[0]
    assert first.last_rank == 2 and first.carried_in
    row = next(r for r in job.rank_steps if (r.rank, r.step) == (2, 1))
    assert row.carried_in_us == pytest.approx(first.lateness_us)


def test_duplicated_rank_is_named_and_left_out_not_merged(tmp_path):
    spec = JobSpec(world=4, subgroups=False, steps=2, host_skew_us=(0.0,))
    paths = write_job(tmp_path, spec)
    twin = tmp_path / "rank2_again.pt.trace.json"
    shutil.copy(paths[2], twin)
    traces = rank_traces(list(paths.values()) + [twin])
    job = only_job(traces)
    (dup,) = codes(job)[R.DUPLICATE_RANK]
    assert dup.ranks == [2] and sorted(dup.paths) == sorted([str(paths[2]), str(twin)])
    assert job.job.missing == [2] and 2 not in job.ranks


def test_traces_of_another_window_form_another_job(tmp_path):
    spec = JobSpec(world=4, subgroups=False, steps=2, host_skew_us=(0.0,))
    first = write_job(tmp_path / "a", spec)
    later = write_job(
        tmp_path / "b", JobSpec(world=4, subgroups=False, steps=2, host_skew_us=(60e6,))
    )
    run = R.analyze_ranks(rank_traces(list(first.values()) + list(later.values())))
    assert len(run.jobs) == 2
    for job in run.jobs:
        assert sorted(job.ranks) == [0, 1, 2, 3] and job.job.missing == []
        assert R.OTHER_JOB in codes(job)


def test_trace_whose_process_groups_disagree_is_another_job(tmp_path):
    spec = JobSpec(world=4, subgroups=False, steps=2, host_skew_us=(0.0,))
    paths = write_job(tmp_path, spec)
    doc = json.loads(paths[3].read_text())
    doc["distributedInfo"]["pg_config"][0]["ranks"] = [0, 3]
    paths[3].write_text(json.dumps(doc))
    run = R.analyze_ranks(rank_traces(paths.values()))
    assert sorted(len(j.ranks) for j in run.jobs) == [1, 3]
    lone = next(j for j in run.jobs if len(j.ranks) == 1)
    assert 3 in lone.ranks and R.OTHER_JOB in codes(lone)


def test_trace_without_distributed_info_is_left_to_single_trace_analysis(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel()
    doc = b.to_dict()
    del doc["distributedInfo"]
    path = tmp_path / "alone.pt.trace.json"
    path.write_text(json.dumps(doc))
    run = R.analyze_ranks(rank_traces([path]))
    assert run.jobs == [] and [i.code for i in run.issues] == [R.NO_DISTRIBUTED_INFO]


def test_different_collective_sequences_are_refused_with_the_first_difference(tmp_path):
    traces = []
    for rank in (0, 1):
        b = KinetoTraceBuilder(start_us=4_000_000_000, pid=10 + rank, tid=10 + rank)
        b.set_distributed(rank, 2, pg_config=[KinetoTraceBuilder.pg_entry("0", [0, 1])])
        b.set_clock(base_time_ns=1_788_480_000_000_000_000, host_name="n")
        with b.step(1):
            b.nccl_collective("allreduce", pg_ranks=[0, 1])
            b.nccl_collective("broadcast" if rank == 1 else "allreduce", pg_ranks=[0, 1])
        traces.append(b.write(tmp_path / f"rank{rank}.pt.trace.json"))
    job = only_job(rank_traces(traces))
    (refusal,) = codes(job)[R.SEQUENCE_MISMATCH]
    assert "collective #1" in refusal.message and "rank 1 has broadcast" in refusal.message
    assert job.groups[0].status == "refused" and job.collectives == []
    assert R.job_causes(job) == []


def test_real_pair_of_2_of_128_ranks_with_differing_sequences_is_refused(tmp_path):
    job = only_job(rank_traces(hta_trace_filter_pair(tmp_path)))
    issues = codes(job)
    assert issues[R.MISSING_RANKS][0].ranks == list(range(2, 128))
    (refusal,) = issues[R.SEQUENCE_MISMATCH]
    assert "collective #" in refusal.message and refusal.ranks == [0, 1]
    assert [g.status for g in job.groups] == ["refused"] and job.collectives == []


def test_real_single_rank_of_a_job_loads_as_an_incomplete_job(real_traces_dir):
    path = real_traces_dir / "a100_nccl_event_sync.pt.trace.json.gz"
    job = only_job(rank_traces([path]))
    assert sorted(job.ranks) == [0] and job.job.missing == [1]
    assert [g.status for g in job.groups] == ["skipped"] and job.collectives == []
    assert R.job_causes(job) == []


def test_2023_job_is_matched_by_process_group_id_and_input_dims(tmp_path):
    spec = JobSpec(
        world=4, subgroups=False, steps=3, legacy=True, host_skew_us=(0.0,), late={(2, 2): 2000.0}
    )
    job = only_job(rank_traces(write_job(tmp_path, spec).values(), tmp_path))
    (group,) = job.groups
    assert group.group == "0" and group.status == "matched" and group.matched == 6
    c = _collective(job, "0", 2)
    assert c.last_rank == 2 and within(c.lateness_us, 2000.0) and c.in_nelems == 1 << 22
    (cause,) = R.job_causes(job)
    assert (cause.rank, cause.line) == (2, ITEM_LINE)


def test_fallback_interval_starts_at_the_previous_collectives_exit(nccl_job):
    # A sync that ended before the late rank left its previous collective did not make it
    # late: the late rank's syncs of other steps are not contributors.
    for what_if in R.fallback_what_ifs(nccl_job):
        wait = next(w for w in nccl_job.ranks[what_if.rank].waits if w.id == what_if.wait_id)
        c = next(
            c
            for c in nccl_job.collectives
            if any(
                (a.rank, a.collective_index) == (what_if.rank, what_if.collective_index)
                for a in c.arrivals
            )
        )
        assert wait.step == c.step


def test_arrivals_of_different_kinds_never_name_a_late_rank(tmp_path):
    # Rank 1's kernel is missing (a CPU-only profile of that rank): its host enqueue is not
    # comparable with rank 0's kernel start, so nobody is called late.
    traces = []
    for rank in (0, 1):
        b = KinetoTraceBuilder(start_us=4_000_000_000, pid=10 + rank, tid=10 + rank)
        b.set_distributed(rank, 2, pg_config=[KinetoTraceBuilder.pg_entry("0", [0, 1])])
        b.set_clock(base_time_ns=1_788_480_000_000_000_000, host_name="n")
        with b.step(1):
            b.advance(5000 if rank == 1 else 0)
            b.nccl_collective("allreduce", pg_ranks=[0, 1], kernel_dur=6000 - 5000 * rank)
        doc = b.to_dict()
        if rank == 1:
            doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]
        path = tmp_path / f"rank{rank}.pt.trace.json"
        path.write_text(json.dumps(doc))
        traces.append(path)
    job = only_job(rank_traces(traces))
    (c,) = job.collectives
    assert {a.source for a in c.arrivals} == {"kernel", "enqueue"}
    assert c.mixed_sources and c.last_rank is None and R.job_causes(job) == []


def _conflict(a, b) -> bool:
    """Whether ``b`` gives a process group of ``a`` other ranks (the check made pairwise
    before)."""
    mine = {g.name: g.ranks for g in a.dist.groups if g.ranks is not None}
    return any(
        g.ranks is not None and g.name in mine and mine[g.name] != g.ranks for g in b.dist.groups
    )


def _reference_parts(cluster):
    """How traces of one time cluster were split before: each joins the first part none of
    whose traces conflicts with it (a check against every trace placed: cubic)."""
    parts = []
    for t in sorted(cluster, key=lambda t: (t.rank, t.path)):
        for part in parts:
            if not any(_conflict(t, other) for other in part):
                part.append(t)
                break
        else:
            parts.append([t])
    return [[t.path for t in part] for part in parts]


@pytest.mark.parametrize("seed", range(30))
def test_traces_split_into_the_same_jobs_as_by_checking_every_pair(seed):
    import random

    from tb_syncfinder.models import DistributedInfo, ProcessGroupInfo

    rng = random.Random(seed)
    world = 8
    traces = []
    for n in range(rng.randint(1, 24)):
        groups = []
        for name in rng.sample("0123", rng.randint(0, 4)):
            ranks = tuple(sorted(rng.sample(range(world), rng.choice((2, 4)))))
            groups.append(ProcessGroupInfo(name, ranks if rng.random() < 0.9 else None))
        if groups and rng.random() < 0.2:  # a name twice in one trace
            groups.append(ProcessGroupInfo(groups[0].name, (0, 1)))
        dist = DistributedInfo(n % world, world, "nccl", tuple(groups))
        traces.append(RankTrace(f"r{n}.json", "w", dist, 10**15, "h", (0.0, 1000.0)))
    assert [[t.path for t in part] for part in R._parts(traces)] == _reference_parts(traces)


def test_a_rank_whose_trace_cannot_be_read_is_said_to_be_maybe_among_the_unreadable(
    gloo_job, tmp_path
):
    """'1 of 3 ranks have no trace: 1' beside a rank1.pt.trace.json that was cut short: the
    job now says a trace of the run could not be read, why, and that it may be the rank's."""
    from tb_syncfinder import analyze

    folder, _job = gloo_job
    run = tmp_path / "run"
    run.mkdir()
    for path in sorted(folder.glob("rank*.pt.trace.json")):
        text = path.read_text(encoding="utf-8")
        if path.name == f"rank{GLOO_LATE}.pt.trace.json":
            text = text[: len(text) // 2]
        (run / path.name).write_text(text, encoding="utf-8")
    job = analyze(run, source_roots=[str(folder)]).job
    assert job is not None and job["missing_ranks"] == [GLOO_LATE]
    (issue,) = [i for i in job["issues"] if i["code"] == R.UNREADABLE_TRACES]
    assert issue["ranks"] == [GLOO_LATE]
    assert issue["paths"] == [str(run / f"rank{GLOO_LATE}.pt.trace.json")]
    assert f"rank{GLOO_LATE}.pt.trace.json: truncated JSON" in issue["message"]
    assert f"the trace of rank {GLOO_LATE} may be among them" in issue["message"]
