"""The plugin analyses traces in processes that never run the user's script again (issue 14).

With multiprocessing's spawn, every worker ran the script that started TensorBoard again
(as ``__mp_main__``): a script embedding TensorBoard without an ``if __name__ ==
"__main__":`` guard started another TensorBoard in each worker. Here such scripts, with no
guard, write a line to a marker file each time their body runs; they must run once while
the traces they serve are analysed in other processes (not in the thread fallback). The
traces are real CPU traces of tests/cpu_workload.py, profiled once per module.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import worker_probes
from cpu_workload import WORKLOAD, profile_workload

from tb_syncfinder.plugin.cache import DiskCache
from tb_syncfinder.plugin.loader import DONE, ERROR, MAX_TRANSIENT_ATTEMPTS, TraceLoader
from tb_syncfinder.plugin.plugin import make_engine_options
from tb_syncfinder.plugin.settings import PluginSettings
from tests.e2e.helpers import checkout_env, free_port

TESTS_DIR = Path(__file__).resolve().parent
SCRIPT_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """src/workload.py and logs/run_cpu/{w0,w1,w2}.pt.trace.json (one profile, three files)."""
    root = tmp_path_factory.mktemp("processes")
    first = root / "logs" / "run_cpu" / "w0.pt.trace.json"
    profile_workload(WORKLOAD, root / "src" / "workload.py", first)
    for name in ("w1", "w2"):
        shutil.copy(first, first.with_name(f"{name}.pt.trace.json"))
    return root


def script_env(tmp_path: Path) -> dict[str, str]:
    env = checkout_env()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env["PYTHONPATH"]])
    env[worker_probes.PIDS_ENV] = str(tmp_path / "pids")
    return env


def run_script(tmp_path: Path, body: str) -> tuple[dict[str, Any], list[str], str]:
    """Run ``body`` as a script (its own session, killed whole on timeout); returns the
    JSON lines it printed (merged; those of other processes under "others"), the lines of
    its marker file and its stderr."""
    script = tmp_path / "user_script.py"
    marker = tmp_path / "marker"
    script.write_text(
        "import os\n"
        f"with open({str(marker)!r}, 'a') as f:  # each time this body runs\n"
        "    f.write(f'{os.getpid()}\\n')\n" + textwrap.dedent(body)
    )
    process = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=script_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=SCRIPT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        lines = marker.read_text().splitlines() if marker.exists() else []
        pytest.fail(f"the script did not end; it ran {len(lines)} times:\n{err[-3000:]}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    answers = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    mine = [a for a in answers if a.get("pid") == process.pid]
    assert process.returncode == 0 and mine, f"status {process.returncode}:\n{out}\n{err[-3000:]}"
    answer = {k: v for a in mine for k, v in a.items()}
    answer["others"] = [a for a in answers if a.get("pid") != process.pid]
    return answer, marker.read_text().splitlines(), err


pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups (killpg)")


def test_a_script_without_main_guard_runs_once_while_processes_analyse_its_traces(
    traces: Path, tmp_path: Path
) -> None:
    answer, marker, _ = run_script(
        tmp_path,
        f"""
        import json
        import worker_probes
        from tb_syncfinder.plugin.cache import DiskCache
        from tb_syncfinder.plugin.loader import TraceLoader
        from tb_syncfinder.plugin.plugin import make_engine_options
        from tb_syncfinder.plugin.settings import PluginSettings

        settings = PluginSettings(
            logdirs=[(None, {str(traces / "logs")!r})], source_roots=[{str(traces / "src")!r}]
        )
        loader = TraceLoader(
            settings.logdirs, make_engine_options(settings), DiskCache(None),
            reload_interval_s=3600, max_workers=2,
        )
        loader.analyze_fn = worker_probes.analyze_recording_pid  # notes who analysed
        loader.poll()
        idle = loader.wait_idle(180)
        traces = {{
            os.path.basename(path): [
                state.status, state.error, state.result and len(state.result.latent)
            ]
            for path, state in loader.get_run("run_cpu").traces.items()
        }}
        print(json.dumps({{
            "pid": os.getpid(), "idle": idle, "use_processes": loader.use_processes,
            "traces": traces,
        }}), flush=True)
        loader.stop()
        """,
    )
    assert marker == [str(answer["pid"])], "the script's body ran again in a worker"
    assert answer["idle"] and answer["use_processes"]
    assert sorted(answer["traces"]) == ["w0.pt.trace.json", "w1.pt.trace.json", "w2.pt.trace.json"]
    for status, error, latent in answer["traces"].values():
        # A CPU trace: its .item() and nonzero are latent syncs (they would sync on a GPU).
        assert status == DONE and error is None and latent > 0
    pids = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 3 and answer["pid"] not in pids  # processes, not threads
    assert 1 <= len(set(pids)) <= 2  # max_workers


def embedding_script(traces: Path, plugins: str) -> str:
    """The script of issue 14: program.TensorBoard configured and launched at module level.
    It asks its own TensorBoard for the runs until they are loaded, and prints them with
    what its Sync Advisor analysed them in."""
    return f"""
        import gc, json, time, urllib.request
        from tensorboard import program
        from tb_syncfinder.plugin.standalone import plugins_without_pytorch_profiler

        tb = program.TensorBoard({plugins})
        tb.configure(argv=[
            None, "--logdir", {str(traces / "logs")!r}, "--host", "127.0.0.1",
            "--port", "{free_port()}", "--sync_advisor_cache_dir", "none",
            "--sync_advisor_source_root", {str(traces / "src")!r},
            "--sync_advisor_reload_interval", "1",
        ])
        url = tb.launch()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            with urllib.request.urlopen(url + "data/plugin/sync_advisor/runs") as response:
                runs = json.load(response)
            if runs["runs"] and not runs["loading"]:
                break
            time.sleep(0.2)
        from tb_syncfinder.plugin.loader import TraceLoader

        loader = next(o for o in gc.get_objects() if isinstance(o, TraceLoader))
        pool = loader._executor
        print(json.dumps({{
            "pid": os.getpid(), "runs": runs, "use_processes": loader.use_processes,
            "worker_pids": list(getattr(pool, "pids", [])),
        }}), flush=True)
        """


def assert_loaded_in_processes(answer: dict[str, Any]) -> None:
    runs = answer["runs"]
    assert not runs["loading"] and not runs["errors"], runs
    assert [(r["name"], r["trace_count"], r["error_count"]) for r in runs["runs"]] == [
        ("run_cpu", 3, 0)
    ]
    assert answer["use_processes"]
    assert answer["worker_pids"] and answer["pid"] not in answer["worker_pids"]


def test_a_script_embedding_tensorboard_without_main_guard_starts_it_once(
    traces: Path, tmp_path: Path
) -> None:
    # Without torch-tb-profiler, whose run loader spawns processes of its own (next test).
    script = embedding_script(traces, "plugins=plugins_without_pytorch_profiler()")
    answer, marker, _ = run_script(tmp_path, script)
    assert marker == [str(answer["pid"])], "the script's body ran again in a worker"
    assert_loaded_in_processes(answer)


def test_where_another_plugin_runs_the_script_again_the_sync_advisor_says_so(
    traces: Path, tmp_path: Path
) -> None:
    """torch-tb-profiler's run loader starts spawn processes, which run a script without
    main guard again, TensorBoard and the Sync Advisor with it: not the Sync Advisor's
    doing, but it names the cause in the copy and loads nothing there. The script stands
    for TensorBoard and that plugin: it builds the Sync Advisor at module level, then
    starts a spawn process as the other plugin would."""
    answer, marker, err = run_script(
        tmp_path,
        f"""
        import json, multiprocessing
        from argparse import Namespace
        from tensorboard.plugins import base_plugin
        from tb_syncfinder.plugin.plugin import SyncAdvisorPlugin
        from tb_syncfinder.plugin.settings import PluginSettings

        settings = PluginSettings(logdirs=[(None, {str(traces / "logs")!r})], cache_dir=None)
        context = base_plugin.TBContext(flags=Namespace(), logdir=None)
        plugin = SyncAdvisorPlugin(context, settings)
        print(json.dumps({{"pid": os.getpid(), "loads": plugin.loader._thread is not None}}))
        if __name__ == "__main__":  # the other plugin's process
            other = multiprocessing.get_context("spawn").Process(target=os.getpid)
            other.start()
            other.join()
            print(json.dumps({{"pid": os.getpid(), "other": other.pid}}), flush=True)
        """,
    )
    assert answer["loads"]
    other = answer["other"]
    assert marker == [str(answer["pid"]), str(other)]
    assert (
        f"sync_advisor: TensorBoard is being started again, in process {other}, by the "
        f"script that started it in process {answer['pid']}: a process that multiprocessing"
    ) in err, err
    assert err.count("TensorBoard is being started again") == 1
    assert answer["others"] == [{"pid": other, "loads": False}]


def test_only_the_body_of_a_script_run_again_counts_as_run_again(tmp_path: Path) -> None:
    """A function of the script that a spawn process runs as its target (the proper way to
    start TensorBoard in a process) is not a re-run; the script's body in that process is."""
    answer, _, _ = run_script(
        tmp_path,
        """
        import json, multiprocessing
        from tb_syncfinder.plugin.workers import main_module_rerun

        def target():
            print(json.dumps({"pid": os.getpid(), "target": main_module_rerun()}), flush=True)

        print(json.dumps({"pid": os.getpid(), "body": main_module_rerun()}), flush=True)
        if __name__ == "__main__":
            other = multiprocessing.get_context("spawn").Process(target=target)
            other.start()
            other.join()
        """,
    )
    assert answer["body"] is False
    others = {k: v for a in answer["others"] for k, v in a.items() if k != "pid"}
    assert others == {"body": True, "target": False}


