"""What big traces cost TensorBoard beyond their analysis: the memory an analysis process
keeps after one, and the window files of one stopped half-way. Real analysis processes
(tb_syncfinder/plugin/workers.py), tiny jobs: the functions below stand for a big trace's
analysis (a worker imports what it runs by name: this module, from the ``sys.path`` it
gets from its parent).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder.models import TraceRef
from tb_syncfinder.plugin.loader import analyze_in_worker
from tb_syncfinder.plugin.workers import DEFAULT_RECYCLE_ABOVE_BYTES, ProcessPool
from tests.e2e.helpers import checkout_env

TIMEOUT_S = 60
TESTS_DIR = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(os.name != "posix", reason="signals and /proc")

_kept: list[bytes] = []


# ----- what the analysis processes run ------------------------------------------------------
def keep_memory(n_bytes: int) -> int:
    """Hold ``n_bytes`` of touched memory after the job, as Python's allocator keeps a big
    trace's peak; returns the process's pid."""
    _kept.append(b"\x01" * n_bytes)
    return os.getpid()


def keep_memory_and_end_slowly(n_bytes: int, exit_s: float) -> int:
    """``keep_memory``, in a process whose exit then takes ``exit_s`` (as freeing gigabytes
    does)."""
    import atexit

    atexit.register(time.sleep, exit_s)
    return keep_memory(n_bytes)


def clean_up_when_stopped(folder: str, seconds: float) -> None:
    """As the engine's analysis in windows: files in a folder of its own, removed by
    ``except BaseException`` and ``finally`` however the job ends."""
    os.makedirs(folder)
    try:
        Path(folder, "window0.json").write_text("{}")
        # Written whole, then renamed: a test that sees the name reads the whole pid (a
        # file seen between its creation and its write read "", 3 in 1,500 under load).
        Path(folder + ".starting").write_text(str(os.getpid()))
        os.replace(folder + ".starting", folder + ".started")
        time.sleep(seconds)
    except BaseException:
        Path(folder + ".unwound").write_text("except BaseException ran")
        raise
    finally:
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)


# ----- helpers --------------------------------------------------------------------------
def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_for(condition, timeout_s: float = 30) -> bool:  # noqa: ANN001 - a predicate
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def small_trace(path: Path) -> TraceRef:
    b = KinetoTraceBuilder()
    for step in range(1, 4):
        with b.step(step):
            b.kernel("void fwd_kernel<float>()", dur=300)
            item_sync(b)
    b.write(path)
    return TraceRef(str(path), "w0", None, "run")


# ----- memory kept after a big trace ----------------------------------------------------------
def test_a_process_that_grew_much_in_a_job_is_replaced_and_its_memory_goes_back() -> None:
    pool = ProcessPool(1, recycle_above_bytes=32 << 20)
    try:
        first = pool.submit(os.getpid).result(TIMEOUT_S)
        assert pool.submit(keep_memory, 1 << 20).result(TIMEOUT_S) == first  # grew little
        assert pool.submit(keep_memory, 96 << 20).result(TIMEOUT_S) == first
        assert wait_for(lambda: not alive(first)), "the grown process still runs"
        second = pool.submit(os.getpid).result(TIMEOUT_S)
        assert second not in (first, os.getpid())
        assert pool.recycled == 1
    finally:
        pool.shutdown(cancel_futures=True)


def test_the_answer_of_a_job_whose_process_is_replaced_does_not_wait_for_its_exit() -> None:
    """A process replaced for its size holds gigabytes, and ends in 0.1-0.4 s: the job's
    caller is answered first (a review found the answer waiting for the exit)."""
    pool = ProcessPool(1, recycle_above_bytes=32 << 20)
    try:
        first = pool.submit(os.getpid).result(TIMEOUT_S)
        asked = time.monotonic()
        job = pool.submit(keep_memory_and_end_slowly, 96 << 20, 5.0)
        assert job.result(TIMEOUT_S) == first
        assert time.monotonic() - asked < 4.0, "the answer waited for the process's exit"
        assert pool.pids == [] and pool.recycled == 1
        assert wait_for(lambda: not alive(first)), "the grown process still runs"
    finally:
        pool.shutdown(cancel_futures=True)


def test_analysing_small_traces_never_costs_a_new_process(tmp_path: Path) -> None:
    pool = ProcessPool(1)
    assert pool.recycle_above_bytes == DEFAULT_RECYCLE_ABOVE_BYTES
    ref = small_trace(tmp_path / "w0.pt.trace.json")
    try:
        pids = set()
        for _ in range(3):
            result = pool.submit(analyze_in_worker, ref, None).result(TIMEOUT_S)
            assert result.info.error is None and result.syncs
            pids.add(pool.pids[0])
        assert len(pids) == 1 and pool.recycled == 0
    finally:
        pool.shutdown(cancel_futures=True)


# ----- a job stopped half-way cleans up ------------------------------------------------------
def test_a_job_stopped_by_the_pools_shutdown_runs_its_clean_up(tmp_path: Path) -> None:
    folder = tmp_path / "tb-syncfinder-windows-test"
    pool = ProcessPool(1)
    job = pool.submit(clean_up_when_stopped, str(folder), 600)
    assert wait_for(lambda: Path(f"{folder}.started").exists())
    pool.shutdown(wait=True, cancel_futures=True)
    assert job.cancelled() or isinstance(job.exception(TIMEOUT_S), BaseException)
    assert not folder.exists(), "the job's window files were left behind"
    assert Path(f"{folder}.unwound").exists()
    assert pool.pids == []


PARENT = """
import faulthandler, signal, sys, time
faulthandler.register(signal.SIGUSR1, all_threads=True)  # where it hangs, if it does
from tb_syncfinder.plugin.workers import ProcessPool
from test_plugin_big_traces import clean_up_when_stopped
pool = ProcessPool(1)
pool.submit(clean_up_when_stopped, sys.argv[1], 600)
print(*pool.pids, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize(
    "how",
    ["SIGTERM to TensorBoard", "SIGTERM to its process group", "Ctrl-C", "SIGKILL"],
)
def test_a_job_whose_tensorboard_is_stopped_runs_its_clean_up(tmp_path: Path, how: str) -> None:
    """TensorBoard stopped mid-analysis (Ctrl-C, SIGTERM, even SIGKILL): its analysis
    process unwinds its job (the engine's window files, 658-864 MB each, were left in the
    temporary folder) and ends."""
    folder = tmp_path / "tb-syncfinder-windows-test"
    script = tmp_path / "tensorboard_stand_in.py"
    script.write_text(textwrap.dedent(PARENT))
    env = checkout_env()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env["PYTHONPATH"]])
    parent = subprocess.Popen(
        [sys.executable, str(script), str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert wait_for(lambda: Path(f"{folder}.started").exists(), TIMEOUT_S), (
            parent.stderr.read() if parent.poll() is not None else "not started"
        )
        worker = int(Path(f"{folder}.started").read_text())
        assert folder.exists() and worker != parent.pid
        if how == "SIGTERM to TensorBoard":
            parent.send_signal(signal.SIGTERM)
        elif how == "SIGTERM to its process group":
            os.killpg(parent.pid, signal.SIGTERM)
        elif how == "Ctrl-C":
            os.killpg(parent.pid, signal.SIGINT)
        else:
            parent.kill()
        try:
            parent.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            parent.send_signal(signal.SIGUSR1)  # its threads' stacks, to its stderr
            time.sleep(2)
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait(TIMEOUT_S)
            pytest.fail(f"TensorBoard's stand-in did not end ({how}):\n{parent.stderr.read()}")
        assert wait_for(lambda: not alive(worker)), "the analysis process still runs"
        assert not folder.exists(), "the job's window files were left behind"
        assert Path(f"{folder}.unwound").exists()
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(TIMEOUT_S)
        parent.stdout.close()
        parent.stderr.close()
