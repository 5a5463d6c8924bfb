"""A real ``tensorboard`` process lists the Sync Advisor tab and routes its endpoints.

Three launches per module (``--host 127.0.0.1``, ``--path_prefix /foo``, and ``--bind_all``
as on a remote machine, always asked through 127.0.0.1), on a logdir holding a
trace that real torch profiled on the CPU from a workload file under the source root. The
process group is always killed by the fixture's finalizer.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cpu_workload import ITEM_LINE, WORKLOAD, profile_workload

from tb_syncfinder.demo.serve import TensorBoardProcess, free_port, start_tensorboard
from tests.e2e.helpers import checkout_env

START_TIMEOUT_S = 90
LOAD_TIMEOUT_S = 120


def get(url: str, timeout: float = 10) -> tuple[int, dict, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def get_json(url: str) -> tuple[int, dict]:
    status, _, body = get(url)
    return status, json.loads(body)


class TensorBoard:
    def __init__(self, base: str, process: TensorBoardProcess) -> None:
        self.base = base  # e.g. http://127.0.0.1:1234/foo
        self.process = process

    def plugin(self, route: str) -> str:
        return f"{self.base}/data/plugin/sync_advisor/{route}"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tb_process")
    profile_workload(
        WORKLOAD, root / "src" / "workload.py", root / "logs" / "run_cpu" / "w0.pt.trace.json"
    )
    return root


@pytest.fixture(
    scope="module", params=["", "/foo", "bind_all"], ids=["root", "path_prefix", "bind_all"]
)
def tensorboard(request: pytest.FixtureRequest, logdir: Path) -> Iterator[TensorBoard]:
    bind_all = request.param == "bind_all"
    prefix = "" if bind_all else request.param
    process = start_tensorboard(
        logdir / "logs",
        bind_all=bind_all,
        timeout=START_TIMEOUT_S,
        host="127.0.0.1",
        path_prefix=prefix,
        cwd=logdir,
        env=checkout_env(),
        extra_args=[
            "--sync_advisor_cache_dir",
            str(logdir / "cache"),
            "--sync_advisor_reload_interval",
            "1",
            "--sync_advisor_source_root",
            str(logdir / "src"),
        ],  # fmt: skip
    )
    try:
        yield TensorBoard(f"http://127.0.0.1:{process.port}{prefix}", process)
    finally:
        process.stop(timeout=15)


def wait_loaded(board: TensorBoard) -> dict:
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    while time.monotonic() < deadline:
        status, runs = get_json(board.plugin("runs"))
        assert status == 200
        if runs["runs"] and not runs["loading"]:
            return runs
        time.sleep(0.3)
    pytest.fail(f"runs still loading after {LOAD_TIMEOUT_S}s:\n{board.process.output()}")


def test_plugins_listing_shows_the_sync_advisor_tab_as_an_iframe(tensorboard: TensorBoard) -> None:
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    while True:
        status, listing = get_json(f"{tensorboard.base}/data/plugins_listing")
        assert status == 200
        entry = listing["sync_advisor"]
        if entry["enabled"] or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert entry["enabled"] is True
    assert entry["tab_name"] == "Sync Advisor"
    assert entry["loading_mechanism"]["type"] == "IFRAME"
    prefix = tensorboard.base.split(":", 2)[2].split("/", 1)[1:]  # path part after the port
    expected = "/".join(["", *prefix, "data/plugin/sync_advisor/index.js"]).replace("//", "/")
    assert entry["loading_mechanism"]["module_path"] == expected
    assert "pytorch_profiler" in listing


def test_runs_and_sites_answer_through_tensorboard_routing(tensorboard: TensorBoard) -> None:
    runs = wait_loaded(tensorboard)
    assert [r["name"] for r in runs["runs"]] == ["run_cpu"]
    assert runs["runs"][0]["workers"] == [{"name": "w0", "spans": [None]}]
    status, headers, body = get(tensorboard.plugin("sites?run=run_cpu&latent=1"))
    assert status == 200
    assert headers["X-Content-Type-Options"] == "nosniff"
    sites = json.loads(body)
    kinds = {site["kind"] for site in sites["items"]}
    assert {"scalar_readback", "dynamic_shape"} <= kinds


def test_source_is_served_from_the_root_and_traversal_is_refused(tensorboard: TensorBoard) -> None:
    wait_loaded(tensorboard)
    status, source = get_json(
        tensorboard.plugin(f"source?file=workload.py&line={ITEM_LINE}&context=1")
    )
    assert status == 200
    assert source["lines"][1].strip() == "return y.sum().item() + keep.shape[0]"
    for name in ("../logs/run_cpu/w0.pt.trace.json", "/etc/passwd", "..%2fsecret.py"):
        status, body = get_json(tensorboard.plugin(f"source?file={name}&line=1"))
        assert status in (400, 403, 404) and "error" in body


def test_errors_are_json_through_tensorboard(tensorboard: TensorBoard) -> None:
    wait_loaded(tensorboard)
    assert get_json(tensorboard.plugin("summary?run=nope"))[0] == 404
    status, body = get_json(tensorboard.plugin("sites?run=run_cpu&limit=abc"))
    assert status == 400 and "limit" in body["error"]


def test_dashboard_bundle_is_served_as_javascript_or_missing_as_json(
    tensorboard: TensorBoard,
) -> None:
    status, headers, body = get(tensorboard.plugin("index.js"))
    if status == 200:
        assert headers["Content-Type"].startswith("text/javascript")
    else:
        assert status == 404 and "index.js" in json.loads(body)["error"]


# ----- embedded the way VS Code's TensorBoard integration (or any proxy) shows it -----------
# VS Code shows TensorBoard in an iframe of its webview, and TensorBoard shows the plugin in
# an iframe of data/plugin_entry.html?name=sync_advisor, whose <base href="plugin/NAME/">
# makes relative URLs land on the plugin's routes. So nothing may forbid framing, and the
# bundle may only use relative URLs (an absolute "/data/..." misses any path prefix or proxy).


def assert_frameable(headers: dict) -> None:
    frame_options = {k.lower(): v for k, v in headers.items()}.get("x-frame-options")
    assert frame_options is None, f"X-Frame-Options: {frame_options} blocks the iframe"
    csp = {k.lower(): v for k, v in headers.items()}.get("content-security-policy", "")
    ancestors = [d.strip() for d in csp.split(";") if d.strip().startswith("frame-ancestors")]
    assert not ancestors, f"CSP {ancestors} restricts who may frame the page"


def test_plugin_entry_and_bundle_load_inside_an_iframe(tensorboard: TensorBoard) -> None:
    entry_url = f"{tensorboard.base}/data/plugin_entry.html?name=sync_advisor"
    status, headers, body = get(entry_url)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert_frameable(headers)
    html = body.decode("utf-8")
    base = re.search(r'<base href="([^"]+)"', html)
    module = re.search(r"import\((\"[^\"]+\")\)", html)
    assert base and module, html
    # Resolve as the browser does: the module and the bundle's relative fetches against the
    # entry page's <base>.
    base_url = urllib.parse.urljoin(entry_url, base.group(1))
    status, headers, _ = get(urllib.parse.urljoin(base_url, json.loads(module.group(1))))
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert_frameable(headers)
    status, headers, runs = get(urllib.parse.urljoin(base_url, "runs"))
    assert status == 200 and "runs" in json.loads(runs)
    assert_frameable(headers)


def test_the_bundle_requests_only_relative_urls(tensorboard: TensorBoard) -> None:
    status, _, body = get(tensorboard.plugin("index.js"))
    if status == 404:
        pytest.skip("dashboard bundle not built (cd frontend && npm run build)")
    bundle = body.decode("utf-8")
    assert "fetch(" in bundle  # the check below looks at something real
    absolute_fetch = re.findall(r"fetch\(\s*[\"'`](?:/|https?:)[^\"'`]*", bundle)
    assert not absolute_fetch
    # Any whole string literal that is an absolute path or URL: only the SVG namespace (a
    # name, never requested) and Perfetto's UI (a link the user opens in a new tab, to load
    # the downloaded trace there; the dashboard never fetches it) are allowed.
    literals = [
        m[1] for m in re.findall(r"([\"'`])((?:/[A-Za-z0-9_.-]|https?://)[^\"'`\s]*)\1", bundle)
    ]
    assert set(literals) <= {"http://www.w3.org/2000/svg", "https://ui.perfetto.dev"}, literals
    for attribute in ("href", "src", "action"):
        assert not re.search(attribute + r"\s*[:=]\s*[\"'`]/", bundle), attribute


PARENT = """\
import sys
from tb_syncfinder.demo.serve import start_tensorboard

