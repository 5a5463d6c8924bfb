"""A remote logdir (s3, gs, azure, hdfs: any scheme torch_tb_profiler's io layer serves),
analysed end to end by the engine and the plugin, with a broken trace beside a good one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kineto_builder import KinetoTraceBuilder, item_sync
from remote_fs import remote_bucket
from tensorboard.backend.application import TensorBoardWSGI
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_syncfinder import analyze
from tb_syncfinder.plugin import SyncAdvisorPlugin
from tb_syncfinder.plugin.settings import PluginSettings


def write_remote_run(root: Path) -> None:
    b = KinetoTraceBuilder()
    for n in (1, 2):
        with b.step(n):
            item_sync(b)
    b.write(root / "run_remote" / "worker0.1700000000000.pt.trace.json.gz")
    broken = root / "run_remote" / "worker1.1700000000001.pt.trace.json"
    broken.write_text('{"traceEvents": [')


def test_engine_analyzes_a_remote_logdir_and_names_the_broken_remote_file(tmp_path):
    root = tmp_path / "bucket"
    write_remote_run(root)
    with remote_bucket(root) as bucket:
        report = analyze(bucket)
    by_worker = {t.worker: t for t in report.traces}
    assert by_worker["worker0"].error is None
    good = f"{bucket}/run_remote/worker0.1700000000000.pt.trace.json.gz"
    assert by_worker["worker0"].path == good
    assert "truncated" in (by_worker["worker1"].error or "")
    assert [s.op for s in report.syncs] == ["aten::item", "aten::item"]
    assert all(s.host_wait_us > 0 for s in report.syncs)


def test_plugin_serves_runs_and_sites_of_a_remote_logdir(tmp_path):
    root = tmp_path / "bucket"
    write_remote_run(root)
    with remote_bucket(root) as bucket:
        settings = PluginSettings(
            logdirs=[(None, bucket)],
            source_roots=[str(tmp_path)],
            cache_dir=str(tmp_path / "cache"),
            reload_interval_s=3600,
            use_processes=False,
        )
        context = base_plugin.TBContext(logdir=bucket, flags=argparse.Namespace())
        plugin = SyncAdvisorPlugin(context, settings, start=False)
        plugin.loader.poll()
        assert plugin.loader.wait_idle(60)
        client = Client(TensorBoardWSGI([plugin]))
        runs = json.loads(client.get("/data/plugin/sync_advisor/runs").get_data())
        sites = json.loads(
            client.get(
                "/data/plugin/sync_advisor/sites", query_string={"run": "run_remote"}
            ).get_data()
        )
    assert [r["name"] for r in runs["runs"]] == ["run_remote"]
    assert [e["path"] for e in runs["errors"]] == [
        f"{bucket}/run_remote/worker1.1700000000001.pt.trace.json"
    ]
    assert sites["total"] == 1
    assert sites["items"][0]["count"] == 2
    assert sites["items"][0]["ops"][0] == "aten::item"


def test_a_cloud_sdk_error_on_one_remote_file_is_that_files_error_not_a_crash(
    tmp_path, monkeypatch
):
    from torch_tb_profiler import io as tb_io

    from tb_syncfinder.engine import analyze_trace

    class AccessDenied(Exception):  # what botocore & co. raise: not an OSError
        pass

    root = tmp_path / "bucket"
    write_remote_run(root)
    with remote_bucket(root) as bucket:

        def deny(path):
            raise AccessDenied("403 Forbidden")

        monkeypatch.setattr(tb_io, "read", deny)
        result = analyze_trace(f"{bucket}/run_remote/worker0.1700000000000.pt.trace.json.gz")
    assert result.info.error is not None
    assert "AccessDenied: 403 Forbidden" in result.info.error
