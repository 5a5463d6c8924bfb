"""The plugin's analysis processes (tb_syncfinder/plugin/workers.py), with real processes.

What they run comes from tests/worker_probes.py: a worker imports what it runs by name.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import worker_probes

from tb_syncfinder.plugin.workers import (
    ProcessPool,
    RemoteTraceback,
    WorkerDied,
    WorkerStartError,
    describe_exit,
)
from tests.e2e.helpers import checkout_env

TIMEOUT_S = 60


@pytest.fixture
def pool() -> Iterator[ProcessPool]:
    pool = ProcessPool(2)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its parent to collect it does not)."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def wait_gone(pids: list[int], timeout_s: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [pid for pid in pids if alive(pid)]
        if not left:
            return []
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


def test_a_job_runs_in_another_process_which_serves_the_next_one(pool: ProcessPool) -> None:
    first = pool.submit(os.getpid).result(TIMEOUT_S)
    assert first != os.getpid()
    assert pool.submit(os.getpid).result(TIMEOUT_S) == first
    assert pool.pids == [first]


def test_a_job_submitted_as_the_last_one_is_told_done_reuses_its_process(
    pool: ProcessPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread that ran a job counts as idle before its caller hears of the job: a
    next job then finds it and its process, and no second process starts beside it (the
    caller woke between the two and started one, 1 in 200 under load; here the wait
    after each answer makes that window 50 ms wide)."""
    settle = concurrent.futures.Future.set_result

    def set_result_then_linger(future: concurrent.futures.Future, result: object) -> None:
        settle(future, result)
        time.sleep(0.05)

    monkeypatch.setattr(concurrent.futures.Future, "set_result", set_result_then_linger)
    pids = {pool.submit(os.getpid).result(TIMEOUT_S) for _ in range(5)}
    assert len(pids) == 1 and pool.pids == sorted(pids)


def test_a_worker_runs_neither_the_parents_main_module_nor_another_path(
    pool: ProcessPool,
) -> None:
    # Under pytest the parent's __main__ is pytest's script: spawn would have run it again.
    assert getattr(sys.modules["__main__"], "__file__", None)
    assert pool.submit(worker_probes.main_module_name).result(TIMEOUT_S) is None
    cwd, path = pool.submit(worker_probes.getcwd_and_path).result(TIMEOUT_S)
    assert cwd == os.getcwd()
    assert path == [p or os.getcwd() for p in sys.path]


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
    reason="counts the process's threads in /proc; one core starts no BLAS threads",
)
def test_a_worker_starts_numpys_blas_with_one_thread_unless_the_user_set_a_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each thread of numpy's OpenBLAS spins at start-up (75 ms of CPU on 2 cores, a
    # second on 17) and the analysis never calls BLAS.
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with ProcessPool(1) as pool:
        probe = worker_probes.blas_threads_setting_and_threads_numpy_starts
        assert pool.submit(probe).result(TIMEOUT_S) == ("1", 0)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    with ProcessPool(1) as pool:
        assert pool.submit(probe).result(TIMEOUT_S) == ("2", 1)


def test_an_exception_comes_back_with_its_type_message_and_traceback(pool: ProcessPool) -> None:
    with pytest.raises(ValueError, match="^bad input$") as caught:
        pool.submit(worker_probes.raise_value_error, "bad input").result(TIMEOUT_S)
    assert isinstance(caught.value.__cause__, RemoteTraceback)
    assert "raise_value_error" in str(caught.value.__cause__)


def test_system_exit_in_a_job_is_that_jobs_error_and_the_worker_stays(
    pool: ProcessPool,
) -> None:
    pid = pool.submit(os.getpid).result(TIMEOUT_S)
    with pytest.raises(RuntimeError, match="SystemExit: 3"):
        pool.submit(worker_probes.exit_process, 3).result(TIMEOUT_S)
    assert pool.submit(os.getpid).result(TIMEOUT_S) == pid


def test_a_result_that_cannot_be_sent_back_is_an_error(pool: ProcessPool) -> None:
    with pytest.raises(RuntimeError, match="could not send its result back"):
        pool.submit(worker_probes.unpicklable_result).result(TIMEOUT_S)
    assert pool.submit(os.getpid).result(TIMEOUT_S) != os.getpid()


def test_a_worker_that_dies_fails_only_its_job_and_is_replaced(pool: ProcessPool) -> None:
    slow = pool.submit(worker_probes.sleep_and_pid, 1.0)
    dying = pool.submit(worker_probes.die)
    with pytest.raises(WorkerDied) as died:
        dying.result(TIMEOUT_S)
    survivor = slow.result(TIMEOUT_S)
    assert died.value.pid != survivor
    expected = "was killed (SIGKILL" if os.name == "posix" else "exited with status 70"
    assert f"(pid {died.value.pid}) {expected}" in str(died.value)
    assert not alive(died.value.pid)
    pids = {pool.submit(worker_probes.sleep_and_pid, 0.3) for _ in range(2)}
    replaced = {future.result(TIMEOUT_S) for future in pids}
    assert survivor in replaced and died.value.pid not in replaced and len(replaced) == 2


