"""Analysis processes for the plugin's loader: clean interpreters that import only what the
job needs, never the script that started TensorBoard.

Why not ``multiprocessing``: with the "spawn" start method (and "forkserver", which preloads
``__main__``) every worker runs the parent's main module again, as ``__mp_main__``
(``multiprocessing.spawn.get_preparation_data`` sends its path or module name, and the
child's ``spawn.prepare`` runs it with ``runpy``). A script that embeds TensorBoard without
an ``if __name__ == "__main__":`` guard then starts another TensorBoard in every worker
(issue 14), and even ``tensorboard`` itself costs each worker an import of TensorBoard.
There is no supported hook to leave the main module out, and "fork" is unsafe once
TensorBoard's server threads hold locks.

So each worker is ``python -c BOOTSTRAP``: it puts this package's folder first on
``sys.path``, imports this module and calls ``worker_main``, which takes the parent's
``sys.path`` (as spawn does, so that it imports the same code), prints a ready line, then
answers requests on its stdin/stdout: ``(fn, args, kwargs)`` pickled, one at a time,
answered by ``("ok", value, None, memory)`` or ``("error", exception, traceback text,
memory)`` (``memory``: the process's resident size now and when it was ready, or None),
each message framed by its length. ``fn`` must be importable by name
(a top-level function of a module, not of ``__main__``).

``ProcessPool`` is a ``concurrent.futures.Executor`` over at most ``max_workers`` such
processes, one thread each (daemon threads: they never hold up the interpreter's exit). A
process that dies fails only the job it was running, with ``WorkerDied`` naming its pid and
how it ended, and is replaced for the next job; one that cannot start fails the job with
``WorkerStartError``. A process idle for ``idle_timeout_s`` is closed (the memory a big
trace left behind goes back) and started again when needed; so is one whose resident size
after a job is more than ``recycle_above_bytes`` above what it was when it was ready (a big
trace's peak, which Python's allocator keeps: 1.7 GB held by an idle worker), at once.

A worker stops cleanly, its job's ``finally`` and ``except BaseException`` blocks run (the
engine removes the window files of a trace it analyses in windows), on SIGTERM and as soon
as its stdin closes: when the pool shuts down (the pool closes its stdin, and sends a busy
one SIGTERM; SIGKILL only once it has not ended ``STOP_GRACE_S`` later), and when the
parent ends however it ends (Ctrl-C, SIGTERM, SIGKILL: its end of the pipe closes). It
ignores SIGINT: Ctrl-C in TensorBoard's terminal reaches its whole process group, and the
worker stops when TensorBoard goes, not before.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import logging
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, BinaryIO

logger = logging.getLogger(__name__)

# What a worker runs. argv[1] is the folder that holds the ``tb_syncfinder`` package the
# parent imported, so that the worker imports that copy before it has the parent's path.
BOOTSTRAP = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from tb_syncfinder.plugin.workers import worker_main; worker_main()"
)
DEFAULT_IDLE_TIMEOUT_S = 60.0
DEFAULT_START_TIMEOUT_S = 60.0  # a loaded 2-core machine can take seconds to start Python
# A worker whose resident size grew by more than this over its jobs is replaced after the
# job (an analysis of a few-MB trace stays far below it, so small traces never pay for a
# new process).
DEFAULT_RECYCLE_ABOVE_BYTES = 256 << 20
# How long a stopped worker has to clean up (remove its window files) before SIGKILL.
STOP_GRACE_S = 30.0
_HEADER = struct.Struct("<Q")  # length of the pickled message that follows
_CHUNK = 1 << 24
# A worker's first line, unframed: what the interpreter's start-up may have printed before
# (a sitecustomize, a .pth hook) is skipped up to it.
_READY = b"\0tb_syncfinder analysis worker ready\n"
_MAX_LINES_BEFORE_READY = 10_000
# Signals that mean the process crashed, rather than that something stopped it.
_CRASH_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT")


class WorkerStartError(OSError):
    """An analysis process could not be started, or exited before it was ready."""


class WorkerDied(RuntimeError):
    """The analysis process running a job died before answering."""

    def __init__(self, pid: int, how: str) -> None:
        super().__init__(f"the analysis process (pid {pid}) {how} while it read this trace")
        self.pid = pid
        self.how = how


class _Stop(BaseException):
    """Raised in a worker's main thread when it is to stop (SIGTERM, or its stdin closed):
    the job's ``finally`` blocks run as it unwinds."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker (the ``__cause__`` of its copy)."""

    def __str__(self) -> str:
        return "\n" + str(self.args[0]) if self.args else ""


