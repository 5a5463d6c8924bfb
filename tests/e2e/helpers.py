"""Helpers shared by the browser tests: a TensorBoard child process, Chromium pages, shots.

The fixtures built on them (``browser``, ``page_errors``) are in ``conftest.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "docs" / "screenshots"
TAKE_SCREENSHOTS = os.environ.get("SYNC_ADVISOR_SCREENSHOTS") == "1"
START_TIMEOUT_S = 90
LOAD_TIMEOUT_S = 90
UI_TIMEOUT_MS = 20_000
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def skip_without_browser() -> Any:
    """Skip the calling test module when Chromium or Playwright is missing; else return
    ``playwright.sync_api``. Call it at module level. Under CI (``CI`` set, as .ci/run is
    run) a missing browser fails instead: a green run must not hide skipped browser tests."""
    if not Path(CHROMIUM).exists():
        reason = "no chromium binary (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"CI: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
    if os.environ.get("CI"):
        import playwright.sync_api as sync_api  # ImportError fails the run in CI

        return sync_api
    return pytest.importorskip("playwright.sync_api")


def checkout_env() -> dict[str, str]:
    """The environment for child processes: this checkout first on ``sys.path``, so they run
    the code under test even where the installed (editable) package points elsewhere. The
    plugin's entry point still comes from the installed distribution."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


@contextmanager
def serve_tensorboard(
    logdir: Path,
    cwd: Path,
    expected_runs: set[str],
    extra_args: list[str] | None = None,
    path_prefix: str = "",
) -> Iterator[str]:
    """A TensorBoard process on ``logdir`` run from ``cwd`` (the plugin's default source
    root); yields its base URL once the Sync Advisor has loaded ``expected_runs``; the
    process group is always stopped, and its output is in the failure message."""
    # The port is free when picked, then released for TensorBoard: its data server (which
    # binds a port the OS picks) took it once before TensorBoard bound it ("could not bind
    # to port 44883, it was already in use"). Such a start is tried again on another port.
    for attempt in range(3):
        port = free_port()
        log = cwd / f"tensorboard-{port}.log"
        command = [
            sys.executable, "-m", "tensorboard.main",
            "--logdir", str(logdir),
            "--host", "127.0.0.1",
            "--port", str(port),
            "--sync_advisor_cache_dir", str(cwd / f"cache-{port}"),
            "--sync_advisor_reload_interval", "1",
            *(["--path_prefix", path_prefix] if path_prefix else []),
            *(extra_args or []),
        ]  # fmt: skip
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=cwd,
                env=checkout_env(),
            )
        if not _port_taken(proc, log) or attempt == 2:
            break
    base = f"http://127.0.0.1:{port}{path_prefix}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S + LOAD_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"tensorboard exited with {proc.returncode}:\n{log.read_text()}")
            try:
                runs = get_json(f"{base}/data/plugin/sync_advisor/runs")
                names = {r["name"] for r in runs["runs"] if not r["loading"]}
                if not runs["loading"] and expected_runs <= names:
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"tensorboard did not load the runs in time:\n{log.read_text()}")
            time.sleep(0.3)
        yield base
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


def _port_taken(proc: subprocess.Popen, log: Path, wait_s: float = 20.0) -> bool:
    """Whether TensorBoard exited at start because its port was taken meanwhile."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if "could not bind to port" in text:
            proc.wait(timeout=15)
            return True
        if proc.poll() is not None or "Serving TensorBoard" in text or "TensorBoard 2" in text:
            return False
        time.sleep(0.1)
    return False


def new_page(
    browser: Any, errors: list[str], width: int = 1280, height: int = 800, dark: bool = False
) -> Any:
    """A page in a fresh context (own viewport, colour scheme); uncaught page errors go to
    ``errors`` so a test can assert there were none."""
    context = browser.new_context(
        viewport={"width": width, "height": height}, color_scheme="dark" if dark else "light"
    )
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return page


def plugin_url(base: str, hash_: str = "") -> str:
    return f"{base}/data/plugin_entry.html?name=sync_advisor{hash_}"


def shot(target: Any, name: str, full_page: bool = True) -> None:
    """Save docs/screenshots/<name> when SYNC_ADVISOR_SCREENSHOTS=1 (CI leaves the tree
    clean)."""
    if TAKE_SCREENSHOTS:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        target.screenshot(path=str(SCREENSHOTS / name), full_page=full_page)


def contrast(fg: str, bg: str) -> float:
    """The WCAG contrast ratio of two CSS ``rgb(...)`` colours."""

    def luminance(colour: str) -> float:
        channels = [int(v) / 255 for v in re.findall(r"\d+", colour)[:3]]
        r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    high, low = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def wait_drawn(frame: Any) -> None:
    """Wait until the view shows the selection in the URL: after a change of run, worker,
    span, view or baseline the page keeps the previous one's view, marked stale, until the
    new one's answers come (a check right after the change can read the old view)."""
    frame.wait_for_function(
        "!document.querySelector('main.sa-view').classList.contains('sa-stale')"
    )


def rows(frame: Any) -> list[str]:
    frame.wait_for_selector("[data-testid=sites] tbody tr")
    return frame.locator("[data-testid=sites] tbody tr").all_inner_texts()