def test_at_most_max_workers_processes_run_at_once(pool: ProcessPool) -> None:
    futures = [pool.submit(worker_probes.sleep_and_pid, 0.2) for _ in range(6)]
    pids = {future.result(TIMEOUT_S) for future in futures}
    assert len(pids) == 2 and os.getpid() not in pids
    assert len(pool.pids) == 2


def test_shutdown_with_cancel_stops_running_jobs_and_their_processes() -> None:
    pool = ProcessPool(1)
    pid = pool.submit(os.getpid).result(TIMEOUT_S)
    running = pool.submit(worker_probes.sleep_and_pid, 60)
    queued = pool.submit(os.getpid)
    deadline = time.monotonic() + TIMEOUT_S
    while not running.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    pool.shutdown(wait=True, cancel_futures=True)
    assert time.monotonic() - started < 10
    assert queued.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        running.result(TIMEOUT_S)
    assert wait_gone([pid]) == [] and pool.pids == []
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(os.getpid)


def test_shutdown_without_cancel_lets_submitted_jobs_finish() -> None:
    pool = ProcessPool(1)
    futures = [pool.submit(worker_probes.sleep_and_pid, 0.1) for _ in range(3)]
    pool.shutdown(wait=True)
    pids = {future.result(0) for future in futures}
    assert len(pids) == 1
    assert wait_gone(list(pids)) == []


def test_an_idle_process_is_closed_and_another_started_when_needed() -> None:
    pool = ProcessPool(1, idle_timeout_s=0.2)
    try:
        first = pool.submit(os.getpid).result(TIMEOUT_S)
        assert wait_gone([first]) == []
        assert pool.pids == []
        second = pool.submit(os.getpid).result(TIMEOUT_S)
        assert second not in (first, os.getpid())
    finally:
        pool.shutdown(cancel_futures=True)


def test_an_interpreter_that_cannot_run_is_a_start_error_and_later_jobs_fail_fast(
    tmp_path: Path,
) -> None:
    pool = ProcessPool(1, executable=str(tmp_path / "no-such-python"))
    try:
        with pytest.raises(WorkerStartError, match="cannot run"):
            pool.submit(os.getpid).result(TIMEOUT_S)
        assert not pool.started_any
        with pytest.raises(WorkerStartError, match="cannot run"):
            pool.submit(os.getpid).result(TIMEOUT_S)
    finally:
        pool.shutdown()


def test_a_process_that_exits_or_hangs_before_it_is_ready_is_a_start_error() -> None:
    pool = ProcessPool(1)
    pool.command = [sys.executable, "-c", "raise SystemExit(5)"]
    try:
        with pytest.raises(WorkerStartError, match="exited with status 5 before it was ready"):
            pool.submit(os.getpid).result(TIMEOUT_S)
    finally:
        pool.shutdown()
    pool = ProcessPool(1, start_timeout_s=0.5)
    pool.command = [sys.executable, "-c", "import time; time.sleep(60)"]
    started = time.monotonic()
    try:
        with pytest.raises(WorkerStartError, match=r"was not ready within 0.5 s \(killed\)"):
            pool.submit(os.getpid).result(TIMEOUT_S)
    finally:
        pool.shutdown()
    assert time.monotonic() - started < 30


def test_what_the_interpreter_prints_as_it_starts_does_not_disturb_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sitecustomize (or a .pth hook) that prints on stdout before the worker runs.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nprint('hello from sitecustomize')\nsys.stdout.write('no newline')\n"
    )
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    )
    pool = ProcessPool(1)
    try:
        assert pool.submit(os.getpid).result(TIMEOUT_S) != os.getpid()
        with pytest.raises(ValueError, match="still framed"):
            pool.submit(worker_probes.raise_value_error, "still framed").result(TIMEOUT_S)
    finally:
        pool.shutdown(cancel_futures=True)


def test_no_interpreter_no_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    with pytest.raises(WorkerStartError):
        ProcessPool(1)


@pytest.mark.parametrize(
    "returncode, words",
    [
        (3, "exited with status 3"),
        (-9, "was killed (SIGKILL: out of memory?)"),
        (-11, "crashed (SIGSEGV: a crash in a native library?)"),
        (-15, "was stopped by SIGTERM"),
        (0xC0000005, "crashed (exit status 0xc0000005)"),
        (None, "stopped answering"),
    ],
)
def test_how_a_process_ended_in_words(returncode: int | None, words: str) -> None:
    if os.name != "posix" and returncode is not None and returncode < 0:
        pytest.skip("POSIX signal numbers")
    assert describe_exit(returncode) == words


def test_workers_exit_when_their_parent_dies_however_it_dies(tmp_path: Path) -> None:
    """The parent is killed outright (no shutdown, no atexit): its workers see their stdin
    close and exit, also one in the middle of a job."""
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, signal, sys, time
            import worker_probes
            from tb_syncfinder.plugin.workers import ProcessPool
            pool = ProcessPool(2)
            idle = pool.submit(worker_probes.sleep_and_pid, 0.2)
            busy = pool.submit(worker_probes.sleep_and_pid, 600)
            idle.result(60)
            while len(pool.pids) < 2:
                time.sleep(0.01)
            time.sleep(1)  # one is idle, the other in its job
            print(*pool.pids, flush=True)
            os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
            """
        )
    )
    env = checkout_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env["PYTHONPATH"]])
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) == 2, done.stderr
    assert wait_gone(pids) == []