def package_folder() -> str:
    """The folder that holds the ``tb_syncfinder`` package this process imported."""
    import tb_syncfinder

    return os.path.dirname(os.path.dirname(os.path.abspath(tb_syncfinder.__file__)))


def worker_command(executable: str | None = None) -> list[str]:
    """The command line of one worker process."""
    executable = executable or sys.executable
    if not executable or getattr(sys, "frozen", False):
        # An embedding application, or a frozen one (its executable does not take -c).
        raise WorkerStartError("no Python interpreter to start analysis processes with")
    try:
        # -E, -s, -I, -O, -X and -W options as this interpreter got them (what spawn passes).
        flags = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a private helper: without it, no flags
        flags = []
    return [executable, *flags, "-c", BOOTSTRAP, package_folder()]


def describe_exit(returncode: int | None) -> str:
    """How a process ended, in words (for ``WorkerDied``)."""
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        if name == "SIGKILL":
            return "was killed (SIGKILL: out of memory?)"
        if name in _CRASH_SIGNALS:
            return f"crashed ({name}: a crash in a native library?)"
        return f"was stopped by {name}"
    if returncode > 0xFFFF:  # Windows: an NTSTATUS such as 0xC0000005 (access violation)
        return f"crashed (exit status {returncode:#010x})"
    return f"exited with status {returncode}"


def main_module_rerun() -> bool:
    """True when called from the body of the parent's main script that multiprocessing runs
    again in a child it started with spawn or forkserver (as ``__mp_main__``, while it
    prepares the child). A function of that script called later, as a Process's target, is
    not such a re-run: only module-level code is."""
    frame = sys._getframe(1) if hasattr(sys, "_getframe") else None
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            return True
        frame = frame.f_back
    return False


RERUN_MESSAGE = (
    "sync_advisor: TensorBoard is being started again, in process %d, by the script that "
    "started it in process %d: a process that multiprocessing started with spawn or "
    "forkserver (torch-tb-profiler's run loader, for one) runs that script again as "
    "__mp_main__, since it has no 'if __name__ == \"__main__\":' guard. Start TensorBoard "
    "under that guard (or, where torch-tb-profiler is the one, leave it out: "
    "program.TensorBoard(plugins=tb_syncfinder.plugin.standalone."
    "plugins_without_pytorch_profiler())). The Sync Advisor loads nothing in this copy; "
    "its own analysis processes never run the script again."
)


# ----- messages: a length, then a pickle ---------------------------------------------------
def _send(stream: BinaryIO, data: bytes) -> None:
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def _receive(stream: BinaryIO) -> bytes | None:
    """One message, or None at the end of the stream (also in the middle of a message)."""
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    return _read_exactly(stream, _HEADER.unpack(header)[0])


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    chunks = []
    while size:
        # In pieces: a length read from something that is not a worker can be absurd.
        chunk = stream.read(min(size, _CHUNK))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _wait_ready(stream: BinaryIO) -> bool | None:
    """Read up to the worker's ready line; None at the end of its output, False when it
    printed too much else."""
    for _ in range(_MAX_LINES_BEFORE_READY):
        line = stream.readline(1 << 16)
        if not line:
            return None
        if line.endswith(_READY):  # after output without a newline of its own
            return True
        logger.debug("sync_advisor: an analysis process printed %r", line[:200])
    return False


