"""torch_npu's ``trace_view.json`` as it writes it (MindStudio Insight's published level-0 and
level-2 recordings of an ImageNet script were the model): the operators in a "Python"
process, the AscendCL calls in a "CANN" process of their own on the tid of the host thread
that made them, the NPU's tasks in "Ascend Hardware", times as strings. Worker folders may
lack the timestamp (``rank0_ascend_pt``).

Before: every sync of a real recording read "(no operator)", "explicit_sync", "Drop debugging
synchronizes" (the calls sat on a thread of their own); a recording at torch_npu's default
level (no AscendCL call) read as a CPU-only trace; ``rank0_ascend_pt`` was not found."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tb_syncfinder import analyze
from tb_syncfinder.catalogue import NPU_TASKS_NOT_LINKED
from tb_syncfinder.cli import main

PYTHON_PID, CANN_PID, HARDWARE_PID = 3178231, 3254508768, 3254508960
TID = PYTHON_PID
T0 = 1_736_412_474_712_651.5


def _x(name: str, pid: int, ts: float, dur: float, **extra: Any) -> dict[str, Any]:
    event = {"ph": "X", "name": name, "pid": pid, "tid": extra.pop("tid", TID)}
    event.update(ts=f"{ts:.3f}", dur=dur, **extra)
    return event


def _meta(pid: int, name: str, labels: str | None = None) -> list[dict[str, Any]]:
    events = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}]
    if labels:
        events.append(
            {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": labels}}
        )
    return events


def torch_npu_trace(
    level: int,
    steps: int = 2,
    upload: bool = False,
    tasks: bool = True,
    copy_direction: str | None = None,
) -> list[dict[str, Any]]:
    """Two steps, each printing a loss (``aten::item``); at level 1 and up the AscendCL
    calls, and the profiler's own ``aclrtSynchronizeDevice`` as it stops. ``upload``: each
    step starts with a batch's ``.to(device)``, whose stream sync is all the host side
    shows of it. ``tasks``: the NPU's tasks ("Ascend Hardware" rows: a kernel per step, and
    a stream's wait for an event, which is no work of the device's); without them the NPU's
    idle time is not in the trace. ``copy_direction``: the upload's copy task on the NPU,
    with its "memcpy direction" ("host to device", "device to host")."""
    stack = {"Call stack": "/home/u/main.py(483): __str__;\r\n/home/u/main.py(375): train"}
    events = [
        *_meta(PYTHON_PID, "Python", "CPU"),
        # At level 0 torch_npu names no "CANN" process (MindStudio's level-0 recording).
        *(_meta(CANN_PID, "CANN") if level >= 1 else []),
        *_meta(HARDWARE_PID, "Ascend Hardware", "NPU"),
    ]
    ts = T0
    for step in range(1, steps + 1):
        events.append(_x(f"ProfilerStep#{step}", PYTHON_PID, ts, 1000.0, cat="cpu_op"))
        if upload:
            upload_stack = {"Call stack": "/home/u/main.py(375): train"}
            events.append(_x("aten::to", PYTHON_PID, ts + 1, 3.5, cat="cpu_op", args=upload_stack))
            events.append(_x("aten::copy_", PYTHON_PID, ts + 1.5, 3.0, cat="cpu_op"))
            if level >= 1:
                events.append(
                    _x("AscendCL@aclrtSynchronizeStreamWithTimeout", CANN_PID, ts + 2, 2.0)
                )
            if copy_direction:
                copy_args = {"Task Type": "PCIE_DMA_SQE", "memcpy direction": copy_direction}
                events.append(
                    _x("MEMCPY_ASYNC", HARDWARE_PID, ts + 2.5, 1.0, tid=2, args=copy_args)
                )
        events.append(_x("aten::mul", PYTHON_PID, ts + 5, 3.0, cat="cpu_op"))
        if tasks:
            events.append(
                _x(
                    "aclnnMul_MulAiCore_Mul",
                    HARDWARE_PID,
                    ts + 8,
                    500.0,
                    tid=2,
                    args={"Task Type": "AI_CORE"},
                )
            )
            events.append(
                _x(
                    "EVENT_WAIT",
                    HARDWARE_PID,
                    ts + 550,
                    400.0,
                    tid=4,
                    args={"Task Type": "EVENT_WAIT_SQE"},
                )
            )
        events.append(_x("aten::item", PYTHON_PID, ts + 10, 600.0, cat="cpu_op", args=stack))
        events.append(_x("aten::_local_scalar_dense", PYTHON_PID, ts + 12, 590.0, cat="cpu_op"))
        if level >= 1:
            events.append(
                _x(
                    "AscendCL@aclrtSynchronizeStreamWithTimeout",
                    CANN_PID,
                    ts + 20,
                    500.0,
                    args={"Thread Id": TID, "Mode": "ACL_RTS", "level": "acl"},
                )
            )
            events.append(_x("AscendCL@aclrtMemcpy", CANN_PID, ts + 530, 20.0))
        ts += 1000.0
    if level >= 1:
        events.append(_x("AscendCL@aclrtSynchronizeDevice", CANN_PID, ts + 2000, 300.0))
    return events


def write_run(
    root: Path,
    level: int,
    worker_dir: str = "rank0_ascend_pt",
    run_name: str = "run",
    upload: bool = False,
    tasks: bool = True,
    copy_direction: str | None = None,
) -> Path:
    trace = root / run_name / worker_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    trace.parent.mkdir(parents=True)
    events = torch_npu_trace(level, upload=upload, tasks=tasks, copy_direction=copy_direction)
    trace.write_text(json.dumps(events))
    return root / run_name


def test_ascendcl_calls_of_the_cann_process_are_syncs_of_the_operators_around_them(
    tmp_path: Path,
) -> None:
    run = write_run(tmp_path, level=2)
    report = analyze(str(run / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"))
    assert report.traces[0].device == "npu" and report.traces[0].has_runtime
    assert len(report.syncs) == 2
    for sync in report.syncs:
        assert sync.kind == "scalar_readback"
        assert sync.op == "aten::item"
        assert [frame.func for frame in sync.stack][:1] == ["__str__"]
    # The profiler's synchronize as it stops: listed apart, not a finding.
    assert report.profiler_overhead.count == 1
    # The NPU's tasks are read: its idle after each sync (to the step's end, 450 us: the
    # stream's wait for an event then is no work of the NPU's), not replayed.
    assert report.summary.gpu_idle_measured is True
    assert report.summary.gpu_idle_us == pytest.approx(900.0)
    assert report.summary.saving_method == "bound"
    assert report.summary.saving_note == NPU_TASKS_NOT_LINKED


def test_a_torch_npu_trace_at_its_default_level_says_its_waits_are_not_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = write_run(tmp_path, level=0)
    assert main(["report", str(run), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (trace,) = report["traces"]
    assert trace["device"] == "npu" and trace["has_runtime"] is False
    assert [site["ops"][0] for site in report["latent_sites"]] == ["aten::item"]
    assert main(["report", str(run)]) == 0
    text = capsys.readouterr().out
    assert "NPU trace without AscendCL calls" in text and "ProfilerLevel.Level1" in text
    assert "CPU-only" not in text and "No host-device synchronizations found" not in text


@pytest.mark.parametrize(
    "worker_dir, worker, span",
    [
        ("rank0_ascend_pt", "rank0", None),
        ("host_123_1736405444130_ascend_pt", "host_123", "1736405444130"),
    ],
)
def test_ascend_worker_folders_are_found_with_or_without_their_timestamp(
    tmp_path: Path, worker_dir: str, worker: str, span: str | None
) -> None:
    from tb_syncfinder.discovery import find_traces

    run = write_run(tmp_path, level=2, worker_dir=worker_dir)
    (ref,) = find_traces(str(run))
    assert (ref.worker, ref.span, ref.run) == (worker, span, "run")


def test_a_run_mixing_levels_lists_the_recorded_syncs_and_says_what_the_other_misses(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """One run profiled again at Level1 beside its default-level recording: the syncs of
    the one, and for the other the level advice, not "CPU-only ... on a GPU"."""
    run = write_run(tmp_path, level=2)
    level0 = torch_npu_trace(level=0)
    trace = run / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(json.dumps(level0))
    assert main(["report", str(run)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Host-device synchronizations by predicted saving" in text
    assert "1 NPU trace of these without AscendCL calls: no wait can be seen in it" in text
    assert "CPU-only" not in text and "on a GPU" not in text


def test_the_plugin_summary_says_an_npu_run_has_runtime_calls(tmp_path: Path) -> None:
    """The dashboard opens a run without device rows read on its latent findings unless the
    summary says it has runtime calls (its syncs are then real ones): a review found the
    Level-2 recording's 3 sites hidden under "Latent sync sites 0"."""
    from types import SimpleNamespace

    from tb_syncfinder.plugin.api import summary_impl

    for level, expected in ((2, True), (0, False)):
        run = write_run(tmp_path / str(level), level=level)
        report = analyze(
            str(run / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
        )
        sel = SimpleNamespace(report_json=report.to_json(), top_kinds=[], loading=False)
        answer = summary_impl(sel)  # type: ignore[arg-type]
        # The NPU's tasks are its activity where calls wait for it (level 1 and up).
        assert answer["has_gpu_activity"] is expected
        assert answer["has_runtime"] is expected


def test_compare_of_a_default_level_baseline_says_its_waits_were_not_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Profiling again at Level1, as the report advises, read as a regression: the upload's
    sync "new", the run called CPU-only."""
    before = write_run(tmp_path, level=0, run_name="level0", upload=True)
    after = write_run(tmp_path, level=2, run_name="level2", upload=True)
    assert main(["compare", str(before), str(after), "--fail-on-regression"]) == 0
    out = capsys.readouterr()
    text = " ".join(out.out.split())
    assert "the baseline is an NPU trace without AscendCL calls" in text
    assert "CPU-only" not in text
    assert "not regressions (and not gated)" in " ".join(out.err.split())


def test_an_npu_runs_idle_and_saving_are_said_not_measured_not_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A trace without the NPU's own tasks (torch_npu's "Ascend Hardware" rows): every output
    said "GPU idle 0 us" and a saving "≤ host wait" called an upper bound, which the idle it
    cannot see can exceed."""
    import csv

    run = write_run(tmp_path, level=2, tasks=False)
    assert main(["report", str(run), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["gpu_idle_measured"] is False
    assert "no upper bound" in report["summary"]["saving_how"]
    assert [s["gpu_idle_measured"] for s in report["sites"]] == [False]
    assert main(["report", str(run)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "NPU idle after not measured" in text and "saving not predicted" in text
    assert "synchronizations by host wait" in text
    assert "step time 1.00 ms mean (the host's: the trace holds no task of the NPU's own)" in text
    assert "≤" not in text and "upper bound:" not in text and "no upper bound" in text
    assert main(["report", str(run), "--format", "csv"]) == 0
    (row,) = csv.DictReader(capsys.readouterr().out.splitlines())
    assert row["gpu_idle_us"] == "" and row["predicted_saving_per_step_us"] == ""
    assert main(["report", str(run), "--format", "sarif"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    message = result["message"]["text"]
    assert "with the NPU" in message and "NPU idle after not measured" in message
    assert "GPU" not in message and result["properties"]["gpuIdleMeasured"] is False


def test_sarif_says_npu_for_a_default_level_trace_and_why_a_bare_call_has_no_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """SARIF called a Level0 trace's latent syncs a GPU's "in a CPU-only trace", and asked
    for with_stack=True for the device synchronize torch_npu records outside any operator
    (it stacks operators only)."""
    assert main(["report", str(write_run(tmp_path, level=0)), "--format", "sarif"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    message = result["message"]["text"]
    assert "with the NPU" in message and "NPU trace without AscendCL calls" in message
    assert "CPU-only" not in message
    events = torch_npu_trace(level=2)
    events.append(_x("AscendCL@aclrtSynchronizeDevice", CANN_PID, T0 + 700, 200.0))
    trace = tmp_path / "bare" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(json.dumps(events))
    assert main(["report", str(tmp_path / "bare"), "--format", "sarif"]) == 0
    results = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    (bare,) = [r for r in results if "aclrtSynchronizeDevice" in r["message"]["text"]]
    assert "operators only" in bare["message"]["text"]
    assert "with_stack=True" not in bare["message"]["text"]


def test_a_default_level_run_shows_no_measured_zeros_in_the_runs_overview(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_run(tmp_path, level=0, run_name="level0")
    write_run(tmp_path, level=2, run_name="level2")
    assert main(["report", str(tmp_path)]) == 0
    rows = {
        ln.split()[0]: ln.split()[1:] for ln in capsys.readouterr().out.splitlines() if ln.strip()
    }
    assert rows["level0"] == ["2", "-", "-", "-", "1.0"]
    assert rows["level2"][1] == "1.0"


def test_a_workers_own_folder_or_its_output_folder_is_read_as_its_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The folder torch_npu names when it is done (``W_ascend_pt``) was "no traces found
    (looked for ... *_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json)": the very file."""
    run = write_run(tmp_path, level=2, worker_dir="host_123_1736405444130_ascend_pt")
    worker = run / "host_123_1736405444130_ascend_pt"
    for given in (worker, worker / "ASCEND_PROFILER_OUTPUT"):
        assert main(["report", str(given), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        (trace,) = report["traces"]
        assert trace["path"].endswith("trace_view.json") and len(report["sites"]) == 1


@pytest.mark.parametrize("layout", ["unparsed", "db", "no_view"])
def test_a_worker_folder_without_a_trace_says_why_and_what_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture, layout: str
) -> None:
    """torch_npu's raw folder (not parsed yet) got "profiler_info.json may be a trace under
    another name"; a database-only export got a bare "no traces found"."""
    worker = tmp_path / "run" / "host_1_20240101_ascend_pt"
    if layout == "unparsed":
        (worker / "FRAMEWORK").mkdir(parents=True)
        (worker / "profiler_info.json").write_text("{}")
    elif layout == "db":
        (worker / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        (worker / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db").write_bytes(b"")
    else:  # parsed, but its parse stopped before the timeline
        (worker / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        (worker / "ASCEND_PROFILER_OUTPUT" / "operator_details.csv").write_text("a,b\n")
    for given in (tmp_path, worker):
        assert main(["report", str(given)]) == 2
        error = " ".join(capsys.readouterr().err.split())
        assert str(worker) in error and "under another name" not in error
        if layout == "unparsed":
            assert f"analyse(profiler_path={str(worker.parent)!r})" in error
        elif layout == "db":
            assert "database only" in error and "export_type text" in error
        else:
            assert "holds no trace_view.json" in error and "logs/" in error

    # In TensorBoard no run of it appears: the logdir's unreadable files say why.
    from tb_syncfinder.plugin.cache import DiskCache
    from tb_syncfinder.plugin.loader import TraceLoader

    cache = DiskCache(str(tmp_path / "cache"))
    loader = TraceLoader([(None, str(tmp_path / "run"))], {}, cache, use_processes=False)
    assert loader.discover() == {}
    (error,) = loader.logdir_errors
    assert error["path"] == str(worker) and error["run"] is None
    expected = {"unparsed": "not parsed yet", "db": "database only", "no_view": "no trace_view"}
    assert expected[layout] in error["reason"]


def test_compare_gives_a_side_without_waits_its_latent_syncs_not_zeros(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """It said "syncs per step 0.0 -> 2.0, share 0% -> 52%": the Level0 baseline measured
    no wait, so its zeros read as a regression from none."""
    base = write_run(tmp_path, level=0, run_name="level0", upload=True)
    new = write_run(tmp_path, level=2, run_name="level2", upload=True)
    main(["compare", str(base), str(new)])
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert "syncs per step 1.0 latent -> 2.0" in lines
    assert "share of step - -> 98%" in lines  # host wait and the NPU idle after it


def test_csv_latent_rows_leave_the_waits_they_did_not_measure_blank(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import csv

    assert main(["report", str(write_run(tmp_path, level=0)), "--format", "csv"]) == 0
    (row,) = csv.DictReader(capsys.readouterr().out.splitlines())
    assert row["latent"] == "1" and row["count"] == "2"
    for column in ("host_wait_us", "mean_host_wait_us", "gpu_idle_us", "share_of_step"):
        assert row[column] == "", column


def test_the_advice_on_an_npu_names_torch_npu_and_the_npu(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """An Ascend user was told to record a ``torch.cuda.Event()`` and that ``.cpu()`` waits
    "for the GPU"; torch_npu has the same calls under ``torch.npu``."""
    events = torch_npu_trace(level=2, upload=True)
    events.append(_x("AscendCL@aclrtSynchronizeDevice", CANN_PID, T0 + 700, 200.0))
    trace = tmp_path / "run" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(json.dumps(events))
    assert main(["report", str(tmp_path / "run"), "--json"]) == 0
    sites = json.loads(capsys.readouterr().out)["sites"]
    words = " ".join(" ".join(str(v) for v in site["advice"].values()) for site in sites)
    assert "torch.npu.synchronize()" in words and "torch.npu.Event()" in words
    assert "torch.cuda" not in words and "GPU" not in words


def test_an_unprofiled_step_time_given_for_a_run_without_waits_says_it_is_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """On a CPU-only trace, or torch_npu's at its default level, --unprofiled-step-ms was
    dropped without a word (the summary that shows it is not printed there)."""
    run = write_run(tmp_path, level=0)
    assert main(["report", str(run), "--unprofiled-step-ms", "12"]) == 0
    assert "--unprofiled-step-ms: no wait was measured" in capsys.readouterr().err
    assert (
        main(
            [
                "report",
                str(write_run(tmp_path, level=2, run_name="l2", tasks=False)),
                "--unprofiled-step-ms",
                "12",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "no wait was measured" not in captured.err
    assert "no device busy time" in " ".join(captured.out.split())
    # With the NPU's tasks its work per step (a 500 us kernel) bounds the step.
    run = write_run(tmp_path, level=2, run_name="l2_tasks")
    assert main(["report", str(run), "--unprofiled-step-ms", "0.9"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "at most 400 us per step (the step minus the NPU's busy time" in text


def test_an_npu_step_time_longer_than_the_profiled_step_is_ruled_out_as_another_programs(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """12 ms given for a 1 ms profiled step: the report said "at most 11.5 ms per step",
    a bound from a step the profiler's overhead cannot have made of this program's (the
    replayed path rules such a step out; the NPU's, not replayed, did not)."""
    run = write_run(tmp_path, level=2, run_name="l2_tasks")
    assert main(["report", str(run), "--unprofiled-step-ms", "12"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "the step time given is longer than the profiled step (1.00 ms" in text
    assert "at most" not in text.split("per step (given)", 1)[1]
    assert main(["report", str(run), "--unprofiled-step-ms", "0.3"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "shorter than the NPU's busy time per step (0.50 ms)" in text
    assert "at most" not in text.split("per step (given)", 1)[1]
    assert main(["report", str(run), "--unprofiled-step-ms", "1.2", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["unprofiled_saving_at_most_per_step_us"] == pytest.approx(700.0)
    # Without step markers no step of it is the one timed; a one-step trace has no median.
    events = [
        e for e in torch_npu_trace(2) if not str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    unmarked = tmp_path / "unmarked.pt.trace.json"
    unmarked.write_text(json.dumps(events))
    assert main(["report", str(unmarked), "--unprofiled-step-ms", "3", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["summary"]["unprofiled_saving_at_most_per_step_us"] is None
    assert "no ProfilerStep markers" in answer["traces"][0]["unprofiled_note"]
    one_step = tmp_path / "one_step.pt.trace.json"
    one_step.write_text(json.dumps(torch_npu_trace(2, steps=1)))
    assert main(["report", str(one_step), "--unprofiled-step-ms", "12"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(1.00 ms, the only step profiled)" in text


def test_compare_of_two_npu_runs_predicts_no_saving(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """compare printed "fixing it saves ≤2 us/step (predicted)" and "every baseline sync:
    ≤522 us" for NPU runs whose idle time is not in the trace."""
    base = write_run(tmp_path, level=2, run_name="base", upload=True, tasks=False)
    new = write_run(tmp_path, level=2, run_name="new", tasks=False)
    main(["compare", str(base), str(new)])
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "≤" not in text and "saving not predicted (no task of the NPU's own in the trace)" in text
    )
    assert "fixing it saves: not predicted" in text


def test_an_npu_run_compared_with_a_gpu_run_is_compared_by_count_not_by_step_time(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The tab said "profiled steps faster by 15.7 ms (-94 %)" in green, and "measured
    15.7 ms" beside the GPU baseline's predicted 3.49 ms, of an NPU run against it."""
    from tb_syncfinder.demo.runner import BUNDLED_TRACES_DIR

    gpu = tmp_path / "gpu"
    gpu.mkdir()
    trace = BUNDLED_TRACES_DIR / "cnn_baseline.pt.trace.json.gz"
    (gpu / trace.name).write_bytes(trace.read_bytes())
    npu = write_run(tmp_path, level=2, run_name="npu")
    main(["compare", str(gpu), str(npu)])
    text = " ".join(capsys.readouterr().out.split())
    assert "one run is on an NPU and the other on a GPU" in text
    assert "saving not measured: an NPU run's step time does not compare with a GPU run's" in text
    assert main(["compare", str(gpu), str(npu), "--json"]) in (0, 1)
    answer = json.loads(capsys.readouterr().out)
    assert answer["note"].startswith("one run is on an NPU") and answer["note_kind"] == "npu_gpu"
    # A run of NPU and CPU-only traces against the GPU run: the same (it was compared by
    # cost, "measured 9.08 ms"); against an NPU run, no GPU on either side: no such note.
    step = _x("ProfilerStep#1", PYTHON_PID, T0, 100.0, cat="cpu_op")
    add = _x("aten::add", PYTHON_PID, T0 + 1, 5.0, cat="cpu_op")
    (npu / "host1.pt.trace.json").write_text(json.dumps({"traceEvents": [step, add]}))
    assert main(["compare", str(gpu), str(npu), "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["note_kind"] == "npu_gpu"
    other = write_run(tmp_path, level=2, run_name="npu_other")
    assert main(["compare", str(other), str(npu), "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["note_kind"] != "npu_gpu"


def test_a_run_mixing_an_npu_trace_with_a_gpu_trace_claims_no_bound_for_their_site(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The NPU trace's host-wait-only figure was summed with the GPU's into an "upper
    bound" marked measured (a trace without the NPU's tasks)."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    run = write_run(tmp_path, level=2, tasks=False)
    b = KinetoTraceBuilder()
    for step in (1, 2):
        with b.step(step):
            item_sync(
                b, stack=[("/home/u/main.py", 375, "train"), ("/home/u/main.py", 483, "__str__")]
            )
    b.write(run / "gpu.pt.trace.json")
    assert main(["report", str(run), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(t["device"] for t in report["traces"]) == ["cuda", "npu"]
    (site,) = report["sites"]  # the same line in both traces: one site
    assert site["count"] == 4 and site["gpu_idle_measured"] is False
    assert report["summary"]["gpu_idle_measured"] is False


def test_the_npus_tasks_give_its_idle_after_each_sync_on_lanes_named_by_its_number(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """torch_npu's "Ascend Hardware" rows were not read: every NPU run's idle after a sync
    was "not measured" and its saving "not predicted". They are the NPU's lanes now, named
    as a user knows the device ("NPU 0 stream 2", not the process id torch_npu files them
    under); a stream's wait for an event is no work of the NPU's. Not replayed: nothing
    links a task to the call that launched it, so the saving is the bound."""
    from tb_syncfinder.reader import read_trace
    from tb_syncfinder.timeline import build_timeline

    run = write_run(tmp_path, level=2)
    trace = run / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    tl = build_timeline(read_trace(str(trace)))
    assert tl.device_kind == "npu" and list(tl.device_activity) == [0]
    assert sorted(tl.lane_label(lane) for lane in tl.lanes) == ["NPU 0 stream 2"]
    assert len(tl.device_activity[0].starts) == 2  # the kernels; not the event waits
    assert main(["report", str(run), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    summary = report["summary"]
    assert summary["gpu_idle_measured"] is True and summary["gpu_idle_us"] == pytest.approx(900)
    assert summary["saving_method"] == "bound" and "NPU bubble" in summary["saving_how"]
    # The bound: each step's host wait (520 us) and the NPU's idle after it (450 us), but
    # no more than the step (1 ms) less the NPU's work in it (a 500 us kernel).
    assert summary["predicted_saving_per_step_us"] == pytest.approx(1000 - 500)
    assert "at most the step less the NPU's work in it" in summary["saving_how"]
    assert summary["device_busy_per_step_us"] == pytest.approx(500)
    assert [site["gpu_idle_measured"] for site in report["sites"]] == [True]
    assert main(["report", str(run)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "wait NPU idle share" in text and "NPU idle after 450 us per step" in text
    assert "GPU" not in text


@pytest.mark.parametrize(
    ("direction", "kind"),
    [("host to device", "blocking_host_to_device"), ("device to host", "device_to_host_copy")],
)
def test_the_npus_copy_task_says_which_way_a_to_went(
    tmp_path: Path, capsys: pytest.CaptureFixture, direction: str, kind: str
) -> None:
    """torch_npu's host side shows a ``.to()`` only as a stream sync inside ``aten::copy_``:
    taken for a copy to the host and said to be a guess, though the NPU's copy task beside
    it says which way it went (the published recording's was a 19 MB upload). Read from
    that task now: an upload is a blocking host-to-device copy, with its fix."""
    run = write_run(tmp_path, level=2, upload=True, copy_direction=direction)
    assert main(["report", str(run), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (copy,) = [site for site in report["sites"] if site["ops"][0] == "aten::to"]
    assert copy["kind"] == kind and copy["copy_direction_guessed"] is False
    # Without the task the guess stays, said.
    run = write_run(tmp_path / "none", level=2, upload=True)
    assert main(["report", str(run), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (copy,) = [site for site in report["sites"] if site["ops"][0] == "aten::to"]
    assert copy["kind"] == "device_to_host_copy" and copy["copy_direction_guessed"] is True


def test_an_npu_trace_read_in_windows_measures_what_it_measures_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Each window is read as a trace of its own: one without AscendCL calls (the last
    steps here) dropped its NPU tasks and the merged trace read "not measured". Whether
    the calls are recorded is the trace's ("CANN" named in every window's metadata)."""
    events = [
        e
        for e in torch_npu_trace(2, steps=6)
        if not (e.get("pid") == CANN_PID and e.get("ph") == "X" and float(e["ts"]) > T0 + 3000)
    ]
    trace = tmp_path / "run" / "w.pt.trace.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(json.dumps(events))
    summaries = []
    for window_mb in ("0", "0.002"):
        assert main(["report", str(trace), "--json", "--window-mb", window_mb]) == 0
        report = json.loads(capsys.readouterr().out)
        summaries.append(report["summary"])
    assert report["traces"][0]["windows"] > 1
    for summary in summaries:
        assert summary["gpu_idle_measured"] is True
    assert summaries[0]["gpu_idle_us"] == summaries[1]["gpu_idle_us"] == pytest.approx(1350)
    assert summaries[0]["predicted_saving_us"] == pytest.approx(summaries[1]["predicted_saving_us"])
    assert "each replayed" not in (summaries[1]["saving_note"] or "")


def test_an_npu_is_named_by_the_number_torch_npu_writes_in_its_processes_ids() -> None:
    """Rank 1 of the published recording ran on NPU 1, yet its lanes read "NPU 0" (the
    first "Ascend Hardware" named) and its syncs were charged to the busiest NPU. torch_npu
    writes a process's id as the host's pid, its sort index and the NPU's number (10, 5
    and 5 bits): the number is read where the sort index checks out, for the tasks' lanes
    and for the NPU an AscendCL call (in "CANN") waited for."""
    from tb_syncfinder.timeline import npu_of_process

    hardware, cann = (3178233 << 10) | (13 << 5) | 1, (3178233 << 10) | (7 << 5) | 1
    assert (hardware, cann) == (3254511009, 3254510817)  # rank 1's, as recorded
    assert npu_of_process({hardware: 13, cann: 7, 3178233: 0, 5: 0}) == {hardware: 1, cann: 1}
    assert npu_of_process({hardware: 12}) == {}  # another writer's id: not read as one


def test_an_npus_syncs_and_lanes_are_of_the_npu_its_processes_name(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The same on a whole trace: rank 1's processes, with their sort indices."""
    hardware, cann = (3178233 << 10) | (13 << 5) | 1, (3178233 << 10) | (7 << 5) | 1
    events = json.loads(
        json.dumps(torch_npu_trace(2))
        .replace(str(HARDWARE_PID), str(hardware))
        .replace(str(CANN_PID), str(cann))
    )
    for pid, index in ((hardware, 13), (cann, 7)):
        events.append(
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": index},
            }
        )
    trace = tmp_path / "run" / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(json.dumps(events))
    report = analyze(str(trace))
    assert {sync.device_id for sync in report.syncs} == {1}
    assert report.summary.gpu_idle_us == pytest.approx(900)


def _with_pids(events: list[dict[str, Any]], pids: dict[int, int]) -> list[dict[str, Any]]:
    text = json.dumps(events)
    for old, new in pids.items():
        text = text.replace(str(old), str(new))
    return json.loads(text)


def _sort_index(pid: int, index: int) -> dict[str, Any]:
    return {
        "ph": "M",
        "name": "process_sort_index",
        "pid": pid,
        "tid": 0,
        "args": {"sort_index": index},
    }


def test_an_npu_waiting_for_its_peers_is_not_idle_but_its_wait_caps_no_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """HCCL's "Notify Wait" (the NPU waiting for another rank) was 95.8 of the 105.6 ms the
    published recording's step was taken to be the NPU's work, and capped its bound at
    43.2 ms: fixing the peers' syncs may shorten such a wait. The NPU is not idle in it
    (as an NCCL kernel waiting is not), but only its own work caps the bound."""
    events = torch_npu_trace(2)
    for step in range(2):
        ts = T0 + 1000.0 * step
        events.append(
            _x(
                "Notify Wait",
                HARDWARE_PID,
                ts + 600,
                390.0,
                tid=4,
                args={"Task Type": "Notify Wait"},
            )
        )
    trace = tmp_path / "run" / "w" / "trace_view.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(json.dumps(events))
    summary = analyze(str(trace)).summary
    assert summary.gpu_idle_us == pytest.approx(2 * 50)  # the sync's end (550) to the wait
    assert summary.device_busy_per_step_us == pytest.approx(500)  # the kernel alone
    # Host wait 520 and idle 50 a step, within the step less the kernel (500).
    assert summary.predicted_saving_per_step_us == pytest.approx(500)


def test_an_npu_trace_without_step_markers_bounds_its_one_step_by_the_npus_work(
    tmp_path: Path,
) -> None:
    """Its one pseudo-step had no figure of the NPU's work: "device busy 0" in the JSON and
    a bound promising a step shorter than the NPU's own kernels."""
    events = [e for e in torch_npu_trace(2) if not str(e.get("name")).startswith("ProfilerStep")]
    trace = tmp_path / "run" / "w" / "trace_view.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(json.dumps(events))
    report = analyze(str(trace))
    assert report.summary.device_busy_per_step_us == pytest.approx(1000)  # two kernels
    span = report.summary.mean_wall_step_time_us or report.summary.mean_step_time_us
    assert report.summary.predicted_saving_per_step_us <= span - 1000 + 1e-6


def test_a_file_merging_two_hosts_npu_0_keeps_the_two_npus_apart(tmp_path: Path) -> None:
    """Ranks 0 and 8 of a 2x8 job both run on their host's NPU 0: read by that number alone
    their tasks were one NPU's, and each sync's idle read on both's work (900 us to 0)."""
    merged = []
    for host in (3178231, 3290000):
        hardware, cann = (host << 10) | (13 << 5), (host << 10) | (7 << 5)
        rank = _with_pids(
            torch_npu_trace(2), {PYTHON_PID: host, HARDWARE_PID: hardware, CANN_PID: cann}
        )
        merged += [*rank, _sort_index(hardware, 13), _sort_index(cann, 7)]
    # The second host's kernels run in the first's idle after its sync (560 to 990 us into
    # each step): on one NPU that idle would read 10 us.
    for e in merged:
        if e.get("name") == "aclnnMul_MulAiCore_Mul" and e["pid"] == (3290000 << 10) | (13 << 5):
            e["ts"], e["dur"] = f"{float(e['ts']) + 552:.3f}", 430.0
    trace = tmp_path / "run" / "w" / "trace_view.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(json.dumps(merged))
    report = analyze(str(trace))
    assert sorted({s.device_id for s in report.syncs}) == [0, 1]
    # Each rank's syncs idle on its own NPU: 450 us a step, and 10 us before its kernel.
    assert report.summary.gpu_idle_us == pytest.approx(2 * 450 + 2 * 10)


def test_the_gate_counts_an_npu_runs_latent_syncs_and_names_each_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """At torch_npu's default level the report said "these operators synchronize on the
    NPU", 1 per step, and ``--max-syncs-per-step 0`` passed it (only a CPU-only trace's
    latent syncs were gated); a job's ranks, each a ``trace_view.json``, read alike."""
    run = write_run(tmp_path, level=0)
    assert main(["report", str(run), "--max-syncs-per-step", "0"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "its latent syncs (operators that synchronize on the NPU, no wait recorded)" in err
    assert "have more than 0 latent syncs (operators that synchronize on the NPU" in err
    assert main(["report", str(run), "--max-syncs-per-step", "0", "--no-latent"]) == 0
    capsys.readouterr()
    job = write_run(tmp_path, level=1, run_name="job")
    (job / "rank1_ascend_pt").mkdir()
    shutil.copytree(job / "rank0_ascend_pt", job / "rank1_ascend_pt", dirs_exist_ok=True)
    assert main(["report", str(job), "--max-syncs-per-step", "0"]) == 1
    err = capsys.readouterr().err
    for rank in ("rank0_ascend_pt", "rank1_ascend_pt"):
        assert f"of {rank}/ASCEND_PROFILER_OUTPUT/trace_view.json" in err, err


def test_an_npu_syncs_own_bound_is_at_most_what_its_step_can_lose(tmp_path: Path) -> None:
    """Each of the four print()s said "saves ≤970 us" in its 1 ms step holding 500 us of
    the NPU's work, beside the site's ≤500 us a step: its wait and bubble, uncapped."""
    run = write_run(tmp_path, level=2)
    report = analyze(str(run / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"))
    items = [s for s in report.syncs if s.op == "aten::item"]
    assert items and all(s.saving_method == "bound" for s in items)
    assert all(s.host_wait_us + s.gpu_idle_after_us > 500.0 for s in items)  # uncapped: more
    assert all(s.predicted_saving_us <= 500.0 for s in items)
    (site,) = [s for s in report.sites if s.key.endswith("aten::item")]
    assert sum(s.predicted_saving_us for s in items) == pytest.approx(site.predicted_saving_us)
