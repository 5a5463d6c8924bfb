"""Start TensorBoard on the demo logdir and wait until it answers.

TensorBoard runs as a child process (``python -m tensorboard.main``) rather than in-process:
it can be stopped cleanly (tests, Ctrl-C), and its plugins, the Sync Advisor among them, are
found through the installed entry points exactly as for a user's own ``tensorboard`` call.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

PLUGIN_NAME = "sync_advisor"
DEFAULT_PORT = 6006


class TensorBoardError(Exception):
    """TensorBoard could not be started; the message says why (its own output included)."""


def port_is_free(port: int, host: str = "localhost") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(preferred: int = DEFAULT_PORT, attempts: int = 20) -> int:
    """``preferred`` if free, else the next free one above it, else any free port."""
    for port in range(preferred, preferred + attempts):
        if port_is_free(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


@dataclass
class TensorBoardProcess:
    process: subprocess.Popen
    port: int
    host: str  # the host name for URLs: localhost, or this machine's name with --bind-all
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

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
        url = f"http://localhost:{self.port}/data/plugins_listing"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read().decode("utf-8"))

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        try:
            self.log_path.unlink()
        except OSError:
            pass


def start_tensorboard(
    logdir: str | Path,
    port: int,
    bind_all: bool = False,
    timeout: float = 120.0,
    extra_args: list[str] | None = None,
) -> TensorBoardProcess:
    """Start TensorBoard on ``logdir`` and return once it answers HTTP requests."""
    command = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(logdir),
        "--port",
        str(port),
        *(extra_args or []),
    ]
    command += ["--bind_all"] if bind_all else ["--host", "localhost"]
    # TensorBoard's output goes to a file: shown only if it fails to start.
    log_file = tempfile.NamedTemporaryFile(
        prefix="tb-syncfinder-tensorboard-", suffix=".log", delete=False
    )
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    log_file.close()
    host = socket.gethostname() if bind_all else "localhost"
    board = TensorBoardProcess(process, port, host, Path(log_file.name))
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            output = board.output().strip()
            board.stop()
            raise TensorBoardError(
                f"TensorBoard exited with status {process.returncode} before answering on "
                f"port {port}:\n{output[-2000:]}"
            )
        try:
            board.plugins()
            return board
        except (urllib.error.URLError, OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            output = board.output().strip()
            board.stop()
            raise TensorBoardError(
                f"TensorBoard did not answer on port {port} within {timeout:.0f} s:\n"
                f"{output[-2000:]}"
            )
        time.sleep(0.25)