def test_a_trace_whose_process_dies_is_an_error_naming_it_and_the_others_load(
    traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(worker_probes.PROTECTED_ENV, str(os.getpid()))
    logs = tmp_path / "logs" / "run_cpu"
    logs.mkdir(parents=True)
    for name in ("w0", "crash"):
        shutil.copy(
            traces / "logs" / "run_cpu" / "w0.pt.trace.json", logs / f"{name}.pt.trace.json"
        )
    settings = PluginSettings(
        logdirs=[(None, str(tmp_path / "logs"))], source_roots=[str(traces / "src")]
    )
    loader = TraceLoader(
        settings.logdirs,
        make_engine_options(settings),
        DiskCache(None),
        reload_interval_s=3600,
        max_workers=2,
    )
    loader.analyze_fn = worker_probes.analyze_or_die
    try:
        for _ in range(MAX_TRANSIENT_ATTEMPTS):
            loader.poll()
            assert loader.wait_idle(120)
        run = loader.get_run("run_cpu")
        good = run.traces[str(logs / "w0.pt.trace.json")]
        crashed = run.traces[str(logs / "crash.pt.trace.json")]
        assert good.status == DONE and good.result.latent
        assert crashed.status == ERROR and loader.use_processes
        assert "the analysis process (pid " in crashed.error
        assert "was killed (SIGKILL: out of memory?) while it read this trace" in crashed.error
        errors = [r.info for r in loader.results(run, None, None) if r.info.error]
        assert [(e.path, e.error) for e in errors] == [(crashed.ref.path, crashed.error)]
        assert os.getpid() not in loader._executor.pids
    finally:
        loader.stop()