board = start_tensorboard(
    sys.argv[1], host="127.0.0.1", timeout=float(sys.argv[2]),
    module="tb_syncfinder.plugin.standalone",
)
print(board.process.pid, board.port, board.log_path, flush=True)
sys.stdin.read()  # until killed
"""


def test_a_port_taken_after_it_was_picked_is_picked_again(
    logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the check that a port is free and TensorBoard's bind, another program (or
    TensorBoard's own data server) may take it: TensorBoard then exits at start, and a
    port it was not given is picked again."""
    from tb_syncfinder.demo import serve

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        picks = iter([taken, free_port("127.0.0.1")])
        monkeypatch.setattr(serve, "pick_port", lambda *_args, **_kwargs: next(picks))
        board = start_tensorboard(
            logdir / "logs", host="127.0.0.1", timeout=START_TIMEOUT_S, env=checkout_env()
        )
        try:
            assert board.port != taken and board.process.poll() is None
            assert board.plugins()
        finally:
            board.stop(timeout=15)
    with socket.socket() as holder:  # a port asked for is not changed: its error is told
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(serve.TensorBoardError, match=serve.PORT_TAKEN[0]):
            start_tensorboard(
                logdir / "logs",
                holder.getsockname()[1],
                host="127.0.0.1",
                timeout=START_TIMEOUT_S,
                env=checkout_env(),
            )