def _dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def resident_bytes() -> int | None:
    """This process's resident memory now (Linux), else its peak (other POSIX systems),
    else None."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError, ValueError):
        return None
    return peak if sys.platform == "darwin" else peak * 1024  # bytes there, KiB elsewhere


# ----- the worker side ---------------------------------------------------------------------
def worker_main() -> None:
    """Serve requests on stdin until it closes (run by ``BOOTSTRAP`` in a new interpreter)."""
    # The channel is a private copy of stdin/stdout; fd 1 then goes to stderr and fd 0 to
    # nothing, so that a stray print (a native library's, a warning) or a read of stdin
    # cannot corrupt it. What start-up printed goes out first, before the ready line.
    if sys.stdout is not None:
        sys.stdout.flush()
    requests_in = os.fdopen(os.dup(0), "rb")
    answers_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    try:
        os.dup2(2, 1)
    except OSError:  # no stderr (pythonw): stray output goes nowhere
        os.dup2(null, 1)
    if sys.stderr is not None:
        sys.stdout = sys.stderr
    # Ctrl-C in TensorBoard's terminal reaches its whole process group: the parent decides
    # when a worker stops (it closes the worker's stdin), not the keyboard.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM (and stdin closing, which the reader thread turns into one) unwinds the job.
    signal.signal(signal.SIGTERM, _on_sigterm)

    path = _receive(requests_in)
    if path is None:
        os._exit(0)
    sys.path[:] = pickle.loads(path)
    answers_out.write(_READY)
    answers_out.flush()
    at_start = resident_bytes()

    requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    threading.Thread(
        target=_read_requests, args=(requests_in, requests), name="requests", daemon=True
    ).start()
    try:
        while not _stopping:
            request = requests.get()
            if request is None:
                break
            answer = _answer(request, at_start)
            if _stopping:
                break  # the job swallowed the _Stop: no answer is waited for
            try:
                _send(answers_out, answer)
            except OSError:  # the parent is gone
                break
    except _Stop:
        pass
    _exit_stopped()


_stopping = False


def _on_sigterm(signum: int, frame: Any) -> None:
    """Stop the worker: raise _Stop in the main thread, once (a second SIGTERM must not
    interrupt the clean-up the first one started)."""
    global _stopping
    if _stopping:
        return
    _stopping = True
    raise _Stop()


def _stop_main_thread() -> None:
    """From another thread: stop the main thread as SIGTERM would, also out of a blocking
    call (a signal sent to the process may reach another thread and leave it blocked)."""
    main = threading.main_thread().ident
    if hasattr(signal, "pthread_kill") and main is not None:
        signal.pthread_kill(main, signal.SIGTERM)
    else:  # Windows: no pthread_kill
        import _thread

        _thread.interrupt_main(signal.SIGTERM)


def _exit_stopped() -> None:
    """End the worker once its job unwound: atexit handlers run, no interpreter teardown
    (the reader thread may still block on stdin)."""
    try:
        import atexit

        atexit._run_exitfuncs()
        if sys.stderr is not None:
            sys.stderr.flush()
    finally:
        os._exit(0)


def _read_requests(stream: BinaryIO, requests: queue.SimpleQueue[bytes | None]) -> None:
    """Queue each request; when stdin closes (the pool stops this worker, or the parent is
    gone), stop the main thread, also in the middle of a job."""
    while True:
        request = _receive(stream)
        if request is None:
            requests.put(None)  # an idle main thread wakes up and ends
            _stop_main_thread()
            return
        requests.put(request)


def _answer(request: bytes, at_start: int | None = None) -> bytes:
    try:
        fn, args, kwargs = pickle.loads(request)
        answer: tuple[Any, ...] = ("ok", fn(*args, **kwargs), None)
    except _Stop:
        raise
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        if not isinstance(exc, Exception):  # SystemExit, KeyboardInterrupt: a job's failure
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        answer = ("error", exc, traceback.format_exc())
    fn = args = kwargs = None  # the job's arguments and result go before the size is read
    memory = (resident_bytes(), at_start)
    try:
        return _dumps((*answer, memory))
    except Exception as exc:  # noqa: BLE001 - an answer that cannot be pickled
        what = "result" if answer[0] == "ok" else f"{type(answer[1]).__name__}: {answer[1]}"
        reason = f"the analysis process could not send its {what} back ({exc})"
        return _dumps(("error", RuntimeError(reason), traceback.format_exc(), memory))


# ----- the parent side ---------------------------------------------------------------------
class _Gone(Exception):
    """The worker's pipes closed: it died, or the pool stopped it."""


