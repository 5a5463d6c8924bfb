"""The plugin on a summarised logdir (issue 18): traces with a per-trace summary are served
from it without parsing; in a run that has summaries, a trace without a valid one is listed
with the command that writes it instead of being parsed; a run without summaries loads as
before."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync
from tensorboard.backend.application import TensorBoardWSGI
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_syncfinder import engine
from tb_syncfinder.cli import main as cli_main
from tb_syncfinder.models import TraceRef
from tb_syncfinder.plugin import SyncAdvisorPlugin
from tb_syncfinder.plugin.settings import PluginSettings, settings_from_flags

PLUGIN = "/data/plugin/sync_advisor/"
RANKS = 6


class CountingEngine:
    """engine.analyze_trace, counting which traces the plugin parsed itself."""

    def __init__(self) -> None:
        self.parsed: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, ref: TraceRef, options: Any) -> Any:
        with self.lock:
            self.parsed.append(f"{Path(ref.path).parent.name}/{Path(ref.path).name}")
        return engine.analyze_trace(ref, options)


def write_job(folder: Path, source: Path) -> None:
    b = KinetoTraceBuilder()
    for step in (1, 2):
        with b.step(step):
            item_sync(b, stack=[(str(source), 4, "train_step")])
    first = b.write(folder / "rank0.pt.trace.json")
    for rank in range(1, RANKS):
        shutil.copy(first, folder / f"rank{rank}.pt.trace.json")


@pytest.fixture()
def logdir(tmp_path: Path) -> Path:
    source = tmp_path / "src" / "train.py"
    source.parent.mkdir()
    source.write_text("import torch\n\n\ndef train_step(loss):\n    return loss.item()\n")
    write_job(tmp_path / "logs" / "job", source)
    write_job(tmp_path / "logs" / "plain", source)
    return tmp_path


def summarise(folder: Path, *paths: Path, summaries_dir: Path | None = None) -> None:
    """What a user runs (on the cluster): the CLI writing the summaries of ``paths``."""
    extra = ["--summaries-dir", str(summaries_dir)] if summaries_dir else []
    for path in paths:
        assert (
            cli_main(
                [
                    "report",
                    str(path),
                    "--write-summaries",
                    "--json",
                    "-o",
                    os.devnull,
                    "--source-root",
                    str(folder / "src"),
                    *extra,
                ]
            )
            == 0
        )


def start(
    logdir: Path, counting: CountingEngine, summaries_dir: Path | None = None
) -> tuple[SyncAdvisorPlugin, Client]:
    settings = PluginSettings(
        logdirs=[(None, str(logdir / "logs"))],
        source_roots=[str(logdir / "src")],
        cache_dir=None,
        reload_interval_s=3600,
        use_processes=False,
        summaries_dir=str(summaries_dir) if summaries_dir else None,
    )
    context = base_plugin.TBContext(logdir=str(logdir / "logs"), flags=argparse.Namespace())
    plugin = SyncAdvisorPlugin(context, settings, start=False, analyze_fn=counting)
    poll(plugin)
    return plugin, Client(TensorBoardWSGI([plugin]))


def poll(plugin: SyncAdvisorPlugin) -> None:
    plugin.loader.poll()
    assert plugin.loader.wait_idle(60)


def get(client: Client, route: str, **params: Any) -> Any:
    response = client.get(PLUGIN + route, query_string=params)
    assert response.status_code == 200, response.get_data()
    return json.loads(response.get_data())


def test_a_summarised_run_is_served_from_its_summaries_and_lists_the_traces_without_one(
    logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = logdir / "logs" / "job"
    summarise(logdir, *(job / f"rank{r}.pt.trace.json" for r in range(4)))
    counting = CountingEngine()
    plugin, client = start(logdir, counting)

    # The job's four summarised traces are read, its other two are neither parsed nor
    # errors; the run without summaries is parsed as always.
    assert sorted(counting.parsed) == [f"plain/rank{r}.pt.trace.json" for r in range(RANKS)]
    runs = get(client, "runs")
    job_run = next(r for r in runs["runs"] if r["name"] == "job")
    plain_run = next(r for r in runs["runs"] if r["name"] == "plain")
    assert (job_run["trace_count"], job_run["no_summary_count"], job_run["error_count"]) == (
        RANKS,
        2,
        0,
    )
    assert plain_run["no_summary_count"] == 0
    assert not runs["errors"] and not runs["loading"]
    (entry,) = runs["no_summary"]
    assert entry["run"] == "job" and entry["count"] == 2
    assert [os.path.basename(p) for p in entry["paths"]] == [
        "rank4.pt.trace.json",
        "rank5.pt.trace.json",
    ]
    assert entry["reasons"] == ["no summary"]
    assert entry["folder"] == str(job)
    summary = get(client, "summary", run="job")
    assert len(summary["traces"]) == 4
    assert summary["summary"]["sync_count"] == 4 * 2

    # The command it gives writes the missing summaries; the next poll serves them with
    # nothing parsed.
    command = shlex.split(entry["command"])
    assert command[:3] == ["tb-syncfinder", "report", "--write-summaries"]
    assert (
        cli_main([*command[1:], "--json", "-o", os.devnull, "--source-root", str(logdir / "src")])
        == 0
    )
    capsys.readouterr()
    parsed_before = len(counting.parsed)
    poll(plugin)
    assert len(counting.parsed) == parsed_before
    runs = get(client, "runs")
    assert runs["no_summary"] == []
    assert get(client, "summary", run="job")["summary"]["sync_count"] == RANKS * 2


def test_a_trace_changed_since_its_summary_is_listed_not_trusted(logdir: Path) -> None:
    job = logdir / "logs" / "job"
    summarise(logdir, job)
    changed = job / "rank3.pt.trace.json"
    changed.write_text(changed.read_text() + "\n")
    counting = CountingEngine()
    _, client = start(logdir, counting)
    assert all(p.startswith("plain/") for p in counting.parsed)
    (entry,) = get(client, "runs")["no_summary"]
    assert [os.path.basename(p) for p in entry["paths"]] == ["rank3.pt.trace.json"]
    assert entry["reasons"] == ["trace changed since its summary"]
    assert len(get(client, "summary", run="job")["traces"]) == RANKS - 1


def test_summaries_in_a_folder_of_their_own_are_read_with_the_flag(
    logdir: Path, tmp_path: Path
) -> None:
    store = tmp_path / "summaries"
    job = logdir / "logs" / "job"
    summarise(logdir, job, summaries_dir=store)
    counting = CountingEngine()
    _, client = start(logdir, counting, summaries_dir=store)
    assert all(p.startswith("plain/") for p in counting.parsed)
    assert get(client, "runs")["no_summary"] == []
    assert len(get(client, "summary", run="job")["traces"]) == RANKS

    flags = argparse.Namespace(sync_advisor_summaries_dir=str(store))
    assert settings_from_flags(flags, str(logdir)).summaries_dir == str(store)


def test_standalone_tensorboard_has_the_sync_advisor_and_not_the_pytorch_profiler() -> None:
    # torch-tb-profiler starts a process per trace file: a 1,000-rank job is served by a
    # TensorBoard without it (python -m tb_syncfinder.plugin.standalone).
    from tb_syncfinder.plugin import SyncAdvisorLoader
    from tb_syncfinder.plugin.standalone import plugins_without_pytorch_profiler

    plugins = plugins_without_pytorch_profiler()
    modules = {getattr(p, "__module__", type(p).__module__).split(".")[0] for p in plugins}
    assert SyncAdvisorLoader in plugins
    assert "torch_tb_profiler" not in modules and "tensorboard" in modules