def test_a_port_taken_on_another_address_than_localhost_is_picked_again_with_bind_all(
    logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorBoard's own check asks localhost only: a port in use on another address
    passes it, and its bind to every address then fails in werkzeug, in other words
    ("Port N is in use by another program"), which were not taken for a port taken."""
    from tb_syncfinder.demo import serve

    with socket.socket() as holder:
        holder.bind(("127.0.0.2", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        assert serve.port_is_free(taken, "localhost")  # as TensorBoard's own check sees it
        picks = iter([taken, free_port("0.0.0.0")])
        monkeypatch.setattr(serve, "pick_port", lambda *_args, **_kwargs: next(picks))
        board = start_tensorboard(
            logdir / "logs",
            bind_all=True,
            timeout=START_TIMEOUT_S,
            env=checkout_env(),
            module="tb_syncfinder.plugin.standalone",
        )
        try:
            assert board.port != taken and board.process.poll() is None
        finally:
            board.stop(timeout=15)


def test_two_tensorboards_started_at_once_each_get_a_port_and_serve_their_own_logdir(
    tmp_path: Path,
) -> None:
    """Both pick the same free port; the first to bind answers on it while the other is
    still starting, which took that answer as its own, then failed to bind and left its
    caller a board serving the other logdir (a review: 3 of 3). It now checks the logdir
    of the server that answers, and picks the next port when its own start fails."""
    import threading

    from tb_syncfinder.demo.serve import TensorBoardProcess

    started: dict[str, TensorBoardProcess | BaseException] = {}

    def start(name: str) -> None:
        (tmp_path / name).mkdir()
        try:
            started[name] = start_tensorboard(
                tmp_path / name,
                host="127.0.0.1",
                timeout=START_TIMEOUT_S,
                env=checkout_env(),
                module="tb_syncfinder.plugin.standalone",
            )
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            started[name] = error

    threads = [threading.Thread(target=start, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        boards = {name: board for name, board in started.items()}
        assert all(isinstance(b, TensorBoardProcess) for b in boards.values()), boards
        assert boards["a"].port != boards["b"].port  # type: ignore[union-attr]
        time.sleep(1)  # a loser of the race would have exited by now
        for name, board in boards.items():
            assert board.process.poll() is None, board.output()  # type: ignore[union-attr]
            _, environment = get_json(f"{board.local_url}/data/environment")  # type: ignore[union-attr]
            assert environment["data_location"] == str(tmp_path / name)
    finally:
        for board in started.values():
            if isinstance(board, TensorBoardProcess):
                board.stop(timeout=15)


def test_tensorboard_stops_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    """TensorBoard has a session of its own (so that stopping it stops its workers too): a
    SIGKILL to the demo's process group never reached it, and it served on, orphaned."""
    import os
    import signal
    import subprocess
    import sys

    (tmp_path / "logs").mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "logs"), str(START_TIMEOUT_S)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=checkout_env(),
    )
    board_pid = None
    try:
        line = parent.stdout.readline().split()
        assert line, "the parent printed nothing"
        board_pid, port, log_path = int(line[0]), int(line[1]), Path(line[2])
        assert get(f"http://127.0.0.1:{port}/data/plugins_listing")[0] == 200
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.killpg(board_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            pytest.fail("TensorBoard's process group outlived the process that started it")
        assert not log_path.exists()
    finally:
        parent.kill()
        if board_pid is not None:
            try:
                os.killpg(board_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
