"""Functions the plugin's analysis processes run in tests.

A worker process imports what it runs by name (it never imports the test's ``__main__``):
these live in a module of their own, which the worker finds on the ``sys.path`` it gets
from its parent (tests/ is on it under pytest, and on the PYTHONPATH of the scripts the
tests run).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

PIDS_ENV = "SYNC_ADVISOR_TEST_PIDS"  # a file: each analysis appends its process's pid
PROTECTED_ENV = "SYNC_ADVISOR_TEST_PROTECTED_PID"  # a process analyse_or_die never kills


def record_pid() -> int:
    path = os.environ.get(PIDS_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")
    return os.getpid()


def analyze_recording_pid(ref: Any, options: Any) -> Any:
    """The plugin's analysis, noting which process ran it."""
    from tb_syncfinder.plugin.loader import analyze_in_worker

    record_pid()
    return analyze_in_worker(ref, options)


def analyze_or_die(ref: Any, options: Any) -> Any:
    """As analyze_recording_pid, but a trace whose file name starts with "crash" kills the
    process analysing it (as the out-of-memory killer would)."""
    if os.path.basename(ref.path).startswith("crash"):
        if os.environ.get(PROTECTED_ENV) == str(os.getpid()):
            # Run in the test's own process (the thread fallback): do not kill it.
            raise RuntimeError("analysed in the test's process, not in an analysis process")
        die()
    return analyze_recording_pid(ref, options)


def die() -> None:
    if hasattr(signal, "SIGKILL"):
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(70)


def sleep_and_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def raise_value_error(text: str) -> None:
    raise ValueError(text)


def exit_process(status: int) -> None:
    raise SystemExit(status)


def unpicklable_result() -> Any:
    return lambda: None


def getcwd_and_path() -> tuple[str, list[str]]:
    import sys

    return os.getcwd(), list(sys.path)


def main_module_name() -> str | None:
    """The worker's ``__main__``: where spawn would have run the parent's script again."""
    import sys

    main = sys.modules.get("__main__")
    return getattr(main, "__file__", None)


def blas_threads_setting_and_threads_numpy_starts() -> tuple[str | None, int]:
    """The worker's OPENBLAS_NUM_THREADS, and how many threads importing numpy (its
    OpenBLAS) adds to the process; numpy must not be in yet."""
    import sys

    assert "numpy" not in sys.modules, "numpy was imported before: nothing to count"
    before = len(os.listdir("/proc/self/task"))
    import numpy  # noqa: F401 - the import is what starts OpenBLAS's threads

    return os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")) - before


def analyze_in_process_or_die(ref: Any, options: Any, progress_lines: bool) -> Any:
    """``fanout.analyze_in_process``, but a trace whose file name starts with "crash" kills
    the process analysing it (as the out-of-memory killer would)."""
    from tb_syncfinder.fanout import analyze_in_process

    if os.path.basename(ref.path).startswith("crash"):
        die()
    return analyze_in_process(ref, options, progress_lines)


def memory_share_and_pid(ref: Any, options: Any, progress_lines: bool) -> Any:
    """No analysis: a failed result whose reason is the memory share the process was given,
    its pid and whether progress lines were asked for."""
    from tb_syncfinder.models import TraceInfo, TraceResult

    reason = f"{options.memory_share} {os.getpid()} {progress_lines}"
    return TraceResult(TraceInfo(ref.path, ref.worker, ref.span, ref.run, error=reason))