class Worker:
    """One analysis process, used by one pool thread at a time."""

    def __init__(self, command: list[str], start_timeout_s: float) -> None:
        from tb_syncfinder.engine import with_one_blas_thread  # not in the worker's bootstrap

        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                close_fds=True,
                env=with_one_blas_thread(dict(os.environ)),
            )
        except (OSError, ValueError) as exc:
            raise WorkerStartError(f"cannot run {command[0]}: {exc}") from exc
        self.pid = self.process.pid
        self.busy = False
        # A worker that does not say it is ready in time is killed: its read below ends.
        late = threading.Event()
        timer = threading.Timer(start_timeout_s, lambda: (late.set(), self._kill()))
        timer.daemon = True
        timer.start()
        try:
            path = [p or os.getcwd() for p in sys.path]  # '' is the folder it runs in
            _send(self.process.stdin, _dumps(path))  # type: ignore[arg-type]
            ready = _wait_ready(self.process.stdout)  # type: ignore[arg-type]
        except (OSError, ValueError):
            ready = None
        finally:
            timer.cancel()
        if not ready:
            if ready is False:  # it runs, but it is no worker of ours
                self._kill()
            what = f"{describe_exit(self._wait())} before it was ready"
            self.reap()
            if late.is_set():
                what = f"was not ready within {start_timeout_s:g} s (killed)"
            elif ready is False:
                what = "printed too much before it was ready (killed)"
            raise WorkerStartError(
                f"the analysis process (pid {self.pid}) {what} (its output is in TensorBoard's)"
            )

    def call(self, request: bytes) -> bytes:
        """Send one request and return its answer; raises _Gone if the process went."""
        try:
            _send(self.process.stdin, request)  # type: ignore[arg-type]
            answer = _receive(self.process.stdout)  # type: ignore[arg-type]
        except (OSError, ValueError) as exc:  # ValueError: its pipe was closed under us
            raise _Gone() from exc
        if answer is None:
            raise _Gone()
        return answer

    def how_it_ended(self) -> str:
        return describe_exit(self._wait())

    def close(self, terminate: bool = False) -> None:
        """Stop it: its stdin closes (it ends at once, even mid-job, its job unwinding as
        on SIGTERM); sent SIGTERM too if asked."""
        try:
            self.process.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        if terminate:
            try:
                self.process.terminate()
            except OSError:
                pass

    def reap(self) -> None:
        """Close it and collect its exit status (no zombie left behind)."""
        self.close()
        self._wait()
        try:
            self.process.stdout.close()  # type: ignore[union-attr]
        except OSError:
            pass

    def _wait(self) -> int | None:
        try:
            return self.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self._kill()
            try:
                return self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                return None

    def _kill(self) -> None:
        try:
            self.process.kill()
        except OSError:
            pass


def _settle_then_reap(settle: Callable[[], None], worker: Worker) -> None:
    """Tell the caller its job's answer, then wait for the process it ran in to end: a
    process replaced for its size holds gigabytes, and its exit (0.1-0.4 s) is no part
    of the answer."""
    try:
        settle()
    finally:
        worker.reap()


