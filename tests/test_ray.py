"""The Ray fan-out (the optional ``ray`` extra): the same report as the local path, a
broken trace named while the others are reported, summaries read back on the next run, and
a running cluster joined by address. Skips when Ray is not installed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder.cli import main

ray = pytest.importorskip("ray")

TRACES_PER_RUN = 100


@pytest.fixture(autouse=True)
def _a_cluster_even_for_little_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """These traces are tiny: --ray would read them here rather than start a cluster."""
    from tb_syncfinder import fanout

    monkeypatch.setattr(fanout, "LOCAL_CLUSTER_MIN_JSON_BYTES", 0)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ray")
    source = root / "src" / "train.py"
    source.parent.mkdir()
    source.write_text("import torch\n\n\ndef train_step(loss):\n    return loss.item()\n")
    b = KinetoTraceBuilder()
    for n in range(1, 3):
        with b.step(n):
            item_sync(b, stack=[(str(source), 4, "train_step")])
    first = b.write(root / "logs" / "run_a" / "rank0.pt.trace.json")
    for run in ("run_a", "run_b"):
        for rank in range(TRACES_PER_RUN):
            target = root / "logs" / run / f"rank{rank}.pt.trace.json"
            if target != first:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(first, target)
    broken = root / "logs" / "run_b" / "rank_broken.pt.trace.json"
    broken.write_text('{"traceEvents": [')
    # Cut short two hours ago: its error says so at every read. A fresh file is "still
    # being written?" for a minute, and the Ray run, started after a cluster, read it past
    # that minute under load while the local run read it within (the reports differed).
    old = time.time() - 7200
    os.utime(broken, (old, old))
    return root


def report(logdir: Path, out: Path, *args: str) -> int:
    return main(
        [
            "report",
            str(logdir / "logs"),
            "--json",
            "-o",
            str(out),
            "--source-root",
            str(logdir / "src"),
            *args,
        ]
    )


def test_ray_report_is_the_local_report_and_names_the_broken_trace(
    logdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert report(logdir, tmp_path / "local.json", "--no-summaries") == 0
    capsys.readouterr()
    assert report(logdir, tmp_path / "ray.json", "--ray", "--ray-workers", "2") == 0
    err = capsys.readouterr().err
    local = json.loads((tmp_path / "local.json").read_text())
    on_ray = json.loads((tmp_path / "ray.json").read_text())
    assert on_ray == local
    assert len(on_ray["traces"]) == 2 * TRACES_PER_RUN + 1
    assert sum(1 for t in on_ray["traces"] if t["error"]) == 1
    assert len(on_ray["syncs"]) == 2 * TRACES_PER_RUN * 2
    assert "rank_broken.pt.trace.json: truncated JSON" in err
    assert f"{2 * TRACES_PER_RUN + 1} traces: 0 from summaries" in err
    summaries = list((logdir / "logs").rglob("*.summary"))
    assert len(summaries) == 2 * TRACES_PER_RUN  # none for the broken trace

    # The second run reads the summaries: only the broken trace is parsed again.
    assert report(logdir, tmp_path / "again.json", "--ray", "--ray-workers", "2") == 0
    err = capsys.readouterr().err
    # (parsed again and failed again: counted as failed, not as analysed)
    done = f"{2 * TRACES_PER_RUN + 1} traces: {2 * TRACES_PER_RUN} from summaries, 0 analysed"
    assert done in err and ", 1 failed, in " in err
    assert json.loads((tmp_path / "again.json").read_text()) == local


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_running_cluster_is_joined_by_its_address_and_left_alone_without_one(
    logdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ray_cli = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    port = _free_port()
    starting = subprocess.Popen(
        [
            ray_cli,
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Its daemons stay in this new process group, and only they are stopped at the end:
        # `ray stop` would stop every Ray cluster of the machine, a user's too.
        start_new_session=True,
    )
    _out, err = starting.communicate(timeout=180)
    assert starting.returncode == 0, err
    try:
        # Without an address, --ray starts a cluster of its own even while another one runs
        # on this machine (ray.init() would join that one and refuse the worker count).
        assert (
            report(logdir, tmp_path / "own.json", "--no-summaries", "--ray", "--ray-workers", "1")
            == 0
        )
        capsys.readouterr()
        assert (
            len(json.loads((tmp_path / "own.json").read_text())["syncs"]) == 2 * TRACES_PER_RUN * 2
        )
        assert (
            report(
                logdir,
                tmp_path / "joined.json",
                "--no-summaries",
                "--ray-address",
                f"127.0.0.1:{port}",
            )
            == 0
        )
        err = capsys.readouterr().err
        assert f"Ray: 127.0.0.1:{port} ready" in err
        data = json.loads((tmp_path / "joined.json").read_text())
        assert len(data["syncs"]) == 2 * TRACES_PER_RUN * 2
    finally:
        _stop_process_group(starting.pid)


def _stop_process_group(group: int) -> None:
    """Stop the daemons of the cluster ``ray start`` started (its process group), no other."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while _running_in_group(group) and time.monotonic() < deadline:
            time.sleep(0.2)


def _running_in_group(group: int) -> bool:
    """Whether a process of ``group`` still runs (a zombie waits for its parent, not us)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def test_without_ray_installed_the_report_says_how_to_get_it(
    logdir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert report(logdir, tmp_path / "x.json", "--ray", "--no-summaries") == 2
    assert "pip install 'ray>=2.10'" in capsys.readouterr().err
