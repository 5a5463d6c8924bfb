"""The tab's saving without the profiler: the ``unprofiled`` route takes the step time a user
measured without the profiler and answers what the CLI's ``report --unprofiled-step-ms``
says for it (the selection's replayed traces analysed again with it in the plugin's
analysis processes), kept per step time, with every bad request a 400 naming its reason.

The traces are the real H100 recordings bundled with the package (cnn, with their measured
unprofiled step times) and a CPU-only trace made here by torch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.application import TensorBoardWSGI
from tensorboard.plugins import base_plugin
from test_ascend_layout import torch_npu_trace
from werkzeug.test import Client

from tb_syncfinder.cli import main
from tb_syncfinder.outputs.text import format_us
from tb_syncfinder.plugin import SyncAdvisorPlugin
from tb_syncfinder.plugin import api as api_module
from tb_syncfinder.plugin.loader import analyze_in_worker
from tb_syncfinder.plugin.settings import PluginSettings

# The demo's bundled traces (not through the demo's runner, which needs torch).
BUNDLED_TRACES_DIR = Path(__file__).resolve().parents[1] / "tb_syncfinder" / "demo" / "traces"


PLUGIN = "/data/plugin/sync_advisor/"
TIMED = json.loads((BUNDLED_TRACES_DIR / "unprofiled_step_times.json").read_text("utf-8"))["runs"]
CNN_STEP_MS = round(TIMED["cnn_baseline"]["median_ms"], 2)
CNN = BUNDLED_TRACES_DIR / "cnn_baseline.pt.trace.json.gz"
CNN_FIXED = BUNDLED_TRACES_DIR / "cnn_optimized.pt.trace.json.gz"
NPU_TRACE = "npu0.pt.trace.json"  # torch_npu's, with the NPU's tasks: 1 ms steps, 500 us work


class CountingAnalysis:
    """The loader's analysis, counting the traces it analyses with a step time given."""

    def __init__(self) -> None:
        self.with_step: list[float] = []
        self.lock = threading.Lock()
        self.fail: Exception | None = None  # raised by an analysis with a step time given

    def __call__(self, ref: Any, options: Any) -> Any:
        if options.unprofiled_step_us is not None:
            with self.lock:
                self.with_step.append(options.unprofiled_step_us)
            if self.fail is not None:
                raise self.fail
        return analyze_in_worker(ref, options)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs: the cnn baseline (one trace), its fix (no sync left), two copies of the baseline
    as two workers of one run, and a CPU-only run (torch on this machine)."""
    from cpu_workload import WORKLOAD, profile_workload

    root = tmp_path_factory.mktemp("unprofiled") / "logs"
    for run, traces in (
        ("cnn", {"gpu0": CNN}),
        ("cnn_fixed", {"gpu0": CNN_FIXED}),
        ("two_workers", {"worker_a": CNN, "worker_b": CNN}),
    ):
        (root / run).mkdir(parents=True)
        for worker, trace in traces.items():
            shutil.copy(trace, root / run / f"{worker}.pt.trace.json.gz")
    source = tmp_path_factory.mktemp("cpu_src") / "train.py"
    profile_workload(WORKLOAD, source, root / "cpu" / "host.pt.trace.json")
    (root / "npu").mkdir()
    (root / "npu" / NPU_TRACE).write_text(
        json.dumps({"traceEvents": torch_npu_trace(2, steps=4, upload=True)})
    )
    return root


@pytest.fixture(scope="module")
def counting() -> CountingAnalysis:
    return CountingAnalysis()


@pytest.fixture(scope="module")
def plugin(logdir: Path, counting: CountingAnalysis, tmp_path_factory) -> SyncAdvisorPlugin:
    cache = tmp_path_factory.mktemp("cache")
    settings = PluginSettings(
        logdirs=[(None, str(logdir))],
        source_roots=[str(cache)],  # the demo's sources come from the package itself
        cache_dir=str(cache),
        reload_interval_s=3600,
        use_processes=False,
    )
    context = base_plugin.TBContext(logdir=str(logdir), flags=argparse.Namespace())
    plugin = SyncAdvisorPlugin(context, settings, start=False, analyze_fn=counting)
    plugin.loader.poll()
    assert plugin.loader.wait_idle(120)
    yield plugin
    plugin.loader.stop()


@pytest.fixture(scope="module")
def client(plugin: SyncAdvisorPlugin) -> Client:
    return Client(TensorBoardWSGI([plugin]))


def get(client: Client, route: str, **params: Any) -> tuple[int, Any]:
    response = client.get(PLUGIN + route, query_string=params)
    return response.status_code, json.loads(response.get_data())


def cli_report(trace: Path, tmp_path: Path, step_ms: float, capsys) -> dict:
    (tmp_path / trace.name).write_bytes(trace.read_bytes())
    out = tmp_path / "report.json"
    code = main(
        ["report", str(tmp_path), "--format", "json", "-o", str(out)]
        + ["--unprofiled-step-ms", str(step_ms)]
    )
    capsys.readouterr()
    assert code == 0
    return json.loads(out.read_text())


def test_the_tab_gets_the_clis_saving_without_the_profiler_in_all_and_per_site(
    client: Client, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    status, body = get(client, "unprofiled", run="cnn", step_ms=CNN_STEP_MS)
    assert status == 200, body
    cli = cli_report(CNN, tmp_path, CNN_STEP_MS, capsys)
    every = cli["summary"]["unprofiled_predicted_saving_per_step_us"]
    assert every and every > 0
    assert body["summary"]["unprofiled_predicted_saving_per_step_us"] == pytest.approx(every)
    assert body["summary"]["unprofiled_step_time_us"] == pytest.approx(CNN_STEP_MS * 1000)
    assert body["summary"]["unprofiled_saving_at_most_per_step_us"] == pytest.approx(
        cli["summary"]["unprofiled_saving_at_most_per_step_us"]
    )
    by_key = {site["key"]: site["unprofiled_predicted_saving_per_step_us"] for site in cli["sites"]}
    assert len(by_key) == 3 and all(us is not None for us in by_key.values())
    assert body["sites"] == pytest.approx(by_key)
    # The terminal's "unprofiled" line, word for word.
    assert (
        f"fixing every sync saves ~{format_us(every)} per step without the profiler"
        in (body["text"])
    )
    assert body["traces"][0]["unprofiled_overhead_scale"] > 0
    assert body["traces"][0]["unprofiled_note"] is None


def test_the_runs_own_answers_stay_the_profiled_ones(client: Client) -> None:
    assert get(client, "unprofiled", run="cnn", step_ms=CNN_STEP_MS)[0] == 200
    status, summary = get(client, "summary", run="cnn")
    assert status == 200
    assert summary["summary"]["unprofiled_predicted_saving_per_step_us"] is None
    status, sites = get(client, "sites", run="cnn")
    assert all(s["unprofiled_predicted_saving_per_step_us"] is None for s in sites["items"])


def test_an_answer_is_kept_per_step_time_and_each_step_time_is_replayed_anew(
    client: Client, counting: CountingAnalysis
) -> None:
    before = len(counting.with_step)
    first = get(client, "unprofiled", run="cnn", step_ms="15.5")
    assert first[0] == 200 and len(counting.with_step) == before + 1
    assert get(client, "unprofiled", run="cnn", step_ms="15.5") == first
    assert len(counting.with_step) == before + 1  # the same step time: kept, not replayed
    other = get(client, "unprofiled", run="cnn", step_ms="16")
    assert other[0] == 200 and len(counting.with_step) == before + 2
    assert counting.with_step[-1] == pytest.approx(16000.0)
    # A longer step leaves more of the profiler's overhead in: a different figure.
    assert (
        other[1]["summary"]["unprofiled_predicted_saving_per_step_us"]
        != first[1]["summary"]["unprofiled_predicted_saving_per_step_us"]
    )


def test_a_run_without_syncs_saves_nothing_and_says_why(client: Client) -> None:
    status, body = get(client, "unprofiled", run="cnn_fixed", step_ms="12.04")
    assert status == 200, body
    assert body["summary"]["unprofiled_predicted_saving_per_step_us"] == 0
    assert body["sites"] == {}
    assert "no sync to remove" in body["traces"][0]["unprofiled_note"]


def test_each_worker_of_a_run_is_replayed_and_too_many_are_refused(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, body = get(client, "unprofiled", run="two_workers", step_ms=CNN_STEP_MS)
    assert status == 200, body
    assert len(body["traces"]) == 2
    assert all(t["unprofiled_overhead_scale"] for t in body["traces"])
    monkeypatch.setattr(api_module, "UNPROFILED_MAX_TRACES", 1)
    status, body = get(client, "unprofiled", run="two_workers", step_ms="14.6")
    assert status == 400
    assert "2 traces here, at most 1; pick a worker" in body["error"]
    status, body = get(client, "unprofiled", run="two_workers", worker="worker_a", step_ms="14.6")
    assert status == 200 and len(body["traces"]) == 1


def test_an_npu_run_gets_the_bound_its_tasks_set_as_the_cli_says_without_a_replay(
    client: Client, counting: CountingAnalysis, logdir: Path, capsys: pytest.CaptureFixture
) -> None:
    """NPU runs are not replayed: the form was not offered, and the bound their tasks' work
    sets in a step timed without the profiler came from the CLI only."""
    before = len(counting.with_step)
    status, body = get(client, "unprofiled", run="npu", step_ms="0.9")
    assert status == 200, body
    assert len(counting.with_step) == before  # nothing analysed again
    assert body["summary"]["saving_method"] == "bound"
    assert body["summary"]["unprofiled_saving_at_most_per_step_us"] == pytest.approx(400.0)
    assert body["summary"]["unprofiled_predicted_saving_per_step_us"] is None
    assert body["sites"] and all(us is None for us in body["sites"].values())
    assert main(["report", str(logdir / "npu" / NPU_TRACE), "--unprofiled-step-ms", "0.9"]) == 0
    terminal = " ".join(capsys.readouterr().out.split())
    assert " ".join(body["text"].split()) in terminal
    assert "at most 400 us per step (the step minus the NPU's busy time" in body["text"]
    # A step no profiler overhead makes of a 1 ms one: ruled out, no bound from it.
    status, body = get(client, "unprofiled", run="npu", step_ms="12")
    assert status == 200, body
    assert body["summary"]["unprofiled_saving_at_most_per_step_us"] is None
    assert "longer than the profiled step" in body["text"] and "at most" not in body["text"]


def test_a_cpu_only_run_has_nothing_to_fit_and_says_so(client: Client) -> None:
    status, body = get(client, "unprofiled", run="cpu", step_ms="10")
    assert status == 400
    assert "no trace here was replayed" in body["error"]


@pytest.mark.parametrize(
    ("step_ms", "says"),
    [
        (None, "'step_ms' is required"),
        ("", "'step_ms' is required"),
        ("fast", "must be a number"),
        ("nan", "must be a number"),
        ("inf", "must be a number"),
        ("-3", "must be a number"),
        ("0x10", "must be a number"),
        (".", "must be a number"),
        ("0", "must be in 0.001..3.6e+06"),
        ("4e6", "must be in 0.001..3.6e+06"),
    ],
)
def test_a_step_time_that_is_no_step_time_is_a_400_naming_it(
    client: Client, step_ms: str | None, says: str
) -> None:
    params = {"run": "cnn"} if step_ms is None else {"run": "cnn", "step_ms": step_ms}
    status, body = get(client, "unprofiled", **params)
    assert status == 400 and says in body["error"], body


def test_a_step_time_written_to_many_places_is_taken(client: Client) -> None:
    # What a user pastes from a timing loop: all its digits.
    status, body = get(client, "unprofiled", run="cnn", step_ms="14.510858859999871")
    assert status == 200, body


def test_an_unknown_run_or_worker_is_a_404(client: Client) -> None:
    assert get(client, "unprofiled", run="nope", step_ms="3")[0] == 404
    assert get(client, "unprofiled", run="cnn", worker="nope", step_ms="3")[0] == 404


def test_a_failed_replay_is_a_503_naming_the_trace_and_is_tried_again_when_asked_again(
    client: Client, counting: CountingAnalysis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(counting, "fail", OSError("disk gone"))
    status, body = get(client, "unprofiled", run="cnn", step_ms="13.25")
    assert status == 503, body
    assert body["error"] == (
        "not analysed again with this step time: gpu0.pt.trace.json.gz: analysis failed: disk gone"
    )
    # Not kept: asked again once the cause is gone, it is replayed and answered.
    monkeypatch.setattr(counting, "fail", None)
    before = len(counting.with_step)
    status, body = get(client, "unprofiled", run="cnn", step_ms="13.25")
    assert status == 200, body
    assert len(counting.with_step) == before + 1
    assert body["summary"]["unprofiled_predicted_saving_per_step_us"] > 0


def test_one_workers_failed_replay_gives_no_figure_for_the_others_alone(
    client: Client, counting: CountingAnalysis, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}
    real = CountingAnalysis.__call__

    def second_fails(self: CountingAnalysis, ref: Any, options: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise MemoryError("out of memory")
        return real(self, ref, options)

    monkeypatch.setattr(CountingAnalysis, "__call__", second_fails)
    status, body = get(client, "unprofiled", run="two_workers", step_ms="14.7")
    assert status == 503 and "out of memory" in body["error"], body


def test_a_trace_replaced_since_its_analysis_is_a_409_not_a_replay_of_another_file(
    client: Client, logdir: Path, counting: CountingAnalysis
) -> None:
    import os

    path = logdir / "cnn" / "gpu0.pt.trace.json.gz"
    stat = path.stat()
    before = len(counting.with_step)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    try:
        status, body = get(client, "unprofiled", run="cnn", step_ms="14.25")
    finally:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert status == 409 and "changed since it was analysed" in body["error"], body
    assert len(counting.with_step) == before


def test_requests_at_once_for_one_step_time_replay_it_once(
    client: Client, counting: CountingAnalysis
) -> None:
    before = len(counting.with_step)
    answers: list[tuple[int, Any]] = []
    threads = [
        threading.Thread(
            target=lambda: answers.append(get(client, "unprofiled", run="cnn", step_ms="14.125"))
        )
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [status for status, _ in answers] == [200] * 4
    assert all(body == answers[0][1] for _, body in answers)
    assert len(counting.with_step) == before + 1


def test_replays_not_over_by_the_deadline_are_a_503_at_the_deadline_not_one_per_trace(
    client: Client, counting: CountingAnalysis, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from tb_syncfinder.plugin import loader as loader_module

    real = CountingAnalysis.__call__

    def slow(self: CountingAnalysis, ref: Any, options: Any) -> Any:
        time.sleep(1.5)
        return real(self, ref, options)

    monkeypatch.setattr(CountingAnalysis, "__call__", slow)
    monkeypatch.setattr(loader_module, "AGAIN_TIMEOUT_S", 1.0)
    started = time.monotonic()
    status, body = get(client, "unprofiled", run="two_workers", step_ms="14.3")
    waited = time.monotonic() - started
    assert status == 503 and "not analysed in 1 s" in body["error"], body
    assert waited < 1.4, waited  # one deadline for both traces, not one each
    time.sleep(2)  # the analysis that was running ends before the next test


def _slow(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    import time

    real = CountingAnalysis.__call__

    def slow(self: CountingAnalysis, ref: Any, options: Any) -> Any:
        if options.unprofiled_step_us is not None:
            time.sleep(seconds)
        return real(self, ref, options)

    monkeypatch.setattr(CountingAnalysis, "__call__", slow)


def test_a_replay_past_the_deadline_keeps_its_place_in_the_pool_until_it_ends(
    plugin: SyncAdvisorPlugin, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from tb_syncfinder.plugin import loader as loader_module

    _slow(monkeypatch, 1.5)
    monkeypatch.setattr(loader_module, "AGAIN_TIMEOUT_S", 0.5)
    status, body = get(client, "unprofiled", run="cnn", step_ms="14.05")
    assert status == 503 and "not analysed in 0 s" in body["error"], body
    # Still running: its process is not free for the queue, nor for the next prediction.
    assert len(plugin.loader._in_pool) == 1
    time.sleep(1.6)
    assert plugin.loader._in_pool == []


def test_predictions_for_two_step_times_run_beside_each_other(
    plugin: SyncAdvisorPlugin, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    assert plugin.loader.max_workers >= 2
    _slow(monkeypatch, 1.0)
    answers: list[tuple[int, Any]] = []
    threads = [
        threading.Thread(
            target=lambda ms=ms: answers.append(get(client, "unprofiled", run="cnn", step_ms=ms))
        )
        for ms in ("14.01", "14.02")
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [status for status, _ in answers] == [200, 200]
    assert time.monotonic() - started < 1.9  # not one after the other