class ProcessPool(concurrent.futures.Executor):
    """At most ``max_workers`` analysis processes, each running one job at a time."""

    def __init__(
        self,
        max_workers: int,
        *,
        idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        executable: str | None = None,
        recycle_above_bytes: int | None = DEFAULT_RECYCLE_ABOVE_BYTES,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self.idle_timeout_s = idle_timeout_s
        self.recycle_above_bytes = recycle_above_bytes  # None: never replaced for its size
        self.recycled = 0  # processes replaced for their size (tests, logs)
        self.start_timeout_s = start_timeout_s
        self.command = worker_command(executable)  # WorkerStartError where there is none
        # True once a process said it was ready: processes work here.
        self.started_any = False
        self._start_error: WorkerStartError | None = None  # before any process started
        self._jobs: queue.SimpleQueue[tuple | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # threads waiting for a job
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._workers: set[Worker] = set()
        self._shutdown = False  # no new jobs
        self._cancelled = False  # shut down with cancel_futures: nothing more runs
        self._names = itertools.count()

    @property
    def pids(self) -> list[int]:
        """Pids of the analysis processes running now."""
        with self._lock:
            return sorted(worker.pid for worker in self._workers)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._jobs.put((future, fn, args, kwargs))
            # As ThreadPoolExecutor: a new thread only when none is idle.
            if not self._idle.acquire(timeout=0) and len(self._threads) < self.max_workers:
                thread = threading.Thread(
                    target=self._serve,
                    name=f"sync_advisor_worker_{next(self._names)}",
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking jobs. With ``cancel_futures`` the queued jobs are cancelled and the
        running ones stopped too (their processes sent SIGTERM: each job unwinds, its
        clean-up runs; they fail with CancelledError); without it, what was submitted
        still runs."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                self._cancelled = True
                while True:
                    try:
                        job = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if job is not None:
                        job[0].cancel()
            for _ in self._threads:
                self._jobs.put(None)
            threads = list(self._threads)
            running = list(self._workers) if cancel_futures else []
        for worker in running:
            worker.close(terminate=worker.busy)
        if wait:
            for thread in threads:
                thread.join()

    # ----- one thread per process ----------------------------------------------------------
    def _serve(self) -> None:
        worker: Worker | None = None
        try:
            while True:
                try:
                    timeout = self.idle_timeout_s if worker is not None else None
                    job = self._jobs.get(timeout=timeout)
                except queue.Empty:
                    # Idle for long: the process goes (and its memory with it).
                    self._forget(worker)
                    worker = None
                    continue
                if job is None:
                    return
                future, fn, args, kwargs = job
                settle = None
                if future.set_running_or_notify_cancel():
                    worker, settle = self._run(worker, future, fn, args, kwargs)
                del job, future, fn, args, kwargs
                # Idle before the caller hears of its job: a next job submitted as soon as
                # this one is done finds this thread (and its process) free, instead of
                # starting another process beside it. So the future's done-callbacks run
                # while the thread counts as idle: a job submitted meanwhile waits for them
                # (a callback must not wait for a job of this pool).
                self._idle.release()
                if settle is not None:
                    settle()
                    del settle
        finally:
            self._forget(worker)

    def _run(
        self,
        worker: Worker | None,
        future: concurrent.futures.Future,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict,
    ) -> tuple[Worker | None, Callable[[], None]]:
        """Run one job; returns the worker to keep for the next (None when it died) and
        what settles the job's future (called once this thread is counted idle)."""
        try:
            if worker is None:
                worker = self._start()
            request = _dumps((fn, args, kwargs))
        except BaseException as exc:  # noqa: BLE001 - the job's failure, not the thread's
            return worker, functools.partial(future.set_exception, exc)
        with self._lock:
            worker.busy = True
        try:
            answer = worker.call(request)
        except _Gone:
            self._forget(worker)
            if self._cancelled:
                stopped = concurrent.futures.CancelledError("the pool shut down")
                return None, functools.partial(future.set_exception, stopped)
            died = WorkerDied(worker.pid, worker.how_it_ended())
            logger.warning("sync_advisor: %s", died)
            return None, functools.partial(future.set_exception, died)
        with self._lock:
            worker.busy = False
        try:
            outcome = pickle.loads(answer)
        except Exception as exc:  # noqa: BLE001 - e.g. an exception class that cannot be rebuilt
            reason = f"the analysis process's answer could not be read ({exc})"
            return worker, functools.partial(future.set_exception, RuntimeError(reason))
        too_big = self._too_big(worker, outcome[-1])
        if outcome[0] == "ok":
            settle = functools.partial(future.set_result, outcome[1])
        else:
            error = outcome[1]
            error.__cause__ = RemoteTraceback(outcome[2])
            settle = functools.partial(future.set_exception, error)
        del outcome
        if too_big:  # the next job gets a new process; this one goes once the caller knows
            with self._lock:
                self._workers.discard(worker)
            return None, functools.partial(_settle_then_reap, settle, worker)
        return worker, settle

    def _too_big(self, worker: Worker, memory: Any) -> bool:
        """Whether ``worker`` grew by more than ``recycle_above_bytes`` since it was ready
        (``memory``: its resident size after the job and then)."""
        if self.recycle_above_bytes is None or not memory:
            return False
        now, at_start = memory
        if now is None:
            return False
        grown = now - (at_start or 0)
        if grown <= self.recycle_above_bytes:
            return False
        logger.info(
            "sync_advisor: analysis process %d holds %d MB after its job (%d MB more than at "
            "start): replaced",
            worker.pid,
            now >> 20,
            grown >> 20,
        )
        with self._lock:
            self.recycled += 1
        return True

    def _start(self) -> Worker:
        with self._lock:
            if self._start_error is not None and not self.started_any:
                raise self._start_error  # processes do not start here: fail fast
        try:
            worker = Worker(self.command, self.start_timeout_s)
        except WorkerStartError as exc:
            with self._lock:
                if not self.started_any:
                    self._start_error = exc
            raise
        with self._lock:
            self.started_any = True
            self._workers.add(worker)
            stopping = self._cancelled
        logger.debug("sync_advisor: analysis process %d started", worker.pid)
        if stopping:
            self._forget(worker)
            raise concurrent.futures.CancelledError("the pool shut down")
        return worker

    def _forget(self, worker: Worker | None) -> None:
        if worker is None:
            return
        with self._lock:
            self._workers.discard(worker)
        worker.reap()
