"""Start TensorBoard as a child process and wait until it answers.

``tb-syncfinder demo`` serves its logdir with it; the tests and bench/bench_plugin.py start
their TensorBoards with it too, so all of them start, probe and stop it the same way.

TensorBoard runs as a child process (``python -m tensorboard.main``) rather than in-process:
it can be stopped cleanly (tests, Ctrl-C), and its plugins, the Sync Advisor among them, are
found through the installed entry points exactly as for a user's own ``tensorboard`` call.
It gets a session (process group) of its own so that stopping it also stops whatever it
started (torch-tb-profiler loads runs in worker processes).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tb_syncfinder.plugin.metadata import PLUGIN_NAME

DEFAULT_PORT = 6006


class TensorBoardError(Exception):
    """TensorBoard could not be started; the message says why (its own output included)."""


def port_is_free(port: int, host: str = "localhost") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As TensorBoard's server binds (http.server sets SO_REUSEADDR): a port left in
        # TIME_WAIT by the demo that just stopped is free to it, so a restart keeps 6006.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "localhost") -> int:
    """A port the system says is free now (for tests and benchmarks: any port will do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def pick_port(preferred: int = DEFAULT_PORT, attempts: int = 20, host: str = "localhost") -> int:
    """``preferred`` if free on ``host``, else the next free one above it, else any free
    port."""
    for port in range(preferred, preferred + attempts):
        if port_is_free(port, host):
            return port
    return free_port(host)


@dataclass
class TensorBoardProcess:
    process: subprocess.Popen
    port: int
    host: str  # the host name for URLs: localhost, or this machine's name with --bind-all
    log_path: Path
    path_prefix: str = ""  # TensorBoard's --path_prefix ("/foo"), "" for none
    local_host: str = "localhost"  # how this machine reaches it: the --host, or localhost

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path_prefix}/"

    @property
    def local_url(self) -> str:
        """The URL this machine reaches TensorBoard's root at (no trailing slash)."""
        return f"http://{self.local_host}:{self.port}{self.path_prefix}"

    @property
    def sync_advisor_url(self) -> str:
        return f"{self.url}#{PLUGIN_NAME}"

    def output(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def plugins(self) -> dict:
        """TensorBoard's ``data/plugins_listing`` (which plugins are active)."""
        url = f"{self.local_url}/data/plugins_listing"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read().decode("utf-8"))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop TensorBoard and what it started: SIGTERM to its process group, SIGKILL if it
        is still running after ``timeout`` seconds."""
        self._stop_group(kill=False)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._stop_group(kill=True)
            self.process.wait(timeout=timeout)
        try:
            self.log_path.unlink()
        except OSError:
            pass

    def _stop_group(self, kill: bool) -> None:
        if not hasattr(os, "killpg"):  # Windows: no process group, only the process itself
            if self.process.poll() is None:
                (self.process.kill if kill else self.process.terminate)()
            return
        try:
            # Also once TensorBoard itself has exited: its workers may still be running.
            os.killpg(self.process.pid, signal.SIGKILL if kill else signal.SIGTERM)
        except ProcessLookupError:
            pass


# What TensorBoard prints when the port it was given is in use: its own check before it
# binds, and werkzeug's when the bind itself fails (the port taken after that check).
PORT_TAKEN = ("could not bind to port", "is in use by another program")
PORT_ATTEMPTS = 3


def start_tensorboard(
    logdir: str | Path,
    port: int | None = None,
    bind_all: bool = False,
    timeout: float = 120.0,
    extra_args: list[str] | None = None,
    *,
    host: str = "localhost",
    path_prefix: str = "",
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    module: str = "tensorboard.main",
) -> TensorBoardProcess:
    """Start TensorBoard on ``logdir`` and return once it answers HTTP requests.

    ``port`` None: a free one (``pick_port``, from 6006 up), picked again above it when
    TensorBoard finds it taken by the time it binds it (between the check and the bind,
    another program, another TensorBoard starting, or this one's data server, which binds
    a port the system picks, may take it: seen in the tests). ``host`` is its ``--host``
    (ignored with ``bind_all``),
    ``path_prefix`` its ``--path_prefix``, ``extra_args`` any further flags
    (``--sync_advisor_*``), ``cwd`` the folder it runs in, ``env`` its environment
    (default: this process's), ``module`` what ``python -m`` runs
    (``tb_syncfinder.plugin.standalone``: without torch-tb-profiler). Raises
    TensorBoardError, with TensorBoard's output, if it exits or does not answer within
    ``timeout`` seconds; it is stopped then, as on any interruption.
    """
    attempts = 1 if port is not None else PORT_ATTEMPTS
    # The address TensorBoard will bind: a port free on localhost may be taken on another.
    probe_host = "0.0.0.0" if bind_all else host
    tried = DEFAULT_PORT - 1
    for attempt in range(1, attempts + 1):
        if port is None:
            tried = pick_port(tried + 1, host=probe_host)
        try:
            return _start_tensorboard(
                logdir,
                port if port is not None else tried,
                bind_all,
                timeout,
                extra_args,
                host=host,
                path_prefix=path_prefix,
                cwd=cwd,
                env=env,
                module=module,
            )
        except TensorBoardError as error:
            if not any(words in str(error) for words in PORT_TAKEN) or attempt == attempts:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


def _start_tensorboard(
    logdir: str | Path,
    port: int,
    bind_all: bool,
    timeout: float,
    extra_args: list[str] | None,
    *,
    host: str,
    path_prefix: str,
    cwd: str | Path | None,
    env: dict[str, str] | None,
    module: str,
) -> TensorBoardProcess:
    # ``python -m`` would put the working folder first on sys.path: run from a clone with
    # a normal install, TensorBoard then imported the clone's tb_syncfinder while the demo
    # had written the installed copy's source paths into its traces, and the Source panel
    # refused them as outside its roots. TensorBoard imports this process's package.
    env = dict(os.environ if env is None else env)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    # TensorBoard runs in a session of its own, out of reach of a signal to the caller's
    # process group: if the caller dies without stopping it (SIGKILL, an OOM kill), it
    # stops itself and what it started (``stop_with_parent``), instead of serving on.
    log_file = tempfile.NamedTemporaryFile(
        prefix="tb-syncfinder-tensorboard-", suffix=".log", delete=False
    )
    command = [
        sys.executable,
        "-c",
        "import runpy, sys; del sys.path[0]; "
        "from tb_syncfinder.demo.serve import stop_with_parent; "
        f"stop_with_parent({os.getpid()}, {log_file.name!r}); "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)",
        "--logdir",
        str(logdir),
        "--port",
        str(port),
        *(extra_args or []),
    ]
    command += ["--bind_all"] if bind_all else ["--host", host]
    if path_prefix:
        command += ["--path_prefix", path_prefix]
    # TensorBoard's output goes to ``log_file``: shown only if it fails to start.
    process = subprocess.Popen(
        command, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd, env=env
    )
    log_file.close()
    board = TensorBoardProcess(
        process,
        port,
        host=socket.gethostname() if bind_all else host,
        log_path=Path(log_file.name),
        path_prefix=path_prefix,
        local_host="localhost" if bind_all else host,
    )
    try:
        _wait_until_answering(board, timeout, str(logdir))
    except BaseException:  # TensorBoardError, or Ctrl-C while waiting: never orphan it
        board.stop()
        raise
    return board


def stop_with_parent(parent_pid: int, log_path: str, poll_s: float = 1.0) -> None:
    """In the TensorBoard child: once ``parent_pid`` is no longer its parent (it died and
    the child was re-parented), remove the log nobody will read and stop the child's process
    group (TensorBoard, its data server, the plugins' workers), as ``stop`` would have."""
    import threading

    if not hasattr(os, "killpg") or os.getppid() != parent_pid:
        return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        try:
            os.unlink(log_path)
        except OSError:
            pass
        os.killpg(os.getpgid(0), signal.SIGTERM)

    threading.Thread(target=watch, name="stop-with-parent", daemon=True).start()


def _serves(board: TensorBoardProcess, logdir: str) -> bool:
    """Whether the TensorBoard answering on ``board``'s port serves ``logdir``: another one,
    started at the same moment on the same port, answers while this one is still starting
    (and about to fail to bind). Where its data location says nothing, assume so."""
    with urllib.request.urlopen(f"{board.local_url}/data/environment", timeout=10) as response:
        location = json.loads(response.read().decode("utf-8")).get("data_location")
    if not location or location == logdir:
        return True
    return os.path.realpath(location) == os.path.realpath(logdir)


def exit_reason(output: str, tail_chars: int = 2000) -> str:
    """What a TensorBoard that stopped said of why: its error lines (a port in use, a bad
    flag) when it printed any, else the end of its log. The end alone lost the reason: a
    port in use is said first, then the plugins' worker processes stopping print 2,000
    characters of tracebacks after it."""
    reasons = [
        line.strip()
        for line in output.splitlines()
        if any(words in line for words in PORT_TAKEN)
        or line.startswith(("E ", "ERROR", "tensorboard: error:"))
    ]
    if reasons:
        return "\n".join(dict.fromkeys(reasons))
    return output.strip()[-tail_chars:]


def _wait_until_answering(board: TensorBoardProcess, timeout: float, logdir: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if board.process.poll() is not None:
            raise TensorBoardError(
                f"TensorBoard exited with status {board.process.returncode} before answering "
                f"on port {board.port}:\n{exit_reason(board.output())}"
            )
        try:
            board.plugins()
            if _serves(board, logdir):
                return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TensorBoardError(
                f"TensorBoard did not answer on port {board.port} within {timeout:.0f} s:\n"
                f"{board.output().strip()[-2000:]}"
            )
        # Short: bench/bench_plugin.py times TensorBoard's start-up through this wait.
        time.sleep(0.05)
