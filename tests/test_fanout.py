"""The Ray map as a cluster user meets it, without a cluster: a stand-in ``ray`` module runs
each task here, so that what the driver does with the tasks' answers is checked anywhere
(tests/test_ray.py runs a real cluster where Ray is installed). And the summaries' files as
other users and other nodes see them."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder import fanout
from tb_syncfinder.cli import main
from tb_syncfinder.models import TraceInfo, TraceResult
from tb_syncfinder.reader import NO_SUCH_FILE
from tb_syncfinder.summaries import SummaryStore


class _Done:
    """A finished task's object ref (hashable, as Ray's are)."""

    def __init__(self, value: Any = None, error: Exception | None = None) -> None:
        self.value = value
        self.error = error


class _FakeRay:
    """What ``fanout.ray_mapper`` calls of Ray; each task runs when it is submitted."""

    def __init__(self) -> None:
        self.init_calls: list[dict[str, Any]] = []
        self._up = False

    def is_initialized(self) -> bool:
        return self._up

    def init(self, **kwargs: Any) -> None:
        self.init_calls.append(kwargs)
        self._up = True

    def shutdown(self) -> None:
        self._up = False

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def remote(self, **_options: Any) -> Any:
        def wrap(fn: Any) -> Any:
            class _Task:
                @staticmethod
                def remote(*args: Any) -> Any:
                    try:
                        return _Done(fn(*args))
                    except Exception as exc:  # noqa: BLE001 - Ray keeps it for get()
                        return _Done(error=exc)

            return _Task

        return wrap

    def wait(self, pending: list[Any], num_returns: int = 1) -> tuple[list[Any], list[Any]]:
        return pending[:num_returns], pending[num_returns:]

    def get(self, object_ref: Any) -> Any:
        if object_ref.error is not None:
            raise object_ref.error
        return object_ref.value


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> _FakeRay:
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # These traces are tiny: a cluster, not the local path, even so.
    monkeypatch.setattr(fanout, "LOCAL_CLUSTER_MIN_JSON_BYTES", 0)
    return fake


def _logdir(tmp_path: Path, traces: int = 2) -> Path:
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b)
    for rank in range(traces):
        b.write(tmp_path / "logs" / "run" / f"rank{rank}.pt.trace.json")
    return tmp_path / "logs"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


def test_ray_address_in_the_environment_is_joined_as_every_ray_program_does(
    fake_ray: _FakeRay,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    assert main(["report", str(_logdir(tmp_path)), "--ray", "--format", "json"]) == 0
    assert [call["address"] for call in fake_ray.init_calls] == ["auto"]
    assert "Ray: auto ready" in capsys.readouterr().err


def test_ray_without_an_address_starts_a_cluster_of_its_own(
    fake_ray: _FakeRay, tmp_path: Path
) -> None:
    assert main(["report", str(_logdir(tmp_path)), "--ray", "--format", "json"]) == 0
    assert [call["address"] for call in fake_ray.init_calls] == ["local"]


def test_an_address_nothing_answers_at_fails_at_once_naming_it(
    fake_ray: _FakeRay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _closed_port()
    started = time.monotonic()
    code = main(["report", str(_logdir(tmp_path)), "--ray-address", f"127.0.0.1:{port}"])
    assert code == 2
    assert time.monotonic() - started < fanout.CONNECT_CHECK_S + 5  # Ray took 821 s
    err = capsys.readouterr().err
    assert f"error: cannot join the Ray cluster at 127.0.0.1:{port}: nothing answers at" in err
    assert "cannot start or join" not in err  # said once, not wrapped again
    assert "ray status" in err
    assert fake_ray.init_calls == []  # Ray never asked


def test_an_address_ray_looks_up_itself_is_not_checked() -> None:
    fanout._check_reachable("auto")  # Ray's own look-up answers at once
    fanout._check_reachable("local")
    with pytest.raises(fanout.FanoutError, match="ray://127.0.0.1"):
        fanout._check_reachable(f"ray://127.0.0.1:{_closed_port()}")


def test_a_trace_a_node_cannot_see_though_this_machine_has_it_is_said_so(
    tmp_path: Path,
) -> None:
    here = tmp_path / "rank0.pt.trace.json"
    here.write_text("[]")
    seen = fanout._seen_here_not_there(
        TraceResult(TraceInfo(str(here), "", None, error=NO_SUCH_FILE))
    )
    assert seen.info.error.startswith(f"{NO_SUCH_FILE} on the Ray node that read it")
    assert "shared filesystem" in seen.info.error
    gone = str(tmp_path / "gone.pt.trace.json")
    missing = fanout._seen_here_not_there(
        TraceResult(TraceInfo(gone, "", None, error=NO_SUCH_FILE))
    )
    assert missing.info.error == NO_SUCH_FILE  # missing everywhere: nothing to add


def test_why_a_task_could_not_write_a_summary_reaches_the_terminal(
    fake_ray: _FakeRay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "not_a_folder"
    a_file.write_text("")
    logdir = _logdir(tmp_path)
    assert main(["report", str(logdir), "--ray", "--summaries-dir", str(a_file)]) == 0
    err = capsys.readouterr().err
    assert err.count("tb-syncfinder: warning: cannot write summary") == 2
    assert "Not a directory" in err or "File exists" in err
    assert "2 trace summaries could not be written" in err


def test_summaries_are_readable_as_the_traces_beside_them(tmp_path: Path) -> None:
    logdir = _logdir(tmp_path, traces=1)
    old = os.umask(0o022)
    try:
        assert main(["report", str(logdir), "--write-summaries", "--format", "json"]) == 0
    finally:
        os.umask(old)
    (summary,) = logdir.rglob("*.summary")
    assert stat.S_IMODE(summary.stat().st_mode) == 0o644  # was mkstemp's 0600
    assert not list(summary.parent.glob(".tmp-*"))


def test_a_relative_summaries_dir_is_this_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SummaryStore("sums")
    assert store.directory == str(tmp_path / "sums")  # a task on another node: the same
    assert SummaryStore("s3://bucket/sums").directory == "s3://bucket/sums"


def test_too_little_work_for_a_local_cluster_is_read_here_and_said_so(
    fake_ray: _FakeRay,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(fanout, "LOCAL_CLUSTER_MIN_JSON_BYTES", 64 << 20)
    logdir = _logdir(tmp_path)
    assert main(["report", str(logdir), "--ray", "--format", "json", "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert fake_ray.init_calls == []  # no cluster started
    assert "2 traces to analyse, 0 MB of JSON: analysed on this machine" in captured.err
    assert "2 traces: 0 from summaries, 2 analysed on this machine, 0 failed" in captured.err
    assert len(list(logdir.rglob("*.summary"))) == 2  # as a Ray run writes them
    assert json.loads(captured.out)["traces"]


def test_a_crashed_task_is_retried_trace_by_trace_and_fails_only_its_trace(
    fake_ray: _FakeRay,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    logdir = _logdir(tmp_path, traces=3)
    crash = logdir / "run" / "rank1.pt.trace.json"
    analyse = fanout.analyze_trace

    def crashing(ref: Any, *args: Any) -> Any:
        if ref.path == str(crash):
            raise RuntimeError("The worker died (pid 4242, node 10.0.0.7): killed by OOM\nmore")
        return analyse(ref, *args)

    monkeypatch.setattr(fanout, "analyze_trace", crashing)
    out = tmp_path / "r.json"
    assert main(["report", str(logdir), "--ray", "--no-summaries", "-o", str(out)]) == 0
    traces = {t["path"]: t for t in json.loads(out.read_text())["traces"]}
    assert traces[str(crash)]["error"] == (
        "analysis task failed on the cluster: RuntimeError: The worker died (pid 4242, node "
        "10.0.0.7): killed by OOM"
    )
    assert [p for p, t in traces.items() if t["error"]] == [str(crash)]
    err = capsys.readouterr().err
    assert "3 traces: 0 from summaries, 2 analysed on a local Ray cluster" in err
    assert "1 failed" in err


def test_what_ray_prints_on_stdout_goes_to_stderr_not_into_the_report(
    fake_ray: _FakeRay,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    analyse = fanout.analyze_trace

    def noisy(*args: Any) -> Any:
        print("(raylet) A worker died or was killed while executing a task", flush=True)
        os.write(1, b"(raylet) from the C++ side\n")
        return analyse(*args)

    monkeypatch.setattr(fanout, "analyze_trace", noisy)
    assert main(["report", str(_logdir(tmp_path)), "--ray", "--format", "json"]) == 0
    captured = capfd.readouterr()
    assert json.loads(captured.out)["traces"]  # the report alone
    assert captured.err.count("(raylet)") == 4


def test_more_ray_workers_than_cpus_is_said_and_capped(
    fake_ray: _FakeRay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cores = fanout.usable_cpus()
    args = ["report", str(_logdir(tmp_path)), "--ray", "--ray-workers", "100000", "--json"]
    assert main(args) == 0
    assert fake_ray.init_calls[0]["num_cpus"] == cores
    assert f"this machine has {cores} CPUs, all used" in capsys.readouterr().err
